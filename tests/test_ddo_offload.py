"""The hooks on pipelines that DDO itself offloaded, on the CPU: its group-offload entry points.

``enable_diffusers_group_offload`` applies diffusers' group offloading with DDO's defaults (leaf
level, ``low_cpu_mem_usage=True``), and ``enable_offload(route="diffusers_group_offload")`` does so
through DDO's settings and returns a result whose ``metrics_snapshot()`` is DDO's own report of it;
here with the CPU as the onload device and no streams, which is what runs without a GPU. DDO's
linear route and its CUDA presets assert CUDA: they are for the GPU machine. Skipped where DDO is
not installed, failed instead where ``DDO_HOOKS_REQUIRE_DDO=1`` (``.ci/run``'s interop step).
"""

from __future__ import annotations

import os

import pytest
import torch
from diffusers.hooks import HookRegistry
from support.ddo_payloads import DISTRIBUTION, ddo_version

from ddo_hooks import attach, parse_report
from ddo_hooks.testing.tiny_pipelines import FAMILIES, build_pipeline, call_kwargs

VERSION = ddo_version()
pytestmark = pytest.mark.skipif(
    VERSION is None and os.environ.get("DDO_HOOKS_REQUIRE_DDO") != "1",
    reason=f"{DISTRIBUTION} is not installed (pip install -e '.[dev,ddo]' runs these)",
)
ORDER = ["before_transformer", "before_vae", "after_call"]


def _group_offload(denoiser: torch.nn.Module, offload_type: str) -> None:
    from diffusers_dynamic_offloader import enable_diffusers_group_offload

    enable_diffusers_group_offload(
        denoiser, onload_device="cpu", offload_device="cpu", offload_type=offload_type, use_stream=False
    )


def _offload(denoiser: torch.nn.Module, offload_type: str) -> None:
    from diffusers_dynamic_offloader import enable_offload

    result = enable_offload(denoiser, component="denoiser", route="diffusers_group_offload", execution_device="cpu",
                            use_stream=False, offload_type=offload_type, use_environment=False)  # fmt: skip
    report = parse_report(result.metrics_snapshot().as_dict())  # DDO's own report of it, read strictly
    assert type(report).__name__ == "DDOGroupOffloadReport"
    assert report.setup.offload_type == offload_type


@pytest.mark.parametrize("entry", [_group_offload, _offload], ids=["enable_diffusers_group_offload", "enable_offload"])
@pytest.mark.parametrize("offload_type", ["leaf_level", "block_level"])
@pytest.mark.parametrize("family", FAMILIES)
def test_boundaries_outputs_and_detach_on_a_pipeline_ddo_offloaded(family, offload_type, entry):
    pipe = build_pipeline(family)
    denoiser = getattr(pipe, "transformer", None) or pipe.unet
    entry(denoiser, offload_type)
    hooks_before = set(HookRegistry.check_if_exists_or_initialize(denoiser).hooks)
    reference = build_pipeline(family)(**call_kwargs(family), return_dict=False)[0]
    with attach(pipe) as attachment:
        outputs = [pipe(**call_kwargs(family), return_dict=False)[0] for _ in range(2)]
        assert [r.release.phase for r in attachment.reports] == ORDER * 2
    assert all(torch.equal(output, reference) for output in outputs)
    assert set(HookRegistry.check_if_exists_or_initialize(denoiser).hooks) == hooks_before  # DDO's hooks stay
    assert torch.equal(pipe(**call_kwargs(family), return_dict=False)[0], reference)  # and still work
