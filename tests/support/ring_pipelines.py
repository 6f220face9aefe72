"""Tiny Flux pipelines deep enough for the ring to wrap round (3 double, 4 single blocks; a 4-block T5)."""

from __future__ import annotations

from typing import Any

import torch
import transformers
from diffusers import FluxPipeline, FluxTransformer2DModel

from ddo_hooks.testing._components import t5_config
from ddo_hooks.testing.tiny_pipelines import build_pipeline


def deep_flux(seed: int = 0, *, heads: int = 2) -> FluxPipeline:
    """The tiny Flux pipeline with 3 double and 4 single blocks and a 4-block T5.

    ``heads=16`` (a width of 256) makes the transformer's block linears 1 MiB and more in float32, so that
    they stream under the runtime's own threshold, as a real model's do.
    """
    pipe = build_pipeline("flux", seed=seed)
    config = {k: v for k, v in pipe.transformer.config.items() if not k.startswith("_")}
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(**{**config, "num_layers": 3, "num_single_layers": 4,
                                            "num_attention_heads": heads})  # fmt: skip
    t5 = transformers.T5EncoderModel(transformers.T5Config(**{**t5_config(), "num_layers": 4}))
    pipe = FluxPipeline(**{**pipe.components, "transformer": transformer, "text_encoder_2": t5})
    pipe.set_progress_bar_config(disable=True)
    return pipe


def tiny_sd3(seed: int = 0, *, heads: int = 4, head_dim: int = 8) -> Any:
    """A tiny Stable Diffusion 3 pipeline: 4 joint blocks, two CLIP text encoders with projections, its T5 left out
    (``text_encoder_3=None``, as SD3 allows), the Flux-shaped VAE of 16 latent channels. ``heads=8, head_dim=64``
    (a width of 512) makes its feed-forward weights 2 MiB in bf16, so that they stream."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    from ddo_hooks.testing._components import HIDDEN, clip_text, kl_vae

    torch.manual_seed(seed)
    transformer = SD3Transformer2DModel(sample_size=8, patch_size=1, in_channels=16, num_layers=4,
                                        attention_head_dim=head_dim, num_attention_heads=heads,
                                        joint_attention_dim=HIDDEN, caption_projection_dim=heads * head_dim,
                                        pooled_projection_dim=2 * HIDDEN, out_channels=16,
                                        pos_embed_max_size=16)  # fmt: skip
    (encoder, tokenizer), (encoder_2, tokenizer_2) = clip_text(projection=True), clip_text(projection=True)
    vae = kl_vae(16, use_quant_conv=False, use_post_quant_conv=False, scaling_factor=1.5305, shift_factor=0.0609)
    pipe = StableDiffusion3Pipeline(transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
                                    vae=vae, text_encoder=encoder, tokenizer=tokenizer, text_encoder_2=encoder_2,
                                    tokenizer_2=tokenizer_2, text_encoder_3=None, tokenizer_3=None)  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe


def sd3_kwargs(seed: int = 0) -> dict[str, Any]:
    """A plain call of :func:`tiny_sd3`'s pipeline: 2 steps at 32x32, its own generator."""
    return {"prompt": "a tiny test prompt", "num_inference_steps": 2, "height": 32, "width": 32, "output_type": "pt",
            "generator": torch.Generator("cpu").manual_seed(seed)}  # fmt: skip
