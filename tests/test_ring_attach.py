"""``attach(pipe, "streamed-box")``: the ring runtime chosen in the policy, applied at attach, undone at detach.

On a CPU the runtime is not applied (a ``no_cuda`` no-op report); with the logged transport installed
(:func:`use_transport`, the seam the GPU tests run for real), attach applies it to a tiny Flux pipeline
whose blocks are wide enough (256) for their linears to stream under the runtime's own 1 MiB threshold.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from support.ring_pipelines import deep_flux

from ddo_hooks import HookPolicy, PolicyError, attach
from ddo_hooks.streaming.ordering import check_log
from ddo_hooks.streaming.transport import LoggedTransport, use_transport
from ddo_hooks.testing.tiny_pipelines import call_kwargs

STREAMED = {"version": 1, "pinned_copies": {"from_files": "register", "keep_encoders_pinned": True},
            "offload": {"runtime": "ring", "resident_bytes": "3MiB", "stream_above": 0}}  # fmt: skip


@pytest.fixture(scope="module")
def wide():
    return deep_flux(heads=16)


@pytest.fixture(scope="module")
def expected(wide):
    return [wide(**call_kwargs("flux", seed=seed)).images for seed in range(4)]


@pytest.fixture
def logged():
    transports = []

    def make(device):
        transports.append(LoggedTransport(torch.device("cpu")))
        return transports[-1]

    with use_transport(make):
        yield transports


def state(pipe) -> dict:
    return {name: {key: (value.device, value.data_ptr()) for key, value in module.state_dict(keep_vars=True).items()}
            for name, module in pipe.components.items() if isinstance(module, torch.nn.Module)}  # fmt: skip


def test_the_preset_is_one_line_and_on_a_cpu_says_why_nothing_streams(wide, expected):
    with attach(wide, "streamed-box") as attachment:
        got = wide(**call_kwargs("flux", seed=0)).images
    body = attachment.ring_report.ring
    assert (body.status, body.noop_reason) == ("noop", "no_cuda")
    assert body.detail.startswith("the ring runtime runs on a CUDA device and this process has none")
    assert [r.route for r in attachment.reports][:2] == ["pinned_copy_repack", "ring_offload"]
    assert torch.equal(got, expected[0])


def test_attach_streams_the_blocks_and_detach_is_the_exact_inverse(wide, expected, logged):
    before = state(wide)
    with attach(wide, HookPolicy.from_mapping(STREAMED)) as attachment:
        got = [wide(**call_kwargs("flux", seed=seed)).images for seed in range(4)]
        (transport,) = logged
        body = attachment.ring_report.ring
        parts = {part.component: (part.status, part.units) for part in body.components}
    assert body.status == "executed"
    assert parts["transformer"] == ("streamed", 7)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert check_log(transport.log) == []
    assert state(wide) == before  # every weight back where it was
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in wide.transformer.modules())


def test_a_policy_that_names_the_runtime_without_pinning_the_sources_is_refused_at_its_line():
    with pytest.raises(PolicyError, match=r"policy.yaml:3:3: offload.runtime: the ring runtime streams only from "
                       r"pinned memory: set pinned_copies.from_files \(register\)"):  # fmt: skip
        HookPolicy.from_yaml_text("version: 1\noffload:\n  runtime: ring\n", source="policy.yaml")
    with pytest.raises(PolicyError, match=r"offload.runtime: lookahead set for no runtime"):
        HookPolicy.from_mapping({"version": 1, "offload": {"lookahead": 3}})


def test_drop_takes_a_component_off_the_runtime_and_frees_it(logged):
    pipe = deep_flux(seed=2, heads=16)
    attachment = attach(pipe, HookPolicy.from_mapping(STREAMED))
    try:
        pipe(**call_kwargs("flux"))
        encoder = weakref.ref(pipe.text_encoder_2)
        attachment.drop("text_encoder_2", "text_encoder")
        gc.collect()
        assert encoder() is None  # nothing of the runtime keeps it alive
        embeds = {"prompt_embeds": torch.zeros(1, 16, 32), "pooled_prompt_embeds": torch.zeros(1, 32)}
        pipe(**{**call_kwargs("flux"), "prompt": None, **embeds})  # the transformer still streams
        assert check_log(logged[0].log) == []
    finally:
        attachment.detach()
