"""The ring runtime on real tiny diffusers pipelines (CPU, logged transport): outputs bitwise equal, order proved.

The Flux pipeline here has 3 double and 4 single transformer blocks and a 4-block T5, so that its units
wrap round a ring that holds under three of them; every tensor of a unit streams (``min_streamed_bytes=0``:
the tiny weights are far under 1 MiB).
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from support.ring_pipelines import deep_flux, sd3_kwargs, tiny_sd3

from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.streaming.ordering import check_log
from ddo_hooks.streaming.plan import find_units, nbytes
from ddo_hooks.streaming.ring import slot_layout
from ddo_hooks.streaming.runtime import StreamedPipeline, StreamOptions
from ddo_hooks.streaming.transport import LoggedTransport
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

CPU = torch.device("cpu")
ALL = {"resident_bytes": 0, "stream_above": 0, "min_streamed_bytes": 0}


@pytest.fixture(scope="module")
def flux():
    return deep_flux()


@pytest.fixture(scope="module")
def expected(flux):
    """Ten calls of the pipeline as it is, each with its own seed."""
    return [flux(**call_kwargs("flux", seed=seed)).images for seed in range(10)]


def streamed(pipe, **options) -> tuple[StreamedPipeline, LoggedTransport]:
    transport = LoggedTransport(CPU)
    modules = {name: m for name, m in pipe.components.items() if isinstance(m, torch.nn.Module)}
    return StreamedPipeline(modules, StreamOptions(**{**ALL, **options}), transport=transport), transport


def planned(pipe) -> dict[str, list]:
    return {name: find_units(m, 0) for name, m in pipe.components.items() if isinstance(m, torch.nn.Module)}


def test_ten_calls_through_a_ring_that_wraps_are_bitwise_equal_and_their_order_holds(flux, expected):
    units = planned(flux)
    assert {name: len(found) for name, found in units.items()} == {
        "transformer": 3 + 4, "text_encoder_2": 4, "text_encoder": 2, "vae": 8}  # fmt: skip
    largest = max(slot_layout(unit.streamed)[1] for found in units.values() for unit in found)
    runtime, transport = streamed(flux, ring_bytes=int(2.5 * largest), lookahead=1)
    try:
        units = len(runtime.ring.units)
        got = [flux(**call_kwargs("flux", seed=seed)).images for seed in range(10)]
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
        assert check_log(transport.log) == []
        assert runtime.ring.copied_bytes > 10 * runtime.ring.capacity  # it wrapped round, many times
        # After the first call, only what the order cannot tell is copied when it begins: the first unit
        # of a component that another component's units ran before (T5 after the transformer's last step).
        assert runtime.ring.waited < units + 10 * 3
    finally:
        runtime.close()


def test_with_poison_a_missing_wait_changes_the_outputs(flux, expected, monkeypatch):
    # The logged transport copies at once, so on the CPU only a poisoned slot read before its copy shows.
    runtime, transport = streamed(flux, poison=True)
    try:
        assert torch.equal(flux(**call_kwargs("flux", seed=0)).images, expected[0])
        fills = [entry for entry in transport.log if entry[0] == "fill"]
        assert len(fills) >= 13
    finally:
        runtime.close()


def test_the_residency_budget_keeps_the_modulation_linears_first(flux, expected):
    modulation = [
        m.weight
        for name, m in flux.transformer.named_modules()
        if isinstance(m, torch.nn.Linear) and name.endswith(("norm1.linear", "norm1_context.linear", "norm.linear"))
        and "blocks" in name
    ]  # fmt: skip
    budget = sum(nbytes(w) for w in modulation)
    runtime, transport = streamed(flux, resident_bytes=budget)
    try:
        got = [flux(**call_kwargs("flux", seed=seed)).images for seed in range(3)]
        assert all(torch.equal(a, b) for a, b in zip(got, expected[:3], strict=True))
        assert runtime.resident_weights == budget  # they multiply one row each: the least compute per byte
        streaming = {id(t) for entries in runtime._streamed.values() for entry in entries for t in entry.tensors}
        assert not any(id(w) in streaming for w in modulation)
        assert check_log(transport.log) == []
    finally:
        runtime.close()


def test_close_is_the_exact_inverse(flux, expected):
    before = {name: {k: v.data_ptr() for k, v in m.state_dict(keep_vars=True).items()}
              for name, m in flux.components.items() if isinstance(m, torch.nn.Module)}  # fmt: skip
    hooks = {name: sum(len(s._forward_hooks) + len(s._forward_pre_hooks) for s in m.modules())
             for name, m in flux.components.items() if isinstance(m, torch.nn.Module)}  # fmt: skip
    runtime, _ = streamed(flux, resident_bytes=1 << 20)
    flux(**call_kwargs("flux", seed=0))
    runtime.close()
    runtime.close()  # a second close does nothing
    after = {name: {k: v.data_ptr() for k, v in m.state_dict(keep_vars=True).items()}
             for name, m in flux.components.items() if isinstance(m, torch.nn.Module)}  # fmt: skip
    assert after == before
    assert hooks == {name: sum(len(s._forward_hooks) + len(s._forward_pre_hooks) for s in m.modules())
                     for name, m in flux.components.items() if isinstance(m, torch.nn.Module)}  # fmt: skip
    assert torch.equal(flux(**call_kwargs("flux", seed=1)).images, expected[1])


@pytest.mark.parametrize("where", ["transformer", "vae"])  # the VAE decodes through decode(), not forward()
def test_a_forward_that_raises_leaves_the_runtime_ready_for_the_next_call(flux, expected, where):
    runtime, transport = streamed(flux)
    block = flux.transformer.transformer_blocks[1] if where == "transformer" else flux.vae.decoder.up_blocks[1]

    def fail(module, args, kwargs):
        raise KeyboardInterrupt  # not an Exception: PyTorch runs no always-called hook for it

    handle = block.register_forward_pre_hook(fail, with_kwargs=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            flux(**call_kwargs("flux", seed=0))
        handle.remove()
        got = [flux(**call_kwargs("flux", seed=seed)).images for seed in range(2)]
        assert all(torch.equal(a, b) for a, b in zip(got, expected[:2], strict=True))
        assert check_log(transport.log) == []
    finally:
        handle.remove()
        runtime.close()


def test_guidance_doubling_the_forwards_is_followed(flux):
    def guided():  # a fresh generator each call
        return flux(**call_kwargs("flux", seed=3), true_cfg_scale=2.0, negative_prompt="a dog").images

    plain = guided()
    runtime, transport = streamed(flux)
    try:
        assert torch.equal(guided(), plain)
        assert torch.equal(guided(), plain)
        assert check_log(transport.log) == []
    finally:
        runtime.close()


def test_a_weight_in_pageable_memory_is_refused_with_the_fix(flux):
    weight = flux.transformer.transformer_blocks[0].ff.net[0].proj.weight
    transport = LoggedTransport(CPU, pageable={weight.data_ptr()})
    modules = {"transformer": flux.transformer}
    with pytest.raises(
        InvalidArgumentError,
        match=r"1 weight\(s\) the ring would stream are in pageable memory, "
        r"e\.g\. one of transformer\.transformer_blocks\.0 .*pinned_copies\.from_files: register",
    ):
        StreamedPipeline(modules, StreamOptions(**ALL), transport=transport)  # fmt: skip
    assert weight.device == CPU
    assert not any(len(m._forward_hooks) for m in flux.transformer.modules())


def test_a_component_offloaded_by_another_runtime_is_refused():
    pipe = build_pipeline("flux")
    pipe.transformer.enable_group_offload(CPU, offload_type="block_level", num_blocks_per_group=1)
    with pytest.raises(InvalidArgumentError, match="transformer is offloaded already"):
        StreamedPipeline({"transformer": pipe.transformer}, StreamOptions(**ALL), transport=LoggedTransport(CPU))


def test_a_collected_component_leaves_the_ring():
    pipe = deep_flux(seed=5)
    runtime, _ = streamed(pipe)
    units = len(runtime.ring.units)
    pipe(**call_kwargs("flux"))
    encoder = weakref.ref(pipe.text_encoder_2)
    pipe.text_encoder_2 = None
    gc.collect()
    assert encoder() is None  # the runtime keeps nothing of it alive
    assert len(runtime.ring.units) == units - 4
    runtime.close()


def test_sd3_ten_calls_bitwise_equal_through_the_ring():
    pipe = tiny_sd3(seed=1)
    expected = [pipe(**sd3_kwargs(seed)).images for seed in range(10)]
    runtime, transport = streamed(pipe, lookahead=3)
    try:
        assert {entry.unit.key.split(".")[0] for entries in runtime._streamed.values() for entry in entries} == {
            "transformer", "text_encoder", "text_encoder_2", "vae"}  # fmt: skip
        got = [pipe(**sd3_kwargs(seed)).images for seed in range(10)]
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
        assert check_log(transport.log) == []
    finally:
        runtime.close()


def test_a_cache_hook_on_the_blocks_keeps_the_outputs_it_gives_without_the_runtime():
    # diffusers' first-block cache answers later blocks from its cache without running them: the runtime still
    # sees each block's module called, in order, and the outputs are the cache's own.
    from diffusers.hooks import FirstBlockCacheConfig, apply_first_block_cache

    def cached(seed: int):
        pipe = deep_flux(seed=7)
        apply_first_block_cache(pipe.transformer, FirstBlockCacheConfig(threshold=0.5))
        return pipe

    plain = cached(7)
    expected = [plain(**call_kwargs("flux", seed=seed, steps=4)).images for seed in range(3)]
    pipe = cached(7)
    runtime, transport = streamed(pipe)
    try:
        got = [pipe(**call_kwargs("flux", seed=seed, steps=4)).images for seed in range(3)]
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
        assert check_log(transport.log) == []
    finally:
        runtime.close()
