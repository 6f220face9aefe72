"""Tiny real pipelines whose call structure breaks simple phase-boundary detection.

Each entry of :data:`STRUCTURAL` builds the real diffusers class from small configs with seeded
random weights on the CPU, like :mod:`~ddo_hooks.testing.tiny_pipelines`: nothing is read from
or written to a model hub, the same seed gives bitwise-identical weights and outputs, a build
takes a few seconds at most and a call with :func:`structural_call_kwargs` about a second. They
cover the shapes of ``__call__`` that a detector of ``before_transformer``, ``before_vae`` and
``after_call`` has to survive:

* delegation to sub-pipelines (Kandinsky 2.1 and 2.2 combined, VisualCloze);
* more than one denoising loop in one call (Stable unCLIP, SkyReels-V2 diffusion forcing
  video-to-video, AnimateDiff with FreeInit, VisualCloze);
* ``maybe_free_model_hooks()`` called before the VAE decode (image variation, AudioLDM 2,
  MusicLDM, Paint-by-Example), or never (LDM text-to-image);
* the decode and ``maybe_free_model_hooks()`` inside the progress-bar block (Kandinsky 3), and
  chunks of a video each decoded inside a progress-bar block (Helios, Cosmos 2.5 Transfer);
* a loop driven by raw ``tqdm`` instead of ``self.progress_bar`` (AnyFlow FAR);
* two denoisers in one loop (Wan 2.2 with ``transformer_2``).

Three calls skip their text encoder, because of diffusers 0.42.1 bugs: SkyReels-V2 and Helios
get prompt embeddings (their prompt cleaning calls ``ftfy`` without checking it is installed)
and MusicLDM gets CLAP text features (it does not unwrap what ``ClapModel.get_text_features``
returns under transformers 5). Cosmos 2.5 Transfer runs with a stand-in controlnet that adds
nothing (diffusers' resizes its masks with torchvision, not a dependency here) and a guardrail
that lets everything through. Needs the ``demo`` extra (``transformers``).

Examples:
    >>> pipe = build_structural("ldm_text2img")
    >>> type(pipe).__name__
    'LDMTextToImagePipeline'
    >>> pipe(**structural_call_kwargs("ldm_text2img")).images.shape
    (1, 16, 16, 3)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import torch

from ddo_hooks.testing._components import quiet_transformers
from ddo_hooks.testing.structural._builders import BUILDERS as _BUILDERS
from ddo_hooks.testing.structural._calls import call_settings

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

__all__ = ["CLASS_NAMES", "STAGED", "STRUCTURAL", "build_structural", "structural_call_kwargs", "sub_pipelines"]

STAGED: tuple[str, ...] = (
    "kandinsky21_combined",
    "kandinsky21_img2img_combined",
    "kandinsky21_inpaint_combined",
    "kandinsky22_combined",
    "kandinsky22_img2img_combined",
    "kandinsky22_inpaint_combined",
    "stable_unclip",
    "visualcloze",
    "kandinsky3",
    "kandinsky3_img2img",
    "helios",
    "cosmos25_transfer",
)
"""The structural pipelines whose boundaries issue 20 found misplaced or lost (stages of a call, decodes inside a
progress bar): their timelines are checked under group offloading too."""

STRUCTURAL: dict[str, str] = {
    "kandinsky21_combined": (
        "KandinskyCombinedPipeline (2.1): __call__ runs a prior sub-pipeline (prior_pipe: PriorTransformer "
        "'prior_prior', its own progress bar) then a decoder sub-pipeline (decoder_pipe: unet, movq), each "
        "freeing its own hooks; the combined pipeline has no progress bar and no check_inputs of its own"
    ),
    "kandinsky21_img2img_combined": (
        "KandinskyImg2ImgCombinedPipeline (2.1): as the text-to-image one, the decoder pipeline encoding the "
        "input image with movq before its loop"
    ),
    "kandinsky21_inpaint_combined": (
        "KandinskyInpaintCombinedPipeline (2.1): as the text-to-image one, the decoder pipeline encoding the "
        "masked image with movq before its loop"
    ),
    "kandinsky22_combined": (
        "KandinskyV22CombinedPipeline (2.2): prior_pipe then decoder_pipe (unet, movq), as 2.1 but image-only "
        "unet conditioning, and the prior's image_encoder runs after the prior's loop; no progress bar and no "
        "check_inputs on the combined pipeline"
    ),
    "kandinsky22_img2img_combined": (
        "KandinskyV22Img2ImgCombinedPipeline (2.2): as the text-to-image one, the decoder pipeline encoding the "
        "input image with movq before its loop"
    ),
    "kandinsky22_inpaint_combined": (
        "KandinskyV22InpaintCombinedPipeline (2.2): as the text-to-image one, the decoder pipeline encoding the "
        "masked image with movq before its loop"
    ),
    "visualcloze": (
        "VisualClozePipeline: delegates to generation_pipe (a Flux-fill loop, decoded to PIL) then "
        "upsampling_pipe (a second loop and a second decode), both sharing the same transformer and vae"
    ),
    "stable_unclip": (
        "StableUnCLIPPipeline: two denoising loops in one __call__, the prior (PriorTransformer 'prior') then "
        "the unet, each iterating its own self.progress_bar(...)"
    ),
    "skyreels_v2_df_v2v": (
        "SkyReelsV2DiffusionForcingVideoToVideoPipeline: a long-video outer loop runs the progress-bar block "
        "once per segment (two here), decoding once after the last"
    ),
    "animatediff_freeinit": (
        "AnimateDiffPipeline with FreeInit (num_iters=2): the progress-bar block runs once per FreeInit "
        "iteration inside an outer loop, decoding once after the last"
    ),
    "sd_image_variation": (
        "StableDiffusionImageVariationPipeline: maybe_free_model_hooks() right after the loop, before "
        "vae.decode, and again at the end"
    ),
    "audioldm2": (
        "AudioLDM2Pipeline: maybe_free_model_hooks() after the loop, then vae.decode and the vocoder "
        "(mel spectrogram to waveform); GPT-2 generation before the loop"
    ),
    "musicldm": "MusicLDMPipeline: maybe_free_model_hooks() after the loop, then vae.decode and the vocoder",
    "paint_by_example": "PaintByExamplePipeline: maybe_free_model_hooks() after the loop, then vae.decode only",
    "ldm_text2img": (
        "LDMTextToImagePipeline: never calls maybe_free_model_hooks(), has no check_inputs; "
        "for t in self.progress_bar(...) then vqvae.decode"
    ),
    "kandinsky3": (
        "Kandinsky3Pipeline: movq.decode, maybe_free_model_hooks() and the return all inside the "
        "`with self.progress_bar(...)` block"
    ),
    "kandinsky3_img2img": (
        "Kandinsky3Img2ImgPipeline: movq.encode before the loop; movq.decode, maybe_free_model_hooks() and the "
        "return inside the `with self.progress_bar(...)` block"
    ),
    "helios": (
        "HeliosPipeline: a `with self.progress_bar(...)` block per chunk of frames inside an outer chunk loop, "
        "each chunk decoded inside its block (one chunk here)"
    ),
    "cosmos25_transfer": (
        "Cosmos2_5_TransferPipeline: one `with self.progress_bar(...)` block around every chunk's loop, each "
        "chunk encoding its controls with the VAE and decoded inside the block; a controlnet runs beside the "
        "transformer at every step"
    ),
    "anyflow_far": (
        "AnyFlowFARPipeline: chunk and step loops driven by raw tqdm (never self.progress_bar); the "
        "transformer also runs outside the steps, filling the KV cache between chunks"
    ),
    "wan22": (
        "WanPipeline (Wan 2.2) with transformer_2 and boundary_ratio: high-noise steps run "
        "'transformer', low-noise steps 'transformer_2', in one loop"
    ),
}
"""Every structural pipeline: name -> one line on what its ``__call__`` does that matters."""


CLASS_NAMES: dict[str, str] = {name: built[0] for name, built in _BUILDERS.items()}
"""Each structural pipeline's diffusers class name."""


def _check_name(name: object) -> str:
    if name not in STRUCTURAL:
        raise ValueError(f"name must be one of {sorted(STRUCTURAL)}, got {name!r}")
    return name


def build_structural(name: str, *, seed: int = 0) -> DiffusionPipeline:
    """Build the tiny real pipeline ``name`` of :data:`STRUCTURAL` with seeded random weights, on the CPU.

    The global torch RNG is left as it was. Every model is in eval mode (sub-pipelines share
    them), the progress bars are off.

    Args:
        name: A key of :data:`STRUCTURAL`.
        seed: Seeds the weight initialisation; the same seed gives bitwise-identical weights.

    Returns:
        The pipeline, an instance of the diffusers class :data:`STRUCTURAL` names.

    Raises:
        ValueError: If ``name`` is not a key of :data:`STRUCTURAL`.

    Examples:
        >>> pipe = build_structural("kandinsky22_combined", seed=1)
        >>> type(pipe.prior_pipe).__name__, type(pipe.decoder_pipe).__name__
        ('KandinskyV22PriorPipeline', 'KandinskyV22Pipeline')
    """
    pipeline_name, components_fn, after_build = _BUILDERS[_check_name(name)]
    with quiet_transformers():  # the pipeline modules import transformers' image processors
        pipeline_cls = getattr(importlib.import_module("diffusers"), pipeline_name)
    with torch.random.fork_rng(devices=[]), quiet_transformers():
        torch.manual_seed(seed)
        pipe = pipeline_cls(**components_fn())  # AnimateDiff builds its motion UNet here, from the RNG too
        if after_build is not None:
            after_build(pipe)
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            component.eval()  # as from_pretrained leaves it
    pipe.set_progress_bar_config(disable=True)
    for sub in sub_pipelines(pipe).values():
        sub.set_progress_bar_config(disable=True)  # type: ignore[attr-defined]  # VisualCloze does not pass the setting on
    return pipe


def sub_pipelines(pipe: Any) -> dict[str, DiffusionPipeline]:
    """The pipelines a pipeline holds as attributes (``prior_pipe``, ``decoder_pipe``, ...), by name.

    Examples:
        >>> sorted(sub_pipelines(build_structural("visualcloze")))
        ['generation_pipe', 'upsampling_pipe']
    """
    from diffusers import DiffusionPipeline

    return {name: value for name, value in vars(pipe).items() if isinstance(value, DiffusionPipeline)}


def structural_call_kwargs(name: str, *, steps: int = 2, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments for a fast, deterministic ``pipe(**kwargs)`` call of structural pipeline ``name``.

    Args:
        name: A key of :data:`STRUCTURAL`.
        steps: ``num_inference_steps`` (also ``prior_num_inference_steps`` where there is a prior).
        seed: Seeds a fresh CPU :class:`torch.Generator` and the input images, if any.

    Returns:
        The call's keyword arguments; every output is decoded (``output_type`` ``"pt"``, or
        ``"np"`` where the pipeline knows no other; the audio pipelines return waveforms).

    Raises:
        ValueError: If ``name`` is not a key of :data:`STRUCTURAL`.

    Examples:
        >>> kwargs = structural_call_kwargs("stable_unclip", steps=1)
        >>> kwargs["num_inference_steps"], kwargs["prior_num_inference_steps"]
        (1, 1)
    """
    return {
        "num_inference_steps": steps,
        **call_settings(_check_name(name), steps, seed),
        "generator": torch.Generator("cpu").manual_seed(seed),
    }
