"""Shared small components of the structural pipelines: configs and seeded random weights."""

from __future__ import annotations

from typing import Any

import torch

from ddo_hooks.testing._components import (
    CLIP_LEN,
    HIDDEN,
    VOCAB,
    transformers_module,
    word_tokenizer,
)


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


def _prior_transformer() -> Any:
    """A one-layer unCLIP prior over ``HIDDEN``-wide CLIP embeddings (77 text tokens)."""
    from diffusers import PriorTransformer

    prior = PriorTransformer(num_attention_heads=2, attention_head_dim=12, embedding_dim=HIDDEN, num_layers=1)
    with torch.no_grad():
        prior.clip_std.fill_(1.0)  # type: ignore[attr-defined]  # initialised to zeros, which would make every image embedding zero
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


def _roberta_text(*, hidden_size: int, num_attention_heads: int) -> dict[str, Any]:
    """A two-layer RoBERTa-style text encoder's settings over ``VOCAB``: CLAP's text branch, Kandinsky 2.1's M-CLIP.

    Its positions are ``CLIP_LEN + 2``: two more than its tokens, as RoBERTa's (514 for 512).
    """
    return {
        "vocab_size": len(VOCAB),
        "hidden_size": hidden_size,
        "intermediate_size": 37,
        "num_hidden_layers": 2,
        "num_attention_heads": num_attention_heads,
        "max_position_embeddings": CLIP_LEN + 2,
        "pad_token_id": VOCAB["<pad>"],
        "bos_token_id": VOCAB["<s>"],
        "eos_token_id": VOCAB["</s>"],
    }


def _clap() -> Any:
    """A CLAP model with a two-layer text branch (width 16) and the smallest audio branch it accepts."""
    transformers = transformers_module()
    text = transformers.ClapTextConfig(**_roberta_text(hidden_size=16, num_attention_heads=2))
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


TWO_LEVELS: dict[str, Any] = {
    "down_block_types": ("DownEncoderBlock2D",) * 2,
    "up_block_types": ("UpDecoderBlock2D",) * 2,
    "block_out_channels": (8, 8),
    "layers_per_block": 1,
    "latent_channels": 4,
    "norm_num_groups": 4,
}
"""A two-level encoder and decoder, 8 channels per level: the audio VAE's and the LDM VQ-VAE's blocks."""


def _audio_vae() -> Any:
    from diffusers import AutoencoderKL

    return AutoencoderKL(in_channels=1, out_channels=1, **TWO_LEVELS)


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
