"""Small model parts shared by the tiny pipelines and the structural pipelines.

A word-level vocabulary and tokenizers built in memory, a tiny CLIP text encoder, T5 settings and
encoders, a four-level KL autoencoder, the tiny SD UNet, Flux and Wan transformers, Wan's VAE, the
DDIM scheduler of SD, and the dtype cast ``from_pretrained(torch_dtype=...)`` performs. Nothing here
reads from or writes to a model hub.

Examples:
    >>> tokenizer = word_tokenizer(bos=True, model_max_length=CLIP_LEN)
    >>> tokenizer("a red cat").input_ids
    [3, 4, 24, 38, 1]
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from diffusers import AutoencoderKL
from diffusers.models import ModelMixin

from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.errors import DdoHooksError

if TYPE_CHECKING:
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, PreTrainedTokenizerFast

__all__ = [
    "CLIP_LEN",
    "HIDDEN",
    "TEXT_LEN",
    "VOCAB",
    "WAN_TRANSFORMER",
    "cast_module",
    "clip_text",
    "ddim",
    "flux_transformer",
    "kl_vae",
    "quiet_transformers",
    "sd_unet",
    "t5_config",
    "t5_encoder",
    "transformers_module",
    "umt5_encoder",
    "wan_transformer",
    "wan_vae",
    "word_tokenizer",
]

SPECIALS = ("<pad>", "</s>", "<unk>", "<s>")  # ids 0..3
WORD_TEXT = (
    "a an the of in on with and at to by for from under over near tiny small big large red green "
    "blue yellow black white bright dark photo painting drawing render test prompt cat dog bird fish "
    "tree house car boat city forest river mountain sky sun moon night day portrait landscape style"
)
VOCAB = {token: i for i, token in enumerate((*SPECIALS, *WORD_TEXT.split()))}
CLIP_LEN = 77  # CLIP's real context length: longer prompts are truncated, with a logged warning
TEXT_LEN = 16  # the T5/UMT5 max_sequence_length in call_kwargs and embed_prompt
HIDDEN = 32  # width of every text encoder, and the joint/cross attention dim that reads it


def transformers_module() -> Any:
    """Import transformers, quieting its unrelated notice about a missing torchvision.

    Raises:
        DdoHooksError: transformers is not installed; the message says how to install it.
    """
    with quiet_transformers():
        return importlib.import_module("transformers")


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Keep transformers' notices (image processors falling back from torchvision) off stderr."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        raise DdoHooksError(
            f"tiny pipelines need transformers ({e}); install it with: pip install 'transformers>=5.17' (the demo "
            "extra)"
        ) from e
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # tiny pipelines use no image processor
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)


def word_tokenizer(*, bos: bool, model_max_length: int) -> PreTrainedTokenizerFast:
    """A lower-casing word-level tokenizer over ``VOCAB``; unknown words map to ``<unk>``."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    tok = Tokenizer(models.WordLevel(vocab=VOCAB, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = [("<s>", VOCAB["<s>"]), ("</s>", VOCAB["</s>"])]
    template = "<s> $A </s>" if bos else "$A </s>"  # CLIP-style and T5-style framing
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=specials)
    return transformers_module().PreTrainedTokenizerFast(
        tokenizer_object=tok,
        model_max_length=model_max_length,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        **({"bos_token": "<s>"} if bos else {}),
    )


def clip_text(
    *, projection: bool = False
) -> tuple[CLIPTextModel | CLIPTextModelWithProjection, PreTrainedTokenizerFast]:
    """A two-layer CLIP text encoder of width ``HIDDEN`` over ``VOCAB``, and its word-level tokenizer.

    ``projection=True`` gives ``CLIPTextModelWithProjection`` (a ``text_embeds`` head of width ``HIDDEN``).
    """
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
    model = transformers.CLIPTextModelWithProjection if projection else transformers.CLIPTextModel
    return model(config), word_tokenizer(bos=True, model_max_length=CLIP_LEN)


def t5_config() -> dict[str, Any]:
    """T5 v1.1-style encoder settings, shared by Flux's T5 and Wan's UMT5."""
    return {
        "vocab_size": len(VOCAB),
        "d_model": HIDDEN,
        "d_kv": 8,
        "d_ff": 37,
        "num_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 32,
        "feed_forward_proj": "gated-gelu",
        "dropout_rate": 0.0,
        "pad_token_id": VOCAB["<pad>"],
        "eos_token_id": VOCAB["</s>"],
        "decoder_start_token_id": VOCAB["<pad>"],
    }


def t5_encoder() -> Any:
    """Flux's T5 encoder, of :func:`t5_config`'s settings."""
    transformers = transformers_module()
    return transformers.T5EncoderModel(transformers.T5Config(**t5_config()))


def umt5_encoder() -> Any:
    """Wan's UMT5 encoder, of :func:`t5_config`'s settings."""
    transformers = transformers_module()
    return transformers.UMT5EncoderModel(transformers.UMT5Config(**t5_config()))


def kl_vae(latent_channels: int, **extra: Any) -> AutoencoderKL:
    """A four-level KL autoencoder (spatial factor 8, as in SD and Flux) with 8 channels per level."""
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=4,
        sample_size=32,
        **extra,
    )


def sd_unet(model: str = "UNet2DConditionModel", **extra: Any) -> Any:
    """A two-level SD-style UNet (8 and 16 channels) reading ``HIDDEN``-wide text states.

    ``model`` names the diffusers class (AudioLDM 2's UNet takes the same settings); ``extra`` adds or
    overrides settings.
    """
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
    return getattr(importlib.import_module("diffusers"), model)(**{**settings, **extra})


def ddim(**extra: Any) -> Any:
    """SD's DDIM scheduler (scaled linear betas from 0.00085 to 0.012); ``extra`` adds or overrides settings."""
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


def flux_transformer(**extra: Any) -> Any:
    """A Flux transformer of one double and one single block, two heads of 16, reading ``HIDDEN``-wide text states.

    Its latents are the tiny Flux pipeline's (16 channels packed in 2x2 patches); ``extra`` adds or overrides
    settings (``guidance_embeds=True``: Flux dev's guidance embedding).
    """
    from diffusers import FluxTransformer2DModel

    settings: dict[str, Any] = {
        "patch_size": 1,
        "in_channels": 64,
        "num_layers": 1,
        "num_single_layers": 1,
        "attention_head_dim": 16,
        "num_attention_heads": 2,
        "joint_attention_dim": HIDDEN,
        "pooled_projection_dim": HIDDEN,
        "axes_dims_rope": (4, 4, 8),
    }
    return FluxTransformer2DModel(**{**settings, **extra})


WAN_TRANSFORMER: dict[str, Any] = {
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
}
"""A two-layer Wan-style video transformer, but for its rotary settings: Wan's, SkyReels-V2's, AnyFlow FAR's and
Helios' (which sizes its rotary tables with ``rope_dim``)."""


def wan_transformer(model: str = "WanTransformer3DModel", **extra: Any) -> Any:
    """A :data:`WAN_TRANSFORMER` with rotary tables of 32 positions.

    ``model`` names the diffusers class; ``extra`` adds or overrides settings.
    """
    settings: dict[str, Any] = {**WAN_TRANSFORMER, "rope_max_seq_len": 32}
    return getattr(importlib.import_module("diffusers"), model)(**{**settings, **extra})


def wan_vae() -> Any:
    """Wan's video autoencoder at its smallest: 3 base channels, one block per level, 16 latent channels."""
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(
        base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
    )


def cast_module(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Cast floating tensors to ``dtype`` as diffusers' ``from_pretrained(torch_dtype=...)`` does.

    Diffusers models keep their ``_keep_in_fp32_modules`` in float32 (``ModelMixin.to(dtype)``
    would cast them too, and logs a warning saying so); transformers models are cast whole.
    """
    keep = set(diffusers_compat.keep_in_fp32_modules(module) if isinstance(module, ModelMixin) else ())
    for name, tensor in (*module.named_parameters(), *module.named_buffers()):
        if tensor.is_floating_point():
            tensor.data = tensor.data.to(torch.float32 if keep & set(name.split(".")) else dtype)
