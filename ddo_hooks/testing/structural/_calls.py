"""The keyword arguments of a fast, deterministic call of each structural pipeline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ddo_hooks.testing._components import HIDDEN, TEXT_LEN

if TYPE_CHECKING:
    from PIL import Image


def _image(seed: int, size: int = 32, mode: str = "RGB") -> Image.Image:
    """A seeded random-noise PIL image."""
    from PIL import Image

    generator = torch.Generator("cpu").manual_seed(seed)
    channels = {"RGB": 3, "L": 1}[mode]
    pixels = torch.randint(0, 256, (size, size, channels), generator=generator, dtype=torch.uint8)
    return Image.fromarray(pixels.squeeze(-1).numpy() if channels == 1 else pixels.numpy(), mode=mode)


def _frame(seed: int, size: int = 32) -> torch.Tensor:
    """A seeded random frame, channels first, in [0, 1]."""
    return torch.rand((3, size, size), generator=torch.Generator("cpu").manual_seed(seed))


def _embeddings(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))


def _video(*, size: int, frames: int, guidance_scale: float, **more: Any) -> dict[str, Any]:
    """A video call: ``frames`` frames of ``size`` x ``size`` pixels, its text ``TEXT_LEN`` tokens, out as tensors."""
    return {
        "height": size,
        "width": size,
        "num_frames": frames,
        "guidance_scale": guidance_scale,
        "max_sequence_length": TEXT_LEN,
        "output_type": "pt",
        **more,
    }


def call_settings(name: str, steps: int, seed: int) -> dict[str, Any]:
    """What a call of structural pipeline ``name`` takes besides its steps and generator."""
    prompt = "a tiny test prompt"
    if name.startswith(("kandinsky21_", "kandinsky22_")):
        settings = {
            "prompt": prompt,
            "prior_num_inference_steps": steps,
            "height": 32,
            "width": 32,
            "guidance_scale": 4.0,
            "prior_guidance_scale": 4.0,
            "output_type": "pt",
        }
        if "img2img" in name:
            settings |= {"image": _image(seed), "strength": 0.5}  # steps // 2 steps of the decoder (at least one)
        if "inpaint" in name:
            settings |= {"image": _image(seed), "mask_image": _image(seed + 1, mode="L")}
        return settings
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
        return _video(
            size=16,
            frames=9,
            guidance_scale=5.0,
            video=[_image(seed + i, 16) for i in range(5)],
            prompt_embeds=embeds[:1],
            negative_prompt_embeds=embeds[1:],
            base_num_frames=5,
            overlap_history=3,
        )
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
    if name == "kandinsky3_img2img":
        return {"prompt": prompt, "image": _image(seed), "strength": 0.5, "guidance_scale": 3.0, "output_type": "pt"}
    if name == "helios":
        # One chunk of 33 frames (9 latent frames), as diffusers' own test; embeddings, not a prompt,
        # for the same ftfy reason as SkyReels-V2.
        return _video(size=16, frames=9, guidance_scale=1.0, prompt_embeds=_embeddings(seed + 1, 1, TEXT_LEN, HIDDEN))
    if name == "cosmos25_transfer":
        # Three of the five control frames in one chunk, as diffusers' own test.
        controls = [_frame(seed + 1 + i) for i in range(5)]
        return _video(
            size=32,
            frames=3,
            guidance_scale=3.0,
            prompt=prompt,
            negative_prompt="a dark photo",
            controls=controls,
            num_frames_per_chunk=16,
        )
    if name == "anyflow_far":
        # Five frames are two latent frames, one chunk each; no classifier-free guidance (guidance_scale 1.0): its
        # flex attention is slow on the CPU.
        return _video(size=16, frames=5, guidance_scale=1.0, prompt=prompt, chunk_partition=[1, 1])
    return _video(size=16, frames=5, guidance_scale=5.0, prompt=prompt, guidance_scale_2=4.0)  # wan22
