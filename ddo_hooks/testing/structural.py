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
* the decode and ``maybe_free_model_hooks()`` inside the progress-bar block (Kandinsky 3);
* a loop driven by raw ``tqdm`` instead of ``self.progress_bar`` (AnyFlow FAR);
* two denoisers in one loop (Wan 2.2 with ``transformer_2``).

Two calls skip their text encoder, because of diffusers 0.42.1 bugs: SkyReels-V2 gets prompt
embeddings (its prompt cleaning calls ``ftfy`` without checking it is installed) and MusicLDM
gets CLAP text features (it does not unwrap what ``ClapModel.get_text_features`` returns under
transformers 5). Needs the ``demo`` extra (``transformers``).

Examples:
    >>> pipe = build_structural("ldm_text2img")
    >>> type(pipe).__name__
    'LDMTextToImagePipeline'
    >>> pipe(**structural_call_kwargs("ldm_text2img")).images.shape
    (1, 16, 16, 3)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ddo_hooks.testing._components import (
    CLIP_LEN,
    HIDDEN,
    TEXT_LEN,
    VOCAB,
    clip_text,
    kl_vae,
    quiet_transformers,
    t5_config,
    transformers_module,
    word_tokenizer,
)

if TYPE_CHECKING:
    from diffusers import DiffusionPipeline
    from PIL import Image

__all__ = ["CLASS_NAMES", "STRUCTURAL", "build_structural", "structural_call_kwargs", "sub_pipelines"]

STRUCTURAL: dict[str, str] = {
    "kandinsky21_combined": (
        "KandinskyCombinedPipeline (2.1): __call__ runs a prior sub-pipeline (prior_pipe: PriorTransformer "
        "'prior_prior', its own progress bar) then a decoder sub-pipeline (decoder_pipe: unet, movq), each "
        "freeing its own hooks; the combined pipeline has no progress bar and no check_inputs of its own"
    ),
    "kandinsky22_combined": (
        "KandinskyV22CombinedPipeline (2.2): prior_pipe then decoder_pipe (unet, movq), as 2.1 but image-only "
        "unet conditioning; no progress bar and no check_inputs on the combined pipeline"
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


# -- shared parts ------------------------------------------------------------------------------


def _clip_with_projection() -> tuple[Any, Any]:
    """A CLIP text encoder with a projection head (``text_embeds``) of width ``HIDDEN``, and its tokenizer."""
    transformers = transformers_module()
    config = transformers.CLIPTextConfig(
        vocab_size=len(VOCAB),
        hidden_size=HIDDEN,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=CLIP_LEN,
        projection_dim=HIDDEN,
        pad_token_id=VOCAB["<pad>"],
        bos_token_id=VOCAB["<s>"],
        eos_token_id=VOCAB["</s>"],
    )
    return transformers.CLIPTextModelWithProjection(config), word_tokenizer(bos=True, model_max_length=CLIP_LEN)


def _typed_tokenizer(class_name: str, *, bos: bool, model_max_length: int) -> Any:
    """The word-level tokenizer as an instance of transformers' ``class_name`` (pipelines that check the type)."""
    base = word_tokenizer(bos=bos, model_max_length=model_max_length)
    specials = {
        "pad_token": "<pad>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        **({"bos_token": "<s>"} if bos else {}),
    }
    tokenizer_cls = getattr(transformers_module(), class_name)
    return tokenizer_cls(tokenizer_object=base.backend_tokenizer, model_max_length=model_max_length, **specials)


def _clip_vision_config() -> Any:
    """A two-layer CLIP vision tower over 32x32 images in 8x8 patches, projecting to ``HIDDEN``."""
    return transformers_module().CLIPVisionConfig(
        hidden_size=HIDDEN,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
        projection_dim=HIDDEN,
    )


def _clip_image_processor() -> Any:
    """The PIL-backed CLIP image processor (no torchvision), resizing and cropping to 32x32."""
    transformers = transformers_module()
    return transformers.CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})


def _t5() -> Any:
    transformers = transformers_module()
    return transformers.T5EncoderModel(transformers.T5Config(**t5_config()))


def _umt5() -> Any:
    transformers = transformers_module()
    return transformers.UMT5EncoderModel(transformers.UMT5Config(**t5_config()))


def _sd_unet(**extra: Any) -> Any:
    """A two-level SD-style UNet (8 and 16 channels) reading ``HIDDEN``-wide text states."""
    from diffusers import UNet2DConditionModel

    settings: dict[str, Any] = {
        "sample_size": 4,
        "in_channels": 4,
        "out_channels": 4,
        "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
        "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
        "block_out_channels": (8, 16),
        "layers_per_block": 1,
        "norm_num_groups": 4,
        "cross_attention_dim": HIDDEN,
        "attention_head_dim": 2,
    }
    return UNet2DConditionModel(**{**settings, **extra})


def _ddim(**extra: Any) -> Any:
    from diffusers import DDIMScheduler

    settings: dict[str, Any] = {
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "clip_sample": False,
        "set_alpha_to_one": False,
        "steps_offset": 1,
    }
    return DDIMScheduler(**{**settings, **extra})


def _prior_transformer() -> Any:
    """A one-layer unCLIP prior over ``HIDDEN``-wide CLIP embeddings (77 text tokens)."""
    from diffusers import PriorTransformer

    prior = PriorTransformer(num_attention_heads=2, attention_head_dim=12, embedding_dim=HIDDEN, num_layers=1)
    with torch.no_grad():
        prior.clip_std.fill_(1.0)  # initialised to zeros, which would make every image embedding zero
    return prior


def _movq() -> Any:
    """A two-level MoVQ (VQModel with spatial norm; its GroupNorms need multiples of 32 channels)."""
    from diffusers import VQModel

    return VQModel(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "AttnDownEncoderBlock2D"),
        up_block_types=("AttnUpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(32, 64),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=8,
        norm_type="spatial",
        num_vq_embeddings=12,
        vq_embed_dim=4,
    )


def _wan_vae() -> Any:
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(
        base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
    )


def _wan_transformer(model: str = "WanTransformer3DModel", **extra: Any) -> Any:
    diffusers = importlib.import_module("diffusers")
    settings: dict[str, Any] = {
        "patch_size": (1, 2, 2),
        "num_attention_heads": 2,
        "attention_head_dim": 12,
        "in_channels": 16,
        "out_channels": 16,
        "text_dim": HIDDEN,
        "freq_dim": 32,
        "ffn_dim": 32,
        "num_layers": 2,
        "cross_attn_norm": True,
        "rope_max_seq_len": 32,
    }
    return getattr(diffusers, model)(**{**settings, **extra})


def _clap() -> Any:
    """A CLAP model with a two-layer text branch (width 16) and the smallest audio branch it accepts."""
    transformers = transformers_module()
    text = transformers.ClapTextConfig(
        vocab_size=len(VOCAB),
        hidden_size=16,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=CLIP_LEN + 2,
        pad_token_id=VOCAB["<pad>"],
        bos_token_id=VOCAB["<s>"],
        eos_token_id=VOCAB["</s>"],
    )
    audio = transformers.ClapAudioConfig(
        spec_size=64,
        window_size=4,
        num_mel_bins=64,
        intermediate_size=37,
        depths=[1, 1],
        num_attention_heads=[2, 2],
        num_hidden_layers=2,
        hidden_size=32,
        patch_size=2,
        patch_stride=2,
        patch_embed_input_channels=4,
    )
    config = transformers.ClapConfig(text_config=text.to_dict(), audio_config=audio.to_dict(), projection_dim=16)
    return transformers.ClapModel(config)


def _audio_vae() -> Any:
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=1,
        out_channels=1,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(8, 8),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
    )


def _vocoder() -> Any:
    """A HiFi-GAN vocoder from 8 mel bins, upsampling 4x."""
    transformers = transformers_module()
    config = transformers.SpeechT5HifiGanConfig(
        model_in_dim=8,
        sampling_rate=16000,
        upsample_initial_channel=16,
        upsample_rates=[2, 2],
        upsample_kernel_sizes=[4, 4],
        resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3]],
        normalize_before=False,
    )
    return transformers.SpeechT5HifiGan(config)


# -- component builders -----------------------------------------------------------------------


def _kandinsky22_prior_parts() -> dict[str, Any]:
    from diffusers import UnCLIPScheduler

    transformers = transformers_module()
    text_encoder, tokenizer = _clip_with_projection()
    return {
        "prior_prior": _prior_transformer(),
        "prior_image_encoder": transformers.CLIPVisionModelWithProjection(_clip_vision_config()),
        "prior_text_encoder": text_encoder,
        "prior_tokenizer": tokenizer,
        "prior_scheduler": UnCLIPScheduler(
            variance_type="fixed_small_log", prediction_type="sample", clip_sample=True, clip_sample_range=10.0
        ),
        "prior_image_processor": _clip_image_processor(),
    }


def _kandinsky_unet(**extra: Any) -> Any:
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        in_channels=4,
        out_channels=8,  # mean and variance
        down_block_types=("ResnetDownsampleBlock2D", "SimpleCrossAttnDownBlock2D"),
        up_block_types=("SimpleCrossAttnUpBlock2D", "ResnetUpsampleBlock2D"),
        mid_block_type="UNetMidBlock2DSimpleCrossAttn",
        block_out_channels=(16, 32),
        layers_per_block=1,
        norm_num_groups=8,
        encoder_hid_dim=HIDDEN,
        cross_attention_dim=HIDDEN,
        attention_head_dim=4,
        resnet_time_scale_shift="scale_shift",
        class_embed_type=None,
        **extra,
    )


def _kandinsky21_combined() -> dict[str, Any]:
    from diffusers.pipelines.kandinsky.text_encoder import MCLIPConfig, MultilingualCLIP

    config = MCLIPConfig(
        transformerDimSize=HIDDEN,
        imageDimSize=HIDDEN,
        vocab_size=len(VOCAB),
        hidden_size=HIDDEN,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=CLIP_LEN + 2,
        pad_token_id=VOCAB["<pad>"],
        bos_token_id=VOCAB["<s>"],
        eos_token_id=VOCAB["</s>"],
    )
    return {
        "text_encoder": MultilingualCLIP(config),
        "tokenizer": word_tokenizer(bos=True, model_max_length=CLIP_LEN),
        "unet": _kandinsky_unet(addition_embed_type="text_image", encoder_hid_dim_type="text_image_proj"),
        "scheduler": _ddim(beta_schedule="linear", prediction_type="epsilon"),
        "movq": _movq(),
        **_kandinsky22_prior_parts(),
    }


def _kandinsky22_combined() -> dict[str, Any]:
    from diffusers import DDPMScheduler

    return {
        "unet": _kandinsky_unet(addition_embed_type="image", encoder_hid_dim_type="image_proj"),
        "scheduler": DDPMScheduler(beta_schedule="linear", beta_start=0.00085, beta_end=0.012, clip_sample=False),
        "movq": _movq(),
        **_kandinsky22_prior_parts(),
    }


def _visualcloze() -> dict[str, Any]:
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel

    text_encoder, tokenizer = clip_text()
    return {
        "transformer": FluxTransformer2DModel(
            patch_size=1,
            in_channels=12,  # packed latents (4), packed condition latents (4), packed mask (4)
            out_channels=4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=6,
            num_attention_heads=2,
            joint_attention_dim=HIDDEN,
            pooled_projection_dim=HIDDEN,
            axes_dims_rope=(2, 2, 2),
        ),
        "vae": AutoencoderKL(
            in_channels=3,
            out_channels=3,
            block_out_channels=(4,),
            layers_per_block=1,
            latent_channels=1,
            norm_num_groups=1,
            use_quant_conv=False,
            use_post_quant_conv=False,
            shift_factor=0.0609,
            scaling_factor=1.5035,
            sample_size=32,
        ),
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "text_encoder_2": _t5(),
        "tokenizer_2": word_tokenizer(bos=False, model_max_length=512),
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "resolution": 16,
    }


def _stable_unclip() -> dict[str, Any]:
    from diffusers import DDPMScheduler
    from diffusers.pipelines.stable_diffusion.stable_unclip_image_normalizer import StableUnCLIPImageNormalizer

    prior_text_encoder, prior_tokenizer = _clip_with_projection()
    text_encoder, tokenizer = clip_text()
    return {
        "prior_tokenizer": prior_tokenizer,
        "prior_text_encoder": prior_text_encoder,
        "prior": _prior_transformer(),
        "prior_scheduler": DDPMScheduler(
            variance_type="fixed_small_log",
            prediction_type="sample",
            clip_sample=True,
            clip_sample_range=5.0,
            beta_schedule="squaredcos_cap_v2",
        ),
        "image_normalizer": StableUnCLIPImageNormalizer(embedding_dim=HIDDEN),
        "image_noising_scheduler": DDPMScheduler(beta_schedule="squaredcos_cap_v2"),
        "tokenizer": tokenizer,
        "text_encoder": text_encoder,
        "unet": _sd_unet(class_embed_type="projection", projection_class_embeddings_input_dim=2 * HIDDEN),
        "scheduler": _ddim(prediction_type="v_prediction"),
        "vae": kl_vae(4, scaling_factor=0.18215),
    }


def _skyreels_v2_df_v2v() -> dict[str, Any]:
    from diffusers import UniPCMultistepScheduler

    return {
        "transformer": _wan_transformer("SkyReelsV2Transformer3DModel", qk_norm="rms_norm_across_heads"),
        "vae": _wan_vae(),
        "text_encoder": _umt5(),
        "tokenizer": word_tokenizer(bos=False, model_max_length=512),
        "scheduler": UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0),
    }


def _animatediff() -> dict[str, Any]:
    from diffusers import MotionAdapter

    text_encoder, tokenizer = clip_text()
    return {
        "unet": _sd_unet(
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            norm_num_groups=2,
        ),
        "motion_adapter": MotionAdapter(
            block_out_channels=(8, 16),
            motion_layers_per_block=1,
            motion_norm_num_groups=2,
            motion_num_attention_heads=2,
            motion_max_seq_length=8,
        ),
        "vae": kl_vae(4, scaling_factor=0.18215),
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "scheduler": _ddim(beta_schedule="linear"),
        "feature_extractor": None,
        "image_encoder": None,
    }


def _sd_image_variation() -> dict[str, Any]:
    transformers = transformers_module()
    return {
        "vae": kl_vae(4, scaling_factor=0.18215),
        "image_encoder": transformers.CLIPVisionModelWithProjection(_clip_vision_config()),
        "unet": _sd_unet(),
        "scheduler": _ddim(),
        "safety_checker": None,
        "feature_extractor": _clip_image_processor(),
        "requires_safety_checker": False,
    }


def _audioldm2() -> dict[str, Any]:
    from diffusers import AudioLDM2ProjectionModel, AudioLDM2UNet2DConditionModel

    transformers = transformers_module()
    language_model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_embd=16, n_head=2, n_layer=1, vocab_size=len(VOCAB), n_positions=99)
    )
    language_model.config.max_new_tokens = 2
    return {
        "vae": _audio_vae(),
        "text_encoder": _clap(),
        "text_encoder_2": _t5(),
        "projection_model": AudioLDM2ProjectionModel(
            text_encoder_dim=16, text_encoder_1_dim=HIDDEN, langauge_model_dim=16
        ),
        "language_model": language_model,
        # AudioLDM 2 picks each tokenizer's input (prompt or transcription) by its class.
        "tokenizer": _typed_tokenizer("RobertaTokenizer", bos=True, model_max_length=CLIP_LEN),
        "tokenizer_2": _typed_tokenizer("T5Tokenizer", bos=False, model_max_length=CLIP_LEN),
        "feature_extractor": None,  # only used to rank several waveforms per prompt
        "unet": AudioLDM2UNet2DConditionModel(
            sample_size=8,
            in_channels=4,
            out_channels=4,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            block_out_channels=(8, 16),
            layers_per_block=1,
            norm_num_groups=4,
            cross_attention_dim=([None, 16, HIDDEN], [None, 16, HIDDEN]),
            attention_head_dim=2,
        ),
        "scheduler": _ddim(steps_offset=0),
        "vocoder": _vocoder(),
    }


def _musicldm() -> dict[str, Any]:
    return {
        "vae": _audio_vae(),
        "text_encoder": _clap(),
        "tokenizer": word_tokenizer(bos=True, model_max_length=CLIP_LEN),
        "feature_extractor": None,  # only used to rank several waveforms per prompt
        "unet": _sd_unet(
            sample_size=8,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=(16, 16),
            class_embed_type="simple_projection",
            projection_class_embeddings_input_dim=16,
            class_embeddings_concat=True,
        ),
        "scheduler": _ddim(steps_offset=0),
        "vocoder": _vocoder(),
    }


def _paint_by_example() -> dict[str, Any]:
    from diffusers.pipelines.deprecated.paint_by_example.image_encoder import PaintByExampleImageEncoder

    return {
        "vae": kl_vae(4, scaling_factor=0.18215),
        "image_encoder": PaintByExampleImageEncoder(_clip_vision_config(), proj_size=HIDDEN),
        "unet": _sd_unet(in_channels=9),
        "scheduler": _ddim(),
        "safety_checker": None,
        "feature_extractor": _clip_image_processor(),
        "requires_safety_checker": False,
    }


def _ldm_text2img() -> dict[str, Any]:
    from diffusers import VQModel
    from diffusers.pipelines.latent_diffusion.pipeline_latent_diffusion import LDMBertConfig, LDMBertModel

    bert = LDMBertModel(
        LDMBertConfig(
            vocab_size=len(VOCAB),
            max_position_embeddings=CLIP_LEN,
            encoder_layers=2,
            encoder_ffn_dim=37,
            encoder_attention_heads=2,
            head_dim=16,
            d_model=HIDDEN,
            pad_token_id=VOCAB["<pad>"],
        )
    )
    vqvae = VQModel(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(8, 8),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=4,
        num_vq_embeddings=12,
        vq_embed_dim=4,
        sample_size=16,
    )
    return {
        "vqvae": vqvae,
        "bert": bert,
        "tokenizer": word_tokenizer(bos=True, model_max_length=CLIP_LEN),
        "unet": _sd_unet(sample_size=8),
        "scheduler": _ddim(),
    }


def _kandinsky3() -> dict[str, Any]:
    from diffusers import DDPMScheduler, Kandinsky3UNet

    return {
        "tokenizer": word_tokenizer(bos=False, model_max_length=512),
        "text_encoder": _t5(),
        "unet": Kandinsky3UNet(
            in_channels=4,
            time_embedding_dim=4,
            groups=2,
            attention_head_dim=4,
            layers_per_block=2,  # 1 builds a model whose attention blocks get the wrong width
            block_out_channels=(16, 32),
            cross_attention_dim=4,
            encoder_hid_dim=HIDDEN,
        ),
        "scheduler": DDPMScheduler(
            beta_start=0.00085, beta_end=0.012, steps_offset=1, beta_schedule="squaredcos_cap_v2", clip_sample=True
        ),
        "movq": _movq(),
    }


def _anyflow_far() -> dict[str, Any]:
    from diffusers import FlowMapEulerDiscreteScheduler

    return {
        "transformer": _wan_transformer(
            "AnyFlowFARTransformer3DModel",
            num_layers=1,  # its flex attention runs unfused on the CPU: one layer halves the call
            compressed_patch_size=(1, 4, 4),
            full_chunk_limit=3,
            gate_value=0.25,
            deltatime_type="r",
        ),
        "vae": _wan_vae(),
        "text_encoder": _umt5(),
        "tokenizer": word_tokenizer(bos=False, model_max_length=512),
        "scheduler": FlowMapEulerDiscreteScheduler(shift=5.0),
    }


def _wan22() -> dict[str, Any]:
    from diffusers import UniPCMultistepScheduler

    return {
        "transformer": _wan_transformer(qk_norm="rms_norm_across_heads"),
        "transformer_2": _wan_transformer(qk_norm="rms_norm_across_heads"),
        # Timesteps at or above 0.875 * 1000 run `transformer`, the rest `transformer_2`: with two
        # steps and flow_shift 3, the first step (999) runs the one, the second (750) the other.
        "boundary_ratio": 0.875,
        "vae": _wan_vae(),
        "text_encoder": _umt5(),
        "tokenizer": word_tokenizer(bos=False, model_max_length=512),
        "scheduler": UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0),
    }


def _enable_free_init(pipe: Any) -> None:
    pipe.enable_free_init(
        num_iters=2,
        use_fast_sampling=False,
        method="butterworth",
        order=4,
        spatial_stop_frequency=0.25,
        temporal_stop_frequency=0.25,
    )


_BUILDERS: dict[str, tuple[str, Callable[[], dict[str, Any]], Callable[[Any], None] | None]] = {
    "kandinsky21_combined": ("KandinskyCombinedPipeline", _kandinsky21_combined, None),
    "kandinsky22_combined": ("KandinskyV22CombinedPipeline", _kandinsky22_combined, None),
    "visualcloze": ("VisualClozePipeline", _visualcloze, None),
    "stable_unclip": ("StableUnCLIPPipeline", _stable_unclip, None),
    "skyreels_v2_df_v2v": ("SkyReelsV2DiffusionForcingVideoToVideoPipeline", _skyreels_v2_df_v2v, None),
    "animatediff_freeinit": ("AnimateDiffPipeline", _animatediff, _enable_free_init),
    "sd_image_variation": ("StableDiffusionImageVariationPipeline", _sd_image_variation, None),
    "audioldm2": ("AudioLDM2Pipeline", _audioldm2, None),
    "musicldm": ("MusicLDMPipeline", _musicldm, None),
    "paint_by_example": ("PaintByExamplePipeline", _paint_by_example, None),
    "ldm_text2img": ("LDMTextToImagePipeline", _ldm_text2img, None),
    "kandinsky3": ("Kandinsky3Pipeline", _kandinsky3, None),
    "anyflow_far": ("AnyFlowFARPipeline", _anyflow_far, None),
    "wan22": ("WanPipeline", _wan22, None),
}


CLASS_NAMES: dict[str, str] = {name: built[0] for name, built in _BUILDERS.items()}
"""Each structural pipeline's diffusers class name."""


def _check_name(name: object) -> str:
    if name not in STRUCTURAL:
        raise ValueError(f"name must be one of {sorted(STRUCTURAL)}, got {name!r}")
    return name  # type: ignore[return-value]


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
        sub.set_progress_bar_config(disable=True)  # VisualCloze does not pass the setting on
    return pipe


def sub_pipelines(pipe: Any) -> dict[str, DiffusionPipeline]:
    """The pipelines a pipeline holds as attributes (``prior_pipe``, ``decoder_pipe``, ...), by name.

    Examples:
        >>> sorted(sub_pipelines(build_structural("visualcloze")))
        ['generation_pipe', 'upsampling_pipe']
    """
    from diffusers import DiffusionPipeline

    return {name: value for name, value in vars(pipe).items() if isinstance(value, DiffusionPipeline)}


def _image(seed: int, size: int = 32, mode: str = "RGB") -> Image.Image:
    """A seeded random-noise PIL image."""
    from PIL import Image

    generator = torch.Generator("cpu").manual_seed(seed)
    channels = {"RGB": 3, "L": 1}[mode]
    pixels = torch.randint(0, 256, (size, size, channels), generator=generator, dtype=torch.uint8)
    return Image.fromarray(pixels.squeeze(-1).numpy() if channels == 1 else pixels.numpy(), mode=mode)


def _call_settings(name: str, steps: int, seed: int) -> dict[str, Any]:
    prompt = "a tiny test prompt"
    if name in ("kandinsky21_combined", "kandinsky22_combined"):
        return {
            "prompt": prompt,
            "prior_num_inference_steps": steps,
            "height": 32,
            "width": 32,
            "guidance_scale": 4.0,
            "prior_guidance_scale": 4.0,
            "output_type": "pt",
        }
    if name == "visualcloze":
        return {
            "task_prompt": "a photo of a cat then a drawing of the cat",
            "content_prompt": prompt,
            "image": [[_image(seed), _image(seed + 1)], [_image(seed + 2), None]],
            "upsampling_height": 16,
            "upsampling_width": 16,
            "upsampling_strength": 0.5,  # steps // 2 upsampling steps (at least one)
            "guidance_scale": 5.0,
            "max_sequence_length": 64,  # the task prompt grows with the layout instructions
            "output_type": "pt",
        }
    if name == "stable_unclip":
        return {"prompt": prompt, "prior_num_inference_steps": steps, "height": 32, "width": 32, "output_type": "pt"}
    if name == "skyreels_v2_df_v2v":
        # 9 frames are 3 latent frames; segments of 2 latent frames overlapping by 1: two loops.
        # Embeddings, not a prompt: this pipeline's prompt cleaning calls ftfy unguarded (diffusers
        # 0.42.1), and ftfy is not a dependency.
        generator = torch.Generator("cpu").manual_seed(seed + 1)
        embeds = torch.randn((2, TEXT_LEN, HIDDEN), generator=generator)
        return {
            "video": [_image(seed + i, 16) for i in range(5)],
            "prompt_embeds": embeds[:1],
            "negative_prompt_embeds": embeds[1:],
            "height": 16,
            "width": 16,
            "num_frames": 9,
            "base_num_frames": 5,
            "overlap_history": 3,
            "guidance_scale": 5.0,
            "max_sequence_length": TEXT_LEN,
            "output_type": "pt",
        }
    if name == "animatediff_freeinit":
        return {"prompt": prompt, "num_frames": 2, "height": 32, "width": 32, "output_type": "pt"}
    if name == "sd_image_variation":
        return {"image": _image(seed), "height": 32, "width": 32, "output_type": "pt"}
    if name == "audioldm2":
        return {
            "prompt": prompt,
            "audio_length_in_s": 0.016,
            "guidance_scale": 2.5,
            "max_new_tokens": 2,
            "output_type": "pt",
        }
    if name == "musicldm":
        # CLAP text features, not a prompt: with transformers 5, get_text_features returns a model
        # output that MusicLDM (diffusers 0.42.1) does not unwrap, so the prompt path fails.
        generator = torch.Generator("cpu").manual_seed(seed + 1)
        embeds = torch.randn((2, 16), generator=generator)
        return {
            "prompt_embeds": embeds[:1],
            "negative_prompt_embeds": embeds[1:],
            "audio_length_in_s": 0.016,
            "guidance_scale": 2.5,
            "output_type": "pt",
        }
    if name == "paint_by_example":
        return {
            "example_image": _image(seed),
            "image": _image(seed + 1),
            "mask_image": _image(seed + 2, mode="L"),
            "height": 32,
            "width": 32,
            "output_type": "pt",
        }
    if name == "ldm_text2img":
        # The pipeline divides height and width by 8 whatever the VAE: 64 gives 8x8 latents, 16x16 images.
        return {"prompt": prompt, "height": 64, "width": 64, "guidance_scale": 6.0, "output_type": "np"}
    if name == "kandinsky3":
        return {"prompt": prompt, "height": 32, "width": 32, "guidance_scale": 3.0, "output_type": "pt"}
    if name == "anyflow_far":
        return {
            "prompt": prompt,
            "height": 16,
            "width": 16,
            "num_frames": 5,  # two latent frames, one chunk each
            "chunk_partition": [1, 1],
            "guidance_scale": 1.0,  # no classifier-free guidance: its flex attention is slow on the CPU
            "max_sequence_length": TEXT_LEN,
            "output_type": "pt",
        }
    return {  # wan22
        "prompt": prompt,
        "height": 16,
        "width": 16,
        "num_frames": 5,
        "guidance_scale": 5.0,
        "guidance_scale_2": 4.0,
        "max_sequence_length": TEXT_LEN,
        "output_type": "pt",
    }


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
        **_call_settings(_check_name(name), steps, seed),
        "generator": torch.Generator("cpu").manual_seed(seed),
    }
