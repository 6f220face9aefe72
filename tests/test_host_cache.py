"""The release core, `release_pytorch_host_cache`: every branch, on real torch.

The real backend is exercised as it is on this CPU build. The executed path is exercised
through the one seam, `ddo_hooks.release.allocator.use_backend`, with `support.fakes.FakeHostAllocator`,
which records every call, in order, into the same list as a recording `gc.collect`.
"""

from __future__ import annotations

import functools
import gc
import itertools
import re
import weakref
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
from support.fakes import ACCELERATOR_ENTRY_POINT_NAME, ENTRY_POINT_NAME, FakeHostAllocator, MiB, probes

from ddo_hooks import HostCacheReleaseReport, parse_report, release_pytorch_host_cache
from ddo_hooks.errors import HostCacheReleaseError, InvalidArgumentError
from ddo_hooks.release import host_cache
from ddo_hooks.release.allocator import EntryPoint, TorchHostAllocator, backend, use_backend

FROM_GC = ("gc.collect(", "has_primary_context", "synchronize", "raw_host_stats", "release")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of the fake backend and of `gc.collect`, in order."""
    recorded: list[str] = []
    real_collect = gc.collect

    def recording_collect(*args: int) -> int:
        recorded.append(f"gc.collect({', '.join(map(str, args))})")
        return real_collect(*args)

    monkeypatch.setattr(gc, "collect", recording_collect)
    return recorded


@pytest.fixture
def fake(calls: list[str]) -> Iterator[FakeHostAllocator]:
    """A fake allocator installed at the seam for the duration of the test."""
    with use_backend(FakeHostAllocator(calls=calls)) as installed:
        yield installed


@pytest.fixture
def gc_paused() -> Iterator[None]:
    """No automatic collection during the test, so only the release core collects."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def boundary(calls: list[str]) -> list[str]:
    """The calls from the garbage collection on: what an executed boundary does."""
    return [c for c in calls if c.startswith(FROM_GC)]


def release(**kwargs: object) -> HostCacheReleaseReport:
    """An enabled release; keyword arguments override the defaults."""
    arguments = {"enabled": True, "phase": "before_transformer", "device": "cuda:0", **kwargs}
    return release_pytorch_host_cache(**arguments)


def dropped_module_in_a_cycle() -> weakref.ref:
    """A dropped `nn.Module` in a reference cycle, old enough to sit in the oldest generation.

    Wrapping `forward` in a partial bound to the module is what hook wrappers do.
    """
    module = torch.nn.Linear(4, 4)
    module.forward = functools.partial(type(module).forward, module)
    ref = weakref.ref(module)
    gc.collect()  # survivors are promoted: the cycle is now old
    del module
    return ref


# --- the real backend on this CPU build ---------------------------------------------------

cpu_build_only = pytest.mark.skipif(
    torch.version.cuda is not None or torch.version.hip is not None,
    reason="checks a CPU-only torch build (the GPU machine's CUDA build is covered by tests/gpu)",
)


def test_the_real_backend_is_installed_by_default():
    assert isinstance(backend(), TorchHostAllocator)


@cpu_build_only
def test_the_real_backend_has_no_entry_point_on_a_cpu_build_and_says_why():
    entry = TorchHostAllocator().entry_point(lazy_init_done=False)
    assert isinstance(entry, str)
    assert f"torch {torch.__version__}" in entry
    assert "without CUDA" in entry


@cpu_build_only
def test_the_real_backend_probes_report_no_cuda_without_initializing_it():
    real = TorchHostAllocator()
    assert real.torch_version() == torch.__version__
    assert real.cuda_initialized() is False
    assert real.in_bad_fork() is False
    assert real.device_count() == 0
    assert torch.cuda.is_initialized() is False


def test_disabled_by_default_is_a_noop_on_the_real_backend():
    r = release_pytorch_host_cache().release
    assert (r.status, r.noop_reason, r.released) == ("noop", "disabled", False)
    assert r.torch_version == torch.__version__
    assert torch.cuda.is_initialized() is False


@cpu_build_only
def test_enabled_on_a_cpu_build_is_an_unsupported_build_noop_naming_the_torch_version():
    r = release().release
    assert (r.status, r.noop_reason, r.released) == ("noop", "unsupported_build", False)
    assert torch.__version__ in r.detail
    assert r.entry_point is None
    assert (r.before, r.after, r.collection, r.allocator_bytes_delta) == (None, None, None, None)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:7", 3, torch.device("cuda", 1)])
def test_no_call_on_the_real_backend_initializes_cuda(device: object):
    release_pytorch_host_cache(enabled=True, phase="manual", device=device)
    release_pytorch_host_cache(enabled=False, phase="manual", device=device)
    assert torch.cuda.is_initialized() is False


def test_noop_reports_are_valid_public_reports():
    report = release()
    assert parse_report(report.model_dump(mode="json")) == report
    assert report.model_dump(mode="json")["route"] == "pytorch_host_cache_release"


# --- no-op branches --------------------------------------------------------------------------


def test_disabled_makes_no_call_beyond_the_torch_version(fake: FakeHostAllocator, calls: list[str]):
    r = release(enabled=False).release
    assert (r.status, r.noop_reason) == ("noop", "disabled")
    assert calls == ["torch_version"]


def test_a_build_without_entry_point_is_an_unsupported_build_noop(fake: FakeHostAllocator, calls: list[str]):
    fake.entry = "absent"
    r = release().release
    assert (r.noop_reason, r.released) == ("unsupported_build", False)
    assert r.detail == "torch 2.13.0 exposes no host-cache release entry point (torch >= 2.5 does)"
    assert probes(calls) == []
    assert "release" not in calls


def test_a_forked_child_is_a_noop_that_touches_no_device(fake: FakeHostAllocator, calls: list[str]):
    fake.bad_fork = True
    r = release().release
    assert r.noop_reason == "forked_child"
    assert "forked child" in r.detail
    assert probes(calls) == []
    assert "release" not in calls


def test_cuda_not_initialized_and_never_allocated_is_a_noop_without_any_cuda_probe(
    fake: FakeHostAllocator, calls: list[str]
):
    fake.cuda_flag = False
    fake.cached_bytes = fake.live_bytes = fake.host_allocs = 0
    r = release(device="cuda").release
    assert (r.status, r.noop_reason, r.released) == ("noop", "cuda_not_initialized", False)
    assert probes(calls) == []
    assert "release" not in calls
    assert not any(c.startswith("gc.collect") for c in calls)


def test_cuda_not_initialized_with_unreadable_stats_is_a_noop(fake: FakeHostAllocator, calls: list[str]):
    fake.cuda_flag = False
    fake.stats_error = RuntimeError("stats broke")
    assert release().release.noop_reason == "cuda_not_initialized"
    assert probes(calls) == []


def test_pinned_memory_without_the_python_cuda_flag_executes(fake: FakeHostAllocator, calls: list[str]):
    fake.cuda_flag = False  # pinning initializes CUDA in C++ without setting the Python flag
    r = release().release
    assert (r.status, r.released) == ("executed", True)
    assert "release" in calls


def test_blocks_allocated_once_and_all_freed_still_count_as_an_allocator_in_use(
    fake: FakeHostAllocator, calls: list[str]
):
    fake.cuda_flag = False
    fake.cached_bytes = fake.live_bytes = 0
    fake.host_allocs = 3
    assert release().release.status == "executed"


def test_a_lazy_init_entry_point_without_the_python_flag_is_a_noop_that_is_not_called(
    fake: FakeHostAllocator, calls: list[str]
):
    fake.cuda_flag = False
    fake.entry = "requires_lazy_init"
    r = release().release
    assert (r.status, r.noop_reason, r.released) == ("noop", "lazy_init_required", False)
    assert ACCELERATOR_ENTRY_POINT_NAME in r.detail
    assert "release" not in calls
    assert probes(calls) == []


def test_a_lazy_init_entry_point_after_lazy_init_executes(fake: FakeHostAllocator, calls: list[str]):
    fake.entry = "requires_lazy_init"
    assert release().release.status == "executed"
    assert "release" in calls


def test_with_both_entry_points_the_accelerator_one_releases_once_lazy_init_ran(fake: FakeHostAllocator):
    fake.entry = "both"
    r = release().release
    assert (r.status, r.entry_point) == ("executed", ACCELERATOR_ENTRY_POINT_NAME)


def test_with_both_entry_points_memory_pinned_before_lazy_init_is_released_by_the_direct_one(
    fake: FakeHostAllocator, calls: list[str]
):
    fake.entry = "both"
    fake.cuda_flag = False  # pinned, but no CUDA tensor was made: the accelerator entry point would do nothing
    r = release().release
    assert (r.status, r.entry_point, r.allocator_bytes_delta) == ("executed", ENTRY_POINT_NAME, 4 * MiB)
    assert [c for c in probes(calls) if c != "device_count"] == []  # no lazy init: no device resolved or synced


@pytest.mark.parametrize(
    ("present", "lazy_init_done", "chosen", "requires_lazy_init"),
    [
        ({"host", "accelerator"}, True, "torch._C._accelerator_emptyHostCache", True),
        ({"host", "accelerator"}, False, "torch._C._host_emptyCache", False),
        ({"accelerator"}, False, "torch._C._accelerator_emptyHostCache", True),
        ({"accelerator"}, True, "torch._C._accelerator_emptyHostCache", True),
        ({"host"}, True, "torch._C._host_emptyCache", False),
        ({"host"}, False, "torch._C._host_emptyCache", False),
    ],
)
def test_the_real_backend_chooses_the_entry_point_the_specification_asks_for(
    monkeypatch, present, lazy_init_done, chosen, requires_lazy_init
):
    from ddo_hooks._compat import torch as torch_compat

    def entry(name):
        return (lambda: None) if name in present else None

    monkeypatch.setattr(torch_compat, "is_cuda_build", lambda: True)
    monkeypatch.setattr(torch_compat, "host_empty_cache", lambda: entry("host"))
    monkeypatch.setattr(torch_compat, "accelerator_empty_host_cache", lambda: entry("accelerator"))
    picked = TorchHostAllocator().entry_point(lazy_init_done=lazy_init_done)
    assert (picked.name, picked.requires_lazy_init) == (chosen, requires_lazy_init)


def test_the_real_backend_without_either_entry_point_says_which_torch_has_one(monkeypatch):
    from ddo_hooks._compat import torch as torch_compat

    monkeypatch.setattr(torch_compat, "is_cuda_build", lambda: True)
    monkeypatch.setattr(torch_compat, "host_empty_cache", lambda: None)
    monkeypatch.setattr(torch_compat, "accelerator_empty_host_cache", lambda: None)
    assert "exposes no host-cache release entry point (torch >= 2.5 does)" in TorchHostAllocator().entry_point(
        lazy_init_done=True
    )


# --- the executed path -------------------------------------------------------------------------


def test_an_executed_boundary_collects_syncs_the_selected_device_once_samples_releases_samples(
    fake: FakeHostAllocator, calls: list[str]
):
    release(device="cuda:1")
    assert boundary(calls) == [
        "gc.collect()",
        "has_primary_context(1)",
        "synchronize(1)",
        "raw_host_stats",
        "release",
        "raw_host_stats",
    ]


def test_an_executed_report_says_what_was_released(fake: FakeHostAllocator):
    r = release(device="cuda:1").release
    assert (r.status, r.noop_reason, r.released) == ("executed", None, True)
    assert (r.device, r.synchronized, r.entry_point) == ("cuda:1", True, ENTRY_POINT_NAME)
    assert r.torch_version == "2.13.0"
    assert r.before.allocated_bytes == 5 * MiB
    assert r.after.allocated_bytes == 1 * MiB
    assert r.allocator_bytes_delta == 4 * MiB
    assert r.before.active_bytes == r.after.active_bytes == 1 * MiB
    assert r.host_before.rss_bytes > 0
    assert r.host_after.rss_bytes > 0
    assert r.detail == f"released unused pinned host blocks through {ENTRY_POINT_NAME}"


def test_torch_2_7_to_2_9_counters_are_normalized_to_owned_bytes(fake: FakeHostAllocator):
    fake.layout = "2.7-2.9"
    r = release().release
    assert r.before.counter_layout == "torch2.7-2.9"
    assert (r.before.allocated_bytes, r.after.allocated_bytes) == (5 * MiB, 1 * MiB)
    assert r.allocator_bytes_delta == 4 * MiB


def test_cuda_resolves_to_the_current_device(fake: FakeHostAllocator, calls: list[str]):
    fake.current = 1
    r = release(device="cuda").release
    assert r.device == "cuda:1"
    assert "current_device" in calls
    assert [c for c in calls if c.startswith("synchronize")] == ["synchronize(1)"]


def test_an_explicit_index_never_asks_for_the_current_device(fake: FakeHostAllocator, calls: list[str]):
    release(device=torch.device("cuda", 1))
    assert "current_device" not in calls
    assert "synchronize(1)" in calls


def test_a_device_without_a_primary_context_is_not_synchronized_but_still_released(
    fake: FakeHostAllocator, calls: list[str]
):
    fake.contexts = {0}
    r = release(device="cuda:1").release
    assert boundary(calls) == [
        "gc.collect()",
        "has_primary_context(1)",
        "raw_host_stats",
        "release",
        "raw_host_stats",
    ]
    assert (r.status, r.released, r.synchronized) == ("executed", True, False)
    assert r.timings.synchronize_seconds is None
    assert r.detail.endswith("cuda:1 has no CUDA context, so there were no transfers to wait for")


@pytest.mark.parametrize("device", ["cuda:2", 5, torch.device("cuda", 9)])
def test_an_index_the_machine_lacks_is_refused_naming_the_device_argument(
    fake: FakeHostAllocator, calls: list[str], device: object
):
    with pytest.raises(InvalidArgumentError, match=r"^device=.*: this process sees 2 CUDA device\(s\), so use 0\.\.1$"):
        release(device=device)
    assert "release" not in calls
    assert not any(c.startswith("synchronize") for c in calls)


def test_a_synchronize_failure_propagates_with_its_cause_and_nothing_is_released(
    fake: FakeHostAllocator, calls: list[str]
):
    original = RuntimeError("CUDA error: an illegal memory access was encountered")
    fake.synchronize_error = original
    with pytest.raises(
        HostCacheReleaseError,
        match=r"^synchronizing cuda:0 before the 'before_transformer' release failed: CUDA error: an illegal",
    ) as raised:
        release()
    assert raised.value.__cause__ is original
    assert "release" not in calls


def test_a_release_failure_propagates_with_its_cause(fake: FakeHostAllocator):
    original = RuntimeError("CUDA error: unspecified launch failure")
    fake.release_error = original
    with pytest.raises(
        HostCacheReleaseError,
        match=rf"^{re.escape(ENTRY_POINT_NAME)}\(\) failed at the 'before_transformer' boundary: CUDA error",
    ) as raised:
        release()
    assert raised.value.__cause__ is original


def test_a_failed_release_frees_the_release_slot(fake: FakeHostAllocator):
    fake.release_error = RuntimeError("boom")
    with pytest.raises(HostCacheReleaseError):
        release()
    fake.release_error = None
    assert release().release.status == "executed"


def test_a_failing_stats_read_gives_unavailable_snapshots_never_zeros(fake: FakeHostAllocator):
    fake.stats_error = RuntimeError("counters broke")
    r = release().release
    assert (r.status, r.released) == ("executed", True)
    for snapshot in (r.before, r.after):
        assert snapshot.status == "unavailable"
        assert snapshot.unavailable_reason == "reading the host allocator stats raised RuntimeError: counters broke"
        assert (snapshot.allocated_bytes, snapshot.reported_active_bytes, snapshot.active_bytes) == (
            None,
            None,
            None,
        )
    assert r.allocator_bytes_delta is None


def test_a_failing_read_after_the_release_leaves_the_delta_null(fake: FakeHostAllocator):
    fake.stats_error = RuntimeError("counters broke")
    fake.failing_stats_reads = frozenset({2})
    r = release().release
    assert (r.before.status, r.after.status) == ("available", "unavailable")
    assert r.allocator_bytes_delta is None


def test_a_torch_that_cannot_read_counters_gives_unavailable_snapshots(fake: FakeHostAllocator):
    fake.stats_unreadable = True
    r = release().release
    assert r.before.status == r.after.status == "unavailable"
    assert "torch >= 2.7" in r.before.unavailable_reason
    assert r.allocator_bytes_delta is None


def test_elapsed_seconds_covers_every_step_of_the_breakdown(fake: FakeHostAllocator, monkeypatch):
    # A clock that ticks one second per reading, and a release call that takes 100 of them.
    ticks = itertools.count()
    monkeypatch.setattr(host_cache, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    real_release = fake._release

    def slow_release() -> None:
        for _ in range(100):
            next(ticks)
        real_release()

    monkeypatch.setattr(fake, "_release", slow_release)
    r = release().release
    t = r.timings
    assert t.release_seconds >= 100
    assert min(t.collect_seconds, t.synchronize_seconds, t.snapshot_seconds) >= 1
    assert t.collect_seconds + t.synchronize_seconds + t.snapshot_seconds + t.release_seconds < r.elapsed_seconds


def test_an_executed_report_round_trips_as_a_public_report(fake: FakeHostAllocator):
    report = release()
    assert parse_report(report.model_dump(mode="json")) == report
    assert parse_report(report.model_dump_json()) == report


def test_the_entry_point_of_the_fake_is_an_entry_point(fake: FakeHostAllocator):
    entry = fake.entry_point(lazy_init_done=True)
    assert isinstance(entry, EntryPoint)
    assert entry.requires_lazy_init is False


# --- min_releasable_bytes -----------------------------------------------------------------------


def test_below_the_minimum_on_a_trusted_torch_the_release_is_skipped(fake: FakeHostAllocator, calls: list[str]):
    r = release(min_releasable_bytes=8 * MiB).release
    assert (r.status, r.noop_reason, r.released) == ("noop", "below_threshold", False)
    assert (r.threshold.decision, r.threshold.releasable_bytes) == ("skip_below_threshold", 4 * MiB)
    assert "release" not in calls
    assert (r.after, r.host_after, r.allocator_bytes_delta, r.timings.release_seconds) == (
        None,
        None,
        None,
        None,
    )
    assert r.detail.startswith("4194304 releasable bytes cached, below min_releasable_bytes=8388608")


def test_at_or_above_the_minimum_on_a_trusted_torch_the_release_runs(fake: FakeHostAllocator, calls: list[str]):
    r = release(min_releasable_bytes=4 * MiB).release
    assert r.status == "executed"
    assert (r.threshold.decision, r.threshold.releasable_bytes) == ("release", 4 * MiB)
    assert "release" in calls


def test_a_zero_minimum_makes_no_threshold_decision(fake: FakeHostAllocator):
    assert release(min_releasable_bytes=0).release.threshold is None


@pytest.mark.parametrize("version", ["2.11.0+cu130", "2.12.1", "2.9.0", "nightly"])
def test_on_a_torch_with_a_wrong_active_counter_the_release_runs_and_says_untrusted(
    fake: FakeHostAllocator, calls: list[str], version: str
):
    fake.version = version
    r = release(min_releasable_bytes=8 * MiB).release
    assert r.status == "executed"
    assert (r.threshold.decision, r.threshold.releasable_bytes) == ("release_counter_untrusted", None)
    assert "release" in calls


def test_an_inconsistent_active_counter_on_a_trusted_torch_is_not_used(fake: FakeHostAllocator, calls: list[str]):
    fake.reported_active = 3_904_897_030  # more than the allocator owns
    r = release(min_releasable_bytes=8 * MiB).release
    assert r.status == "executed"
    assert r.threshold.decision == "release_counter_untrusted"
    assert (r.before.reported_active_bytes, r.before.active_bytes) == (3_904_897_030, None)
    assert r.before.active_counter_consistent is False


def test_unavailable_counters_on_a_trusted_torch_are_not_used_for_the_minimum(fake: FakeHostAllocator):
    fake.stats_error = RuntimeError("counters broke")
    r = release(min_releasable_bytes=8 * MiB).release
    assert (r.status, r.threshold.decision) == ("executed", "release_counter_untrusted")


# --- garbage collection strategies -------------------------------------------------------------


def test_full_collects_every_generation(fake: FakeHostAllocator, calls: list[str]):
    c = release(collect="full").release.collection
    assert [x for x in calls if x.startswith("gc.")] == ["gc.collect()"]
    assert (c.strategy, c.full_collection) == ("full", True)


def test_young_collects_generations_0_and_1_only(fake: FakeHostAllocator, calls: list[str]):
    c = release(collect="young").release.collection
    assert [x for x in calls if x.startswith("gc.")] == ["gc.collect(1)"]
    assert (c.strategy, c.full_collection) == ("young", False)


def test_a_young_collection_alone_does_not_free_an_old_cycle(fake: FakeHostAllocator, gc_paused):
    ref = dropped_module_in_a_cycle()
    c = release(collect="young", expect_freed={"text_encoder": ref}).release.collection
    assert ref() is not None
    assert (c.expected_freed, c.survivors) == (("text_encoder",), ("text_encoder",))
    gc.collect()
    assert ref() is None


def test_auto_collects_fully_when_a_dropped_component_in_a_cycle_is_still_alive(
    fake: FakeHostAllocator, calls: list[str], gc_paused
):
    ref = dropped_module_in_a_cycle()
    calls.clear()
    c = release(collect="auto", expect_freed={"text_encoder": ref}).release.collection
    assert ref() is None
    assert [x for x in calls if x.startswith("gc.")] == ["gc.collect(1)", "gc.collect()"]
    assert (c.strategy, c.full_collection, c.survivors) == ("auto", True, ())
    assert c.unreachable_objects > 0


def test_auto_stays_young_when_every_expected_object_is_already_dead(
    fake: FakeHostAllocator, calls: list[str], gc_paused
):
    module = torch.nn.Linear(4, 4)
    ref = weakref.ref(module)
    del module  # no cycle: freed by reference counting
    c = release(collect="auto", expect_freed={"text_encoder": ref}).release.collection
    assert [x for x in calls if x.startswith("gc.")] == ["gc.collect(1)"]
    assert (c.full_collection, c.survivors) == (False, ())


def test_auto_without_expectations_stays_young(fake: FakeHostAllocator, calls: list[str]):
    c = release(collect="auto").release.collection
    assert [x for x in calls if x.startswith("gc.")] == ["gc.collect(1)"]
    assert (c.full_collection, c.expected_freed) == (False, ())


def test_survivors_held_by_the_caller_are_named(fake: FakeHostAllocator, gc_paused):
    transformer = torch.nn.Linear(4, 4)
    dropped = dropped_module_in_a_cycle()
    c = release(
        collect="auto", expect_freed={"text_encoder": dropped, "transformer": weakref.ref(transformer)}
    ).release.collection
    assert c.full_collection is True
    assert c.expected_freed == ("text_encoder", "transformer")
    assert c.survivors == ("transformer",)
    assert dropped() is None


# --- argument validation -----------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [1, 0, "yes", None])
def test_enabled_must_be_a_bool(enabled: object):
    with pytest.raises(InvalidArgumentError, match=r"^enabled=.* must be True or False$"):
        release_pytorch_host_cache(enabled=enabled)


@pytest.mark.parametrize(
    "phase",
    ["", "Before", "BEFORE_TRANSFORMER", "1st", "_x", "before transformer", "a" * 65, "abc\n", 3, None],
)
def test_a_malformed_phase_label_is_refused_with_the_accepted_form(phase: object):
    with pytest.raises(InvalidArgumentError, match=r"^phase=.* is not a phase label: use a lowercase letter then"):
        release_pytorch_host_cache(phase=phase)


@pytest.mark.parametrize("phase", ["a", "before_transformer", "after-vae.decode2", "a" * 64])
def test_well_formed_phase_labels_are_accepted(phase: str):
    assert release_pytorch_host_cache(phase=phase).release.phase == phase


@pytest.mark.parametrize("collect", ["FULL", "none", "", 2, None])
def test_an_unknown_collect_strategy_is_refused(collect: object):
    with pytest.raises(InvalidArgumentError, match=r"^collect=.* must be 'full', 'young' or 'auto'$"):
        release_pytorch_host_cache(collect=collect)


def test_expect_freed_must_be_a_mapping():
    with pytest.raises(InvalidArgumentError, match=r"^expect_freed must map names to weakref\.ref objects$"):
        release_pytorch_host_cache(expect_freed=[weakref.ref(torch.nn.Linear(1, 1))])


def test_expect_freed_with_a_strong_reference_is_refused():
    module = torch.nn.Linear(1, 1)
    with pytest.raises(
        InvalidArgumentError,
        match=r"^expect_freed\['vae'\] must be a weakref\.ref .*a strong reference would keep",
    ):
        release_pytorch_host_cache(expect_freed={"vae": module})


def test_expect_freed_with_an_empty_name_is_refused():
    module = torch.nn.Linear(1, 1)
    with pytest.raises(InvalidArgumentError, match=r"^expect_freed\[''\] must be a weakref\.ref under a non-empty"):
        release_pytorch_host_cache(expect_freed={"": weakref.ref(module)})


@pytest.mark.parametrize("minimum", [-1, True, False, 1.5, "1", None])
def test_min_releasable_bytes_must_be_a_non_negative_int(minimum: object):
    with pytest.raises(InvalidArgumentError, match=r"^min_releasable_bytes=.* must be an int >= 0$"):
        release_pytorch_host_cache(min_releasable_bytes=minimum)


def test_arguments_are_checked_before_anything_is_called(fake: FakeHostAllocator, calls: list[str]):
    with pytest.raises(InvalidArgumentError):
        release(phase="Bad")
    assert calls == []


def test_a_bad_device_is_refused_even_when_disabled():
    with pytest.raises(InvalidArgumentError, match=r"^device='cpu' is not a CUDA device"):
        release_pytorch_host_cache(enabled=False, device="cpu")
