"""Memory without latency: the cost of a release reported, deferred releases, drop(), presets, malloc_trim."""

from __future__ import annotations

import gc
import re
import threading
import weakref

import pytest
import torch
from diffusers.hooks import HookRegistry
from diffusers.hooks.group_offloading import (
    LazyPrefetchGroupOffloadingHook,
    ModuleGroup,
    _apply_lazy_group_offloading_hook,
)
from support.fakes import FakeScheduler, MiB

from ddo_hooks import BoundaryRefusedError, HookPolicy, InvalidArgumentError, PolicyError, attach
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.cli.summarize import format_summary
from ddo_hooks.cli.table import boundary_rows, format_table
from ddo_hooks.hooks.idle import use_scheduler
from ddo_hooks.release.allocator import pinned_allocation
from ddo_hooks.reports.files import load_report_file
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs, embed_prompt

ORDER = ["before_transformer", "before_vae", "after_call"]


def outcome(report):
    if report.route == "phase_boundary_refusal":
        return f"{report.body.boundary}:{report.body.reason}"
    if report.route == "boundary_action":
        return f"{report.body.boundary}/{report.body.action}:{report.body.status}"
    release = report.release
    return release.phase if release.status == "executed" else f"{release.phase}:{release.noop_reason}"


# -- the cost of a release, where the release is reported -----------------------------------------


def test_each_boundary_reports_what_was_pinned_since_the_previous_one(fake, tmp_path):
    pipe = build_pipeline("sd")

    def onload(module, args):  # the UNet's onload after a release pins its blocks again
        fake.pin(3 * MiB, 1500, blocks=3)

    handle = pipe.unet.register_forward_pre_hook(onload)
    with attach(pipe) as attachment:
        pipe(**call_kwargs("sd", steps=2))
    handle.remove()
    first, before_vae, after_call = (r.release for r in attachment.reports)
    assert first.pinned_since_previous is None  # nothing to compare with yet
    since = before_vae.pinned_since_previous
    assert (since.since_phase, since.blocks, since.bytes) == ("before_transformer", 6, 6 * MiB)
    assert since.seconds == pytest.approx(0.003)
    assert after_call.pinned_since_previous.bytes == 0  # nothing pinned while decoding
    assert before_vae.before.pinned_bytes_total - first.after.pinned_bytes_total == 6 * MiB
    # `ddo-hooks summarize` totals them per boundary: bytes re-pinned and the time it took
    out = format_summary([load_report_file(attachment.tracker.write_jsonl(tmp_path / "run.jsonl"))])
    assert re.search(r"^before_vae +1 +1 +0 +0 .* ms +6\.0 MiB +3\.00 ms$", out, re.MULTILINE), out
    assert re.search(r"^before_transformer +1 +1 +0 +0 .* ms +- +-$", out, re.MULTILINE), out


def test_counters_a_torch_does_not_report_are_null_never_zero(fake):
    fake.pin_counters = False
    pipe = build_pipeline("sd")
    with attach(pipe) as attachment:
        pipe(**call_kwargs("sd", steps=1))
    since = attachment.reports[1].release.pinned_since_previous
    assert (since.blocks, since.bytes, since.seconds) == (None, None, None)
    assert attachment.reports[1].release.before.pinned_bytes_total is None


def test_the_report_says_which_host_allocation_mode_the_process_uses(fake, monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "pinned_use_cuda_host_register:True,pinned_num_register_threads:8")
    pipe = build_pipeline("sd")
    with attach(pipe) as attachment:
        pipe(**call_kwargs("sd", steps=1))
    assert {r.release.pinned_allocation for r in attachment.reports} == {"cudaHostRegister"}
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    assert pinned_allocation() == "cudaHostAlloc"


# -- releases only where memory is won ------------------------------------------------------------


def test_a_dropped_triggered_release_runs_only_after_a_component_left(fake):
    pipe = build_pipeline("flux")
    embeds = embed_prompt(pipe, "flux")
    with attach(pipe, HookPolicy.preset("lowest-latency")) as attachment:
        pipe(**call_kwargs("flux"))
        attachment.drop("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2")
        pipe(**{**call_kwargs("flux"), "prompt": None, **embeds})
        pipe(**{**call_kwargs("flux"), "prompt": None, **embeds})
    releases = [r for r in attachment.reports if r.route == "pytorch_host_cache_release"]  # not the staging's
    first = [outcome(r) for r in releases if "before_transformer" in outcome(r)]
    assert first == ["before_transformer:not_triggered", "before_transformer", "before_transformer:not_triggered"]


def test_an_idle_deferred_after_call_runs_once_the_pipeline_was_idle_and_not_when_a_call_comes_first(fake):
    clock = FakeScheduler()
    pipe = build_pipeline("sd")
    policy = HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"idle": "2s"}}})
    with use_scheduler(clock), attach(pipe, policy) as attachment:
        pipe(**call_kwargs("sd", steps=1))
        assert [outcome(r) for r in attachment.reports] == ORDER[:2]  # after_call waits
        clock.advance(1.9)
        pipe(**call_kwargs("sd", steps=1))  # back to back: call 1's after_call is cancelled, the cache kept
        assert outcome(attachment.reports[2]) == "after_call:not_reached"
        assert (
            "call 2 started before StableDiffusionPipeline had been idle for 2 s" in attachment.reports[2].body.detail
        )
        assert attachment.reports[2].body.call_index == 1
        clock.advance(2.0)  # idle: call 2's after_call runs now
        assert outcome(attachment.reports[-1]) == "after_call"
        assert attachment.tracker.entries()[-1].envelope.call_index == 2
        pipe(**call_kwargs("sd", steps=1))
    # detaching cancels the one still waiting, and says so
    assert outcome(attachment.reports[-1]) == "after_call:not_reached"
    assert "detached before the idle delay passed" in attachment.reports[-1].body.detail
    clock.advance(10)
    assert outcome(attachment.reports[-1]) == "after_call:not_reached"  # nothing ran after detach


def test_a_deferred_release_is_refused_beside_another_pipelines_call(fake):
    clock = FakeScheduler()
    pipe, other = build_pipeline("sd"), build_pipeline("sd", seed=1)
    policy = HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"idle": 1}}})

    def fire_during_encoding(module, args):  # the idle delay passes while the other pipeline encodes
        thread = threading.Thread(target=clock.advance, args=(5,))
        thread.start()
        thread.join(30)

    handle = other.text_encoder.register_forward_pre_hook(fire_during_encoding)
    with use_scheduler(clock), attach(pipe, policy) as attachment, attach(other):
        pipe(**call_kwargs("sd", steps=1))
        other(**call_kwargs("sd", steps=1))
    handle.remove()
    assert outcome(attachment.reports[2]) == "after_call:inference_in_progress"


@pytest.mark.parametrize(
    "offload", [{"offload_type": "leaf_level"}, {"offload_type": "block_level", "num_blocks_per_group": 1}]
)
def test_drop_frees_a_component_at_once_and_the_next_boundary_needs_no_full_collection(fake, offload):
    pipe = build_pipeline("flux")
    pipe.enable_group_offload(torch.device("cpu"), **offload)
    embeds = embed_prompt(pipe, "flux")
    with attach(pipe) as attachment:
        encoder = weakref.ref(pipe.text_encoder_2)
        gc.disable()  # only reference counting may free it
        try:
            attachment.drop("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2")
            assert encoder() is None
        finally:
            gc.enable()
        assert pipe.text_encoder_2 is None
        pipe(**{**call_kwargs("flux"), "prompt": None, **embeds})
    collection = attachment.reports[0].release.collection
    assert (collection.strategy, collection.full_collection, collection.survivors) == ("auto", False, ())


def test_drop_frees_a_component_whose_lazy_prefetch_hook_diffusers_removed_but_left_reachable(fake):
    # Under streams diffusers adds a lazy-prefetch hook and, on each layer, an execution tracker whose
    # callback closes over it; after the first forward it removes the hook and the trackers of the
    # layers that ran. A layer that never ran (T5's `shared`) keeps its tracker. On the H200 that
    # kept the T5 encoder alive after drop() until a full collection. Streams need CUDA: the same
    # hooks are set up here as diffusers sets them up, and removed as diffusers removes them.
    pipe = build_pipeline("flux")
    pipe.enable_group_offload(torch.device("cpu"), offload_type="leaf_level")
    registry = HookRegistry.check_if_exists_or_initialize(pipe.text_encoder_2)
    registry.register_hook(LazyPrefetchGroupOffloadingHook(), "lazy_prefetch")
    registry.remove_hook("lazy_prefetch", recurse=False)
    del registry
    with attach(pipe) as attachment:
        encoder = weakref.ref(pipe.text_encoder_2)
        gc.disable()
        try:
            attachment.drop("text_encoder_2")
            assert encoder() is None
        finally:
            gc.enable()


def test_drop_frees_every_layer_after_the_first_forward_removed_the_lazy_prefetch_hooks(fake):
    # Under streams diffusers registers a lazy-prefetch hook on each component (and, through it, an
    # execution tracker on each layer); the first forward removes the hook and the trackers of the
    # layers that ran, which then sit in garbage cycles that hold those layers. On the H200 that kept
    # the benchmark's CLIP encoder, and T5's layers, alive after drop() until a full collection
    # (254 ms). Streams need CUDA: the hook is registered here as diffusers registers it under streams,
    # and diffusers' own post_forward removes what it removes. No collection may run in between.
    pipe = build_pipeline("flux")
    pipe.enable_group_offload(torch.device("cpu"), offload_type="leaf_level")
    for name in ("text_encoder", "text_encoder_2"):
        encoder = getattr(pipe, name)
        leaf = next(
            m for m in encoder.modules() if diffusers_compat.has_hook(m, diffusers_compat.GROUP_OFFLOADING_HOOK)
        )
        config = diffusers_compat.registry_of(leaf).get_hook(diffusers_compat.GROUP_OFFLOADING_HOOK).config
        group = ModuleGroup(
            modules=[],
            offload_device=config.offload_device,
            onload_device=config.onload_device,
            offload_leader=encoder,
            onload_leader=encoder,
            onload_self=True,
            group_id="lazy_leaf",
        )
        _apply_lazy_group_offloading_hook(encoder, group, config=config)  # what diffusers does under streams
    del encoder, group, leaf
    with attach(pipe) as attachment:
        layers = [weakref.ref(m) for name in ("text_encoder", "text_encoder_2") for m in getattr(pipe, name).modules()]
        gc.disable()
        try:
            embed_prompt(pipe, "flux")  # the first forward: diffusers removes the hook and the trackers
            assert not diffusers_compat.has_hook(pipe.text_encoder, diffusers_compat.LAZY_PREFETCH_HOOK)
            attachment.drop("text_encoder", "text_encoder_2")
            alive = [ref() for ref in layers if ref() is not None]
            assert alive == [], f"{len(alive)} of {len(layers)} modules alive, e.g. {type(alive[0]).__name__}"
        finally:
            gc.enable()


def test_a_dropped_component_held_elsewhere_is_named_as_a_survivor(fake):
    pipe = build_pipeline("flux")
    embeds = embed_prompt(pipe, "flux")
    with attach(pipe) as attachment:
        kept = pipe.text_encoder_2
        attachment.drop("text_encoder_2")
        pipe(**{**call_kwargs("flux"), "prompt": None, **embeds})
        del kept
    assert attachment.reports[0].release.collection.survivors == ("text_encoder_2",)


def test_drop_refuses_unknown_names_and_calls_in_progress():
    pipe = build_pipeline("sd")
    answers = []

    def during_call(pipeline, step, timestep, kwargs):
        try:
            attachment.drop("text_encoder")
        except BoundaryRefusedError as e:
            answers.append(e.reason)
        return kwargs

    with attach(pipe) as attachment:
        with pytest.raises(InvalidArgumentError, match="has no component 'text_encodr'; its components: "):
            attachment.drop("text_encodr")
        with pytest.raises(InvalidArgumentError, match="at least one component name"):
            attachment.drop()
        pipe(**call_kwargs("sd", steps=1), callback_on_step_end=during_call)
    assert answers == ["inference_in_progress"]
    assert pipe.text_encoder is not None


# -- presets and the heap trim -----------------------------------------------------------------------


def test_the_presets_say_what_they_trade():
    peak, latency = HookPolicy.preset("lowest-peak"), HookPolicy.preset("lowest-latency")
    assert peak.enabled_boundaries() == tuple(ORDER)
    assert latency.enabled_boundaries() == ("before_transformer", "after_call")
    staging, release = latency.actions("before_transformer")
    assert (staging.name, release.options.trigger) == ("stage_done_components", "dropped")
    assert latency.boundary("after_call").idle == 2.0
    assert HookPolicy.preset("default") == HookPolicy.default()
    with pytest.raises(PolicyError, match=r"no preset policy named 'fastest'.*presets: default, lowest-peak"):
        HookPolicy.preset("fastest")


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"), reason="glibc's malloc_trim is Linux's")
def test_malloc_trim_is_an_action_of_its_own_with_its_own_report():
    pipe = build_pipeline("sd")
    policy = HookPolicy.from_mapping(
        {"version": 1, "boundaries": {"after_call": {"actions": ["host_cache_release", "malloc_trim"]}}}
    )
    with attach(pipe, policy) as attachment:
        pipe(**call_kwargs("sd", steps=1))
    trim = attachment.reports[-1]
    assert outcome(trim) == "after_call/malloc_trim:executed"
    assert set(trim.body.data) == {"returned", "rss_before", "rss_after", "seconds"}
    assert attachment.tracker.components()[-1] == "malloc_trim_after_call"
    rows = boundary_rows(attachment.tracker.records())
    assert [(r.label, r.rss_before, r.rss_after, r.elapsed_seconds) for r in rows[-1:]] == [
        ("after_call/malloc_trim", trim.body.data["rss_before"], trim.body.data["rss_after"], trim.body.elapsed_seconds)
    ]  # the time the attachment measured around the whole action, of which the trim is a part
    lines = format_table(rows).splitlines()
    after_call = next(i for i, line in enumerate(lines) if line.split()[1:2] == ["after_call"])
    assert lines[after_call + 1].split()[:3] == ["1", "+", "malloc_trim"]  # under its boundary, at a glance
    assert lines[after_call + 1].rstrip().endswith(" ms")
