"""The Kandinsky structural pipelines: 2.1 and 2.2 combined (text, image and inpainting), and Kandinsky 3."""

from __future__ import annotations

from typing import Any

from ddo_hooks.testing._components import (
    CLIP_LEN,
    HIDDEN,
    clip_text,
    ddim,
    t5_encoder,
    transformers_module,
    word_tokenizer,
)
from ddo_hooks.testing.structural._parts import (
    _clip_image_processor,
    _clip_vision_config,
    _movq,
    _prior_transformer,
    _roberta_text,
)


def _prior_parts() -> dict[str, Any]:
    """The prior pipeline's components, as a combined pipeline takes them (``prior_`` names)."""
    from diffusers import UnCLIPScheduler

    transformers = transformers_module()
    text_encoder, tokenizer = clip_text(projection=True)
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


def _unet(*, inpaint: bool, **extra: Any) -> Any:
    """The decoder UNet: latents in (with the masked image latents and the mask to inpaint), mean and variance out."""
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        in_channels=9 if inpaint else 4,
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


def _kandinsky21_combined(*, inpaint: bool = False) -> dict[str, Any]:
    from diffusers.pipelines.kandinsky.text_encoder import MCLIPConfig, MultilingualCLIP

    config = MCLIPConfig(
        transformerDimSize=HIDDEN, imageDimSize=HIDDEN, **_roberta_text(hidden_size=HIDDEN, num_attention_heads=4)
    )
    return {
        "text_encoder": MultilingualCLIP(config),
        "tokenizer": word_tokenizer(bos=True, model_max_length=CLIP_LEN),
        "unet": _unet(inpaint=inpaint, addition_embed_type="text_image", encoder_hid_dim_type="text_image_proj"),
        "scheduler": ddim(beta_schedule="linear", prediction_type="epsilon"),
        "movq": _movq(),
        **_prior_parts(),
    }


def _kandinsky22_combined(*, inpaint: bool = False) -> dict[str, Any]:
    from diffusers import DDPMScheduler

    return {
        "unet": _unet(inpaint=inpaint, addition_embed_type="image", encoder_hid_dim_type="image_proj"),
        "scheduler": DDPMScheduler(beta_schedule="linear", beta_start=0.00085, beta_end=0.012, clip_sample=False),
        "movq": _movq(),
        **_prior_parts(),
    }


def _kandinsky3() -> dict[str, Any]:
    from diffusers import DDPMScheduler, Kandinsky3UNet

    return {
        "tokenizer": word_tokenizer(bos=False, model_max_length=512),
        "text_encoder": t5_encoder(),
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


def _kandinsky21_inpaint_combined() -> dict[str, Any]:
    return _kandinsky21_combined(inpaint=True)


def _kandinsky22_inpaint_combined() -> dict[str, Any]:
    return _kandinsky22_combined(inpaint=True)
