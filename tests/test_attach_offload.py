"""Boundaries under every offload mode that runs on a CPU (the CUDA-only ones are in tests/gpu)."""

from __future__ import annotations

import pytest
import torch
from diffusers.hooks import HookRegistry

from ddo_hooks import attach
from ddo_hooks.hooks.phases import Phase
from ddo_hooks.hooks.signals import HOOK_NAMES
from ddo_hooks.testing.tiny_pipelines import FAMILIES, build_pipeline, call_kwargs

ORDER = ["before_transformer", "before_vae", "after_call"]
CPU = torch.device("cpu")

# mode id -> how to enable it on a pipeline (ids are listed in docs/pipelines.md)
CPU_MODES = {
    "none": lambda pipe: None,
    "group-block": lambda pipe: pipe.enable_group_offload(
        CPU, offload_device=CPU, offload_type="block_level", num_blocks_per_group=1
    ),
    "group-block-low-cpu-mem": lambda pipe: pipe.enable_group_offload(
        CPU, offload_device=CPU, offload_type="block_level", num_blocks_per_group=1, low_cpu_mem_usage=True
    ),
    "group-leaf": lambda pipe: pipe.enable_group_offload(CPU, offload_device=CPU, offload_type="leaf_level"),
    "group-leaf-low-cpu-mem": lambda pipe: pipe.enable_group_offload(
        CPU, offload_device=CPU, offload_type="leaf_level", low_cpu_mem_usage=True
    ),
    "model-cpu-offload": lambda pipe: pipe.enable_model_cpu_offload(device="cpu"),
}


def phases(attachment):
    return [r.release.phase for r in attachment.reports]


def denoiser(pipe):
    return getattr(pipe, "transformer", None) or pipe.unet


@pytest.mark.parametrize("mode", CPU_MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_two_calls_fire_every_boundary_under_each_offload_mode(family, mode):
    pipe = build_pipeline(family)
    CPU_MODES[mode](pipe)
    reference = build_pipeline(family)(**call_kwargs(family), return_dict=False)[0]
    with attach(pipe) as attachment:
        first = pipe(**call_kwargs(family), return_dict=False)[0]
        pipe(**call_kwargs(family))
        assert phases(attachment) == ORDER * 2
    assert torch.equal(first, reference)


@pytest.mark.parametrize("family", FAMILIES)
def test_model_cpu_offload_rehooking_keeps_the_denoiser_hook_alive(family):
    pipe = build_pipeline(family)
    pipe.enable_model_cpu_offload(device="cpu")
    with attach(pipe) as attachment:
        pipe(**call_kwargs(family))  # ends with maybe_free_model_hooks(): accelerate hooks removed and re-added
        module = denoiser(pipe)
        assert getattr(module, "_hf_hook", None) is not None
        assert HOOK_NAMES["denoiser"] in HookRegistry.check_if_exists_or_initialize(module).hooks
        # Prove the hook still runs beneath accelerate's: a denoiser forward in a call whose
        # loop was not seen moves the machine into the loop.
        forward_inputs = _capture_denoiser_inputs(pipe, family)
        call = attachment.machine.call_start()
        with torch.no_grad():
            module(**forward_inputs)
        assert attachment.phase is Phase.DENOISING
        attachment.machine.call_end(call)


def _capture_denoiser_inputs(pipe, family):
    captured = {}

    def grab(module, args, kwargs):
        if not captured:
            captured.update(kwargs)
            if args:  # the UNet takes its latents positionally
                captured["sample" if family == "sd" else "hidden_states"] = args[0]
            if len(args) > 1:
                captured["timestep"] = args[1]

    handle = denoiser(pipe).register_forward_pre_hook(grab, with_kwargs=True)
    try:
        pipe(**call_kwargs(family, steps=1, output_type="latent"))
    finally:
        handle.remove()
    return captured


def test_model_cpu_offload_enabled_after_attach_keeps_the_hooks_beneath_accelerate():
    pipe = build_pipeline("flux")
    with attach(pipe) as attachment:
        pipe.enable_model_cpu_offload(device="cpu")
        pipe(**call_kwargs("flux"))
        pipe(**call_kwargs("flux"))
        assert phases(attachment) == ORDER * 2
    assert getattr(pipe.transformer, "_hf_hook", None) is not None
    assert HOOK_NAMES["denoiser"] not in HookRegistry.check_if_exists_or_initialize(pipe.transformer).hooks
    pipe(**call_kwargs("flux"))  # accelerate's offloading still works after detach


def test_detach_under_model_cpu_offload_leaves_accelerate_working():
    pipe = build_pipeline("sd")
    pipe.enable_model_cpu_offload(device="cpu")
    reference = pipe(**call_kwargs("sd")).images
    attach(pipe).detach()
    assert getattr(pipe.unet, "_hf_hook", None) is not None
    assert torch.equal(pipe(**call_kwargs("sd")).images, reference)
