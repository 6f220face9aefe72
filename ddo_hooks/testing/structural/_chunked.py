"""The structural pipelines that denoise a video chunk by chunk and decode each chunk: Helios, Cosmos 2.5 Transfer."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from diffusers import ConfigMixin, ModelMixin

from ddo_hooks.testing._components import (
    HIDDEN,
    VOCAB,
    WAN_TRANSFORMER,
    t5_encoder,
    transformers_module,
    wan_vae,
    word_tokenizer,
)

CHAT_TEMPLATE = (
    "{% for message in messages %}{% for part in message['content'] %}{{ part['text'] }} {% endfor %}{% endfor %}"
)
"""Joins the text of every message: what Cosmos 2.5 asks ``apply_chat_template`` for, without Qwen's tokens."""


class NoSafetyChecker(ModelMixin, ConfigMixin):
    """A Cosmos guardrail that lets every prompt and video through, as diffusers' own tests use.

    Cosmos 2.5 refuses to run without a safety checker and builds ``cosmos_guardrail``'s when
    given none (a package, and weights, these tiny pipelines do without).
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("_device_tracker", torch.zeros(1), persistent=False)

    def check_text_safety(self, prompt: str) -> bool:
        """Every prompt is safe."""
        return True

    def check_video_safety(self, frames: Any) -> Any:
        """Every video is safe: returned as it came."""
        return frames


class StandInControlNet(ModelMixin, ConfigMixin):
    """Stands in for Cosmos 2.5's ``CosmosControlNetModel``.

    diffusers' controlnet resizes its masks with torchvision, which is not a dependency here. This
    one takes the same arguments and gives no block residuals, so the transformer runs as it does
    without controls; the pipeline's own code is unchanged.
    """

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)  # weights to offload, as a controlnet has

    def forward(self, controls_latents: torch.Tensor, latents: torch.Tensor, **kwargs: Any) -> tuple[None]:
        """The control residuals of every block: none."""
        return (None,)


def _helios() -> dict[str, Any]:
    from diffusers import HeliosScheduler, HeliosTransformer3DModel

    with warnings.catch_warnings():
        # Its __init__ hands torch scalars to np.linspace, which numpy 2 deprecates (diffusers 0.42.1).
        warnings.filterwarnings("ignore", "__array_wrap__ must accept context", DeprecationWarning)
        scheduler = HeliosScheduler(stage_range=[0, 1], stages=1, use_dynamic_shifting=True)
    return {
        "transformer": HeliosTransformer3DModel(**WAN_TRANSFORMER, qk_norm="rms_norm_across_heads", rope_dim=(4, 4, 4)),
        "vae": wan_vae(),
        "scheduler": scheduler,
        "text_encoder": t5_encoder(),
        "tokenizer": word_tokenizer(bos=False, model_max_length=512),
    }


def _qwen25_vl() -> Any:
    """A two-layer Qwen2.5-VL of width 16 over ``VOCAB``: Cosmos 2.5 concatenates its layers' states (width 32)."""
    transformers = transformers_module()
    config = transformers.Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "vocab_size": len(VOCAB),
            "pad_token_id": VOCAB["<pad>"],
            "bos_token_id": VOCAB["<s>"],
            "eos_token_id": VOCAB["</s>"],
            "rope_scaling": {"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
            "rope_theta": 1000000.0,
        },
        vision_config={"depth": 2, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2, "out_hidden_size": 16},
        # Token ids of images and videos out of the vocabulary: the prompts hold none.
        image_token_id=len(VOCAB) + 3,
        video_token_id=len(VOCAB) + 4,
        vision_start_token_id=len(VOCAB) + 1,
        vision_end_token_id=len(VOCAB) + 2,
    )
    return transformers.Qwen2_5_VLForConditionalGeneration(config)


def _cosmos25_transfer() -> dict[str, Any]:
    from diffusers import CosmosTransformer3DModel, UniPCMultistepScheduler

    tokenizer = word_tokenizer(bos=False, model_max_length=512)
    tokenizer.chat_template = CHAT_TEMPLATE
    return {
        "transformer": CosmosTransformer3DModel(
            in_channels=16 + 1,  # latents and the condition mask
            out_channels=16,
            num_layers=2,
            concat_padding_mask=False,  # True resizes the mask with torchvision
            controlnet_block_every_n=1,
            img_context_num_tokens=4,
            num_attention_heads=2,
            attention_head_dim=16,
            mlp_ratio=2,
            text_embed_dim=HIDDEN,
            adaln_lora_dim=4,
            patch_size=(1, 2, 2),
            max_size=(4, 32, 32),
            rope_scale=(2.0, 1.0, 1.0),
            extra_pos_embed_type="learnable",
            img_context_dim_in=HIDDEN,
            img_context_dim_out=HIDDEN,
        ),
        "controlnet": StandInControlNet(),
        "vae": wan_vae(),
        # Flow sigmas, in [0, 1] as the pipeline assumes (the default's set_timesteps warns under numpy 2).
        "scheduler": UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0),
        "text_encoder": _qwen25_vl(),
        "tokenizer": tokenizer,
        "safety_checker": NoSafetyChecker(),
    }
