"""The component builders of the structural pipelines: one per pipeline class, and its setup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ddo_hooks.testing._components import (
    CLIP_LEN,
    HIDDEN,
    VOCAB,
    clip_text,
    ddim,
    flux_transformer,
    kl_vae,
    sd_unet,
    t5_encoder,
    transformers_module,
    umt5_encoder,
    wan_transformer,
    wan_vae,
    word_tokenizer,
)
from ddo_hooks.testing.structural._chunked import _cosmos25_transfer, _helios
from ddo_hooks.testing.structural._kandinsky import (
    _kandinsky3,
    _kandinsky21_combined,
    _kandinsky21_inpaint_combined,
    _kandinsky22_combined,
    _kandinsky22_inpaint_combined,
)
from ddo_hooks.testing.structural._parts import (
    TWO_LEVELS,
    _audio_vae,
    _clap,
    _clip_image_processor,
    _clip_vision_config,
    _prior_transformer,
    _typed_tokenizer,
    _vocoder,
)

# -- component builders -----------------------------------------------------------------------


def _visualcloze() -> dict[str, Any]:
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler

    text_encoder, tokenizer = clip_text()
    return {
        "transformer": flux_transformer(
            in_channels=12,  # packed latents (4), packed condition latents (4), packed mask (4)
            out_channels=4,
            attention_head_dim=6,
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
        "text_encoder_2": t5_encoder(),
        "tokenizer_2": word_tokenizer(bos=False, model_max_length=512),
        "scheduler": FlowMatchEulerDiscreteScheduler(),
        "resolution": 16,
    }


def _stable_unclip() -> dict[str, Any]:
    from diffusers import DDPMScheduler
    from diffusers.pipelines.stable_diffusion.stable_unclip_image_normalizer import StableUnCLIPImageNormalizer

    prior_text_encoder, prior_tokenizer = clip_text(projection=True)
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
        "unet": sd_unet(class_embed_type="projection", projection_class_embeddings_input_dim=2 * HIDDEN),
        "scheduler": ddim(prediction_type="v_prediction"),
        "vae": kl_vae(4, scaling_factor=0.18215),
    }


def _skyreels_v2_df_v2v() -> dict[str, Any]:
    from diffusers import UniPCMultistepScheduler

    return {
        "transformer": wan_transformer("SkyReelsV2Transformer3DModel", qk_norm="rms_norm_across_heads"),
        "vae": wan_vae(),
        "text_encoder": umt5_encoder(),
        "tokenizer": word_tokenizer(bos=False, model_max_length=512),
        "scheduler": UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0),
    }


def _animatediff() -> dict[str, Any]:
    from diffusers import MotionAdapter

    text_encoder, tokenizer = clip_text()
    return {
        "unet": sd_unet(
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
        "scheduler": ddim(beta_schedule="linear"),
        "feature_extractor": None,
        "image_encoder": None,
    }


def _sd_image_variation() -> dict[str, Any]:
    transformers = transformers_module()
    return {
        "vae": kl_vae(4, scaling_factor=0.18215),
        "image_encoder": transformers.CLIPVisionModelWithProjection(_clip_vision_config()),
        "unet": sd_unet(),
        "scheduler": ddim(),
        "safety_checker": None,
        "feature_extractor": _clip_image_processor(),
        "requires_safety_checker": False,
    }


def _audioldm2() -> dict[str, Any]:
    from diffusers import AudioLDM2ProjectionModel

    transformers = transformers_module()
    language_model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_embd=16, n_head=2, n_layer=1, vocab_size=len(VOCAB), n_positions=99)
    )
    language_model.config.max_new_tokens = 2
    return {
        "vae": _audio_vae(),
        "text_encoder": _clap(),
        "text_encoder_2": t5_encoder(),
        "projection_model": AudioLDM2ProjectionModel(
            text_encoder_dim=16, text_encoder_1_dim=HIDDEN, langauge_model_dim=16
        ),
        "language_model": language_model,
        # AudioLDM 2 picks each tokenizer's input (prompt or transcription) by its class.
        "tokenizer": _typed_tokenizer("RobertaTokenizer", bos=True, model_max_length=CLIP_LEN),
        "tokenizer_2": _typed_tokenizer("T5Tokenizer", bos=False, model_max_length=CLIP_LEN),
        "feature_extractor": None,  # only used to rank several waveforms per prompt
        "unet": sd_unet(
            "AudioLDM2UNet2DConditionModel",
            sample_size=8,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=([None, 16, HIDDEN], [None, 16, HIDDEN]),
        ),
        "scheduler": ddim(steps_offset=0),
        "vocoder": _vocoder(),
    }


def _musicldm() -> dict[str, Any]:
    return {
        "vae": _audio_vae(),
        "text_encoder": _clap(),
        "tokenizer": word_tokenizer(bos=True, model_max_length=CLIP_LEN),
        "feature_extractor": None,  # only used to rank several waveforms per prompt
        "unet": sd_unet(
            sample_size=8,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=(16, 16),
            class_embed_type="simple_projection",
            projection_class_embeddings_input_dim=16,
            class_embeddings_concat=True,
        ),
        "scheduler": ddim(steps_offset=0),
        "vocoder": _vocoder(),
    }


def _paint_by_example() -> dict[str, Any]:
    from diffusers.pipelines.deprecated.paint_by_example.image_encoder import PaintByExampleImageEncoder

    return {
        "vae": kl_vae(4, scaling_factor=0.18215),
        "image_encoder": PaintByExampleImageEncoder(_clip_vision_config(), proj_size=HIDDEN),
        "unet": sd_unet(in_channels=9),
        "scheduler": ddim(),
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
        **TWO_LEVELS,
        num_vq_embeddings=12,
        vq_embed_dim=4,
        sample_size=16,
    )
    return {
        "vqvae": vqvae,
        "bert": bert,
        "tokenizer": word_tokenizer(bos=True, model_max_length=CLIP_LEN),
        "unet": sd_unet(sample_size=8),
        "scheduler": ddim(),
    }


def _anyflow_far() -> dict[str, Any]:
    from diffusers import FlowMapEulerDiscreteScheduler

    return {
        "transformer": wan_transformer(
            "AnyFlowFARTransformer3DModel",
            num_layers=1,  # its flex attention runs unfused on the CPU: one layer halves the call
            compressed_patch_size=(1, 4, 4),
            full_chunk_limit=3,
            gate_value=0.25,
            deltatime_type="r",
        ),
        "vae": wan_vae(),
        "text_encoder": umt5_encoder(),
        "tokenizer": word_tokenizer(bos=False, model_max_length=512),
        "scheduler": FlowMapEulerDiscreteScheduler(shift=5.0),
    }


def _wan22() -> dict[str, Any]:
    from diffusers import UniPCMultistepScheduler

    return {
        "transformer": wan_transformer(qk_norm="rms_norm_across_heads"),
        "transformer_2": wan_transformer(qk_norm="rms_norm_across_heads"),
        # Timesteps at or above 0.875 * 1000 run `transformer`, the rest `transformer_2`: with two
        # steps and flow_shift 3, the first step (999) runs the one, the second (750) the other.
        "boundary_ratio": 0.875,
        "vae": wan_vae(),
        "text_encoder": umt5_encoder(),
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


BUILDERS: dict[str, tuple[str, Callable[[], dict[str, Any]], Callable[[Any], None] | None]] = {
    "kandinsky21_combined": ("KandinskyCombinedPipeline", _kandinsky21_combined, None),
    "kandinsky21_img2img_combined": ("KandinskyImg2ImgCombinedPipeline", _kandinsky21_combined, None),
    "kandinsky21_inpaint_combined": ("KandinskyInpaintCombinedPipeline", _kandinsky21_inpaint_combined, None),
    "kandinsky22_combined": ("KandinskyV22CombinedPipeline", _kandinsky22_combined, None),
    "kandinsky22_img2img_combined": ("KandinskyV22Img2ImgCombinedPipeline", _kandinsky22_combined, None),
    "kandinsky22_inpaint_combined": ("KandinskyV22InpaintCombinedPipeline", _kandinsky22_inpaint_combined, None),
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
    "kandinsky3_img2img": ("Kandinsky3Img2ImgPipeline", _kandinsky3, None),
    "helios": ("HeliosPipeline", _helios, None),
    "cosmos25_transfer": ("Cosmos2_5_TransferPipeline", _cosmos25_transfer, None),
    "anyflow_far": ("AnyFlowFARPipeline", _anyflow_far, None),
    "wan22": ("WanPipeline", _wan22, None),
}
