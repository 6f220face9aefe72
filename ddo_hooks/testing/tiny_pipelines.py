"""Tiny real diffusers pipelines with random weights, built locally for tests and demos.

Each family builds the real pipeline class from the smallest configs its model classes accept,
with randomly initialised weights (seeded, so the same seed gives bitwise-identical weights and
outputs) and word-level tokenizers built in memory. Nothing is read from or written to a model
hub: no ``from_pretrained`` is ever called. A call with :func:`call_kwargs` takes well under a
second on a laptop CPU. Needs the ``demo`` extra (``transformers``), imported only when a
pipeline is built.

Examples:
    >>> pipe = build_pipeline("sd", seed=0)
    >>> pipe(**call_kwargs("sd")).images.shape
    torch.Size([1, 3, 32, 32])
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import torch
from diffusers import UniPCMultistepScheduler
from diffusers.schedulers import FlowMatchEulerDiscreteScheduler

from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.testing import FAMILIES, Family
from ddo_hooks.testing._components import (
    TEXT_LEN,
    cast_module,
    clip_text,
    ddim,
    flux_transformer,
    kl_vae,
    quiet_transformers,
    sd_unet,
    t5_encoder,
    umt5_encoder,
    wan_transformer,
    wan_vae,
    word_tokenizer,
)

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline

__all__ = ["FAMILIES", "Family", "build_pipeline", "call_kwargs", "embed_prompt"]

# Per-family call settings shared by call_kwargs and embed_prompt.
_CALL: dict[str, dict[str, Any]] = {
    "flux": {"height": 32, "width": 32, "guidance_scale": 3.5, "max_sequence_length": TEXT_LEN},
    "sd": {"height": 32, "width": 32, "guidance_scale": 7.5},
    "wan": {
        "height": 16,
        "width": 16,
        "num_frames": 5,
        "guidance_scale": 5.0,
        "max_sequence_length": TEXT_LEN,
    },
}


def _check_family(family: object) -> Family:
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    return family


def _flux_components() -> dict[str, Any]:
    transformer = flux_transformer(guidance_embeds=True)
    text_encoder, tokenizer = clip_text()
    text_encoder_2 = t5_encoder()
    vae = kl_vae(16, use_quant_conv=False, use_post_quant_conv=False, scaling_factor=0.3611, shift_factor=0.1159)
    return {
        "transformer": transformer,
        "vae": vae,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "text_encoder_2": text_encoder_2,
        "tokenizer_2": word_tokenizer(bos=False, model_max_length=512),
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True),
    }


def _sd_components() -> dict[str, Any]:
    unet = sd_unet()
    text_encoder, tokenizer = clip_text()
    return {
        "unet": unet,
        "vae": kl_vae(4, scaling_factor=0.18215),
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "scheduler": ddim(),
        "safety_checker": None,
        "feature_extractor": None,
        "requires_safety_checker": False,
    }


def _wan_components() -> dict[str, Any]:
    transformer = wan_transformer(qk_norm="rms_norm_across_heads")
    vae = wan_vae()
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    return {
        "transformer": transformer,
        "vae": vae,
        "text_encoder": umt5_encoder(),
        "tokenizer": word_tokenizer(bos=False, model_max_length=512),
        "scheduler": scheduler,
    }


_BUILDERS = {
    "flux": ("FluxPipeline", _flux_components),
    "sd": ("StableDiffusionPipeline", _sd_components),
    "wan": ("WanPipeline", _wan_components),
}


def build_pipeline(family: Family, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> DiffusionPipeline:
    """Build a tiny real pipeline of ``family`` with seeded random weights, on the CPU.

    The global torch RNG is left as it was. Every model is in eval mode, the progress bar is off.

    Args:
        family: ``"flux"``, ``"sd"`` or ``"wan"``.
        seed: Seeds the weight initialisation; the same seed gives bitwise-identical weights.
        dtype: The dtype of every model's parameters.

    Returns:
        A :class:`~diffusers.FluxPipeline`, :class:`~diffusers.StableDiffusionPipeline` or
        :class:`~diffusers.WanPipeline`.

    Raises:
        ValueError: If ``family`` is not one of :data:`FAMILIES`.

    Examples:
        >>> pipe = build_pipeline("flux", seed=1)
        >>> type(pipe).__name__, pipe.vae.config.latent_channels
        ('FluxPipeline', 16)
    """
    pipeline_name, components_fn = _BUILDERS[_check_family(family)]
    with quiet_transformers():  # the pipeline modules import transformers' image processors
        pipeline_cls = getattr(importlib.import_module("diffusers"), pipeline_name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        components = components_fn()
    for component in components.values():
        if isinstance(component, torch.nn.Module):
            cast_module(component, dtype)
            component.eval()  # as from_pretrained leaves it
    pipe = pipeline_cls(**components)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def call_kwargs(family: Family, *, steps: int = 2, seed: int = 0, output_type: str = "pt") -> dict[str, Any]:
    """Keyword arguments for a fast, deterministic ``pipe(**kwargs)`` call of ``family``.

    Args:
        family: ``"flux"``, ``"sd"`` or ``"wan"``.
        steps: ``num_inference_steps``.
        seed: Seeds a fresh CPU :class:`torch.Generator` for the initial noise.
        output_type: ``"pt"``, ``"np"``, ``"pil"`` or ``"latent"``.

    Returns:
        ``prompt``, ``num_inference_steps``, ``height``/``width`` (and ``num_frames`` for wan),
        ``guidance_scale`` (classifier-free guidance for sd and wan, the guidance embedding
        for flux), ``max_sequence_length`` (flux, wan), ``generator`` and ``output_type``.

    Examples:
        >>> kwargs = call_kwargs("wan", steps=3)
        >>> kwargs["num_inference_steps"], kwargs["num_frames"], kwargs["height"]
        (3, 5, 16)
    """
    return {
        "prompt": "a tiny test prompt",
        "num_inference_steps": steps,
        **_CALL[_check_family(family)],
        "generator": torch.Generator("cpu").manual_seed(seed),
        "output_type": output_type,
    }


def embed_prompt(
    pipe: DiffusionPipeline, family: Family, prompt: str = "a tiny test prompt"
) -> dict[str, torch.Tensor]:
    """Encode ``prompt`` with the pipeline's own ``encode_prompt``, for calls without text encoders.

    Pass the result with ``prompt=None`` (e.g. ``pipe(**{**call_kwargs(f), "prompt": None,
    **embeds})``); the call then needs no tokenizer or text encoder, so they can be set to None.
    The settings (guidance, sequence length) match :func:`call_kwargs`.

    Args:
        pipe: A pipeline of ``family`` whose text encoders and tokenizers are still present.
        family: ``"flux"``, ``"sd"`` or ``"wan"``.
        prompt: The prompt to encode; the negative prompt is empty.

    Returns:
        flux: ``prompt_embeds`` and ``pooled_prompt_embeds``; sd and wan: ``prompt_embeds`` and
        ``negative_prompt_embeds`` (both use classifier-free guidance).

    Examples:
        >>> pipe = build_pipeline("wan")
        >>> embeds = embed_prompt(pipe, "wan")
        >>> pipe.text_encoder = pipe.tokenizer = None
        >>> kwargs = {**call_kwargs("wan"), "prompt": None, **embeds}
        >>> pipe(**kwargs).frames.shape
        torch.Size([1, 5, 3, 16, 16])
    """
    settings = _CALL[_check_family(family)]
    with torch.no_grad():
        if family == "flux":
            embeds, pooled, _ = pipe.encode_prompt(  # type: ignore[attr-defined]  # diffusers ships no types: mypy sees no encode_prompt
                prompt=prompt, prompt_2=None, max_sequence_length=settings["max_sequence_length"]
            )
            return {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled}
        if family == "sd":
            embeds, negative = pipe.encode_prompt(  # type: ignore[attr-defined]  # diffusers ships no types: mypy sees no encode_prompt
                prompt,
                diffusers_compat.execution_device(pipe),
                num_images_per_prompt=1,
                do_classifier_free_guidance=True,
            )
        else:
            embeds, negative = pipe.encode_prompt(  # type: ignore[attr-defined]  # diffusers ships no types: mypy sees no encode_prompt
                prompt, do_classifier_free_guidance=True, max_sequence_length=settings["max_sequence_length"]
            )
    return {"prompt_embeds": embeds, "negative_prompt_embeds": negative}
