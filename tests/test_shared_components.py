"""Pipelines that share components (``from_pipe``): each attached, each with its boundaries; one detaches alone."""

from __future__ import annotations

import pytest
import torch
from diffusers import AutoPipelineForImage2Image

from ddo_hooks import InvalidArgumentError, attach
from ddo_hooks.hooks.signals import HOOK_NAMES
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

ORDER = ["before_transformer", "before_vae", "after_call"]


def phases(reports) -> list[str]:
    return [r.release.phase if r.route == "pytorch_host_cache_release" else r.body.reason for r in reports]


def img2img_kwargs() -> dict:
    kwargs = call_kwargs("sd")
    kwargs["image"] = torch.zeros(1, 3, 32, 32)
    kwargs["strength"] = 1.0
    return kwargs


def hook_names(module: torch.nn.Module) -> set[str]:
    registry = getattr(module, "_diffusers_hook", None)
    return set() if registry is None else set(registry.hooks)


@pytest.fixture(scope="module")
def pipes():
    text = build_pipeline("sd")
    return text, AutoPipelineForImage2Image.from_pipe(text)


def test_two_pipelines_on_the_same_components_each_get_their_boundaries(fake, pipes):
    text, image = pipes
    assert text.unet is image.unet
    expected = {"text": text(**call_kwargs("sd")).images, "image": image(**img2img_kwargs()).images}
    with attach(text) as first, attach(image) as second:
        got = {"text": text(**call_kwargs("sd")).images, "image": image(**img2img_kwargs()).images}
        got["text again"] = text(**call_kwargs("sd")).images
    assert phases(first.reports) == ORDER * 2
    assert phases(second.reports) == ORDER
    assert torch.equal(got["text"], expected["text"])
    assert torch.equal(got["text again"], expected["text"])
    assert torch.equal(got["image"], expected["image"])
    assert HOOK_NAMES["denoiser"] not in hook_names(text.unet)


def test_detaching_one_leaves_the_other_whole(fake, pipes):
    text, image = pipes
    first, second = attach(text), attach(image)
    first.detach()
    assert HOOK_NAMES["denoiser"] in hook_names(image.unet)  # still there for the other
    image(**img2img_kwargs())
    assert phases(second.reports) == ORDER
    second.detach()
    assert HOOK_NAMES["denoiser"] not in hook_names(image.unet)
    assert not {HOOK_NAMES["decode"]} & hook_names(image.vae.decoder)


def test_a_shared_component_cannot_be_dropped_from_one_of_them(pipes):
    text, image = pipes
    refused = pytest.raises(InvalidArgumentError, match=r"also a component of an attached StableDiffusionImg2Img")
    with attach(text) as first, attach(image), refused:
        first.drop("text_encoder")
    assert text.text_encoder is image.text_encoder
