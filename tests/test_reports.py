"""The report models of ddo_hooks' shape, schema version 1: what they accept, what they refuse and why."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddo_hooks import parse_report
from ddo_hooks.errors import ReportError
from ddo_hooks.release.counters import unavailable_snapshot
from ddo_hooks.reports.allocator import AllocatorSnapshot, validate_active_counter
from ddo_hooks.reports.base import HostObservation
from ddo_hooks.reports.boundary import ActionReport, BoundaryRefusalReport
from ddo_hooks.reports.host_cache import (
    GarbageCollection,
    HostCacheRelease,
    HostCacheReleaseReport,
    HostCacheReleaseSetup,
    ReleaseTimings,
    ThresholdDecision,
)
from ddo_hooks.reports.parse import report_json_schema

MiB = 1 << 20
RELEASE = "pytorch_host_cache_release.setup.host_cache_release"
OURS = r"not a valid report of ddo_hooks' shape \([^)]*\)"  # how an invalid report of our shape is refused


def snapshot(allocated: int, active: int) -> dict[str, Any]:
    return {
        "status": "available",
        "unavailable_reason": None,
        "allocated_bytes": allocated,
        "reported_active_bytes": active,
        "active_bytes": active,
        "active_counter_consistent": True,
        "counter_layout": "torch>=2.10",
        "pinned_blocks_total": 7,
        "pinned_bytes_total": 9 * MiB,
        "pin_seconds_total": 0.125,
    }


def host() -> dict[str, Any]:
    return {
        "platform": "linux",
        "rss_bytes": 512 * MiB,
        "private_bytes": None,
        "physical_available_bytes": None,
        "commit_available_bytes": None,
        "rss_anon_bytes": 128 * MiB,
        "rss_file_bytes": 320 * MiB,
        "rss_shmem_bytes": 64 * MiB,
        "cgroup_memory_bytes": 1024 * MiB,
        "cgroup_limit_bytes": None,
        "unavailable": {},
    }


def executed() -> dict[str, Any]:
    """A valid executed report, as `model_dump(mode="json")` shows it."""
    return {
        "schema_version": 1,
        "route": "pytorch_host_cache_release",
        "setup": {
            "host_cache_release": {
                "phase": "before_transformer",
                "status": "executed",
                "noop_reason": None,
                "detail": "released unused pinned host blocks through torch._C._host_emptyCache",
                "released": True,
                "elapsed_seconds": 0.5,
                "timings": {
                    "collect_seconds": 0.25,
                    "synchronize_seconds": 0.001,
                    "snapshot_seconds": 0.01,
                    "release_seconds": 0.155,
                },
                "device": "cuda:0",
                "synchronized": True,
                "entry_point": "torch._C._host_emptyCache",
                "torch_version": "2.11.0+cu130",
                "collection": {
                    "strategy": "full",
                    "full_collection": True,
                    "unreachable_objects": 12,
                    "expected_freed": [],
                    "survivors": [],
                },
                "threshold": None,
                "before": snapshot(5 * MiB, 1 * MiB),
                "after": snapshot(1 * MiB, 1 * MiB),
                "allocator_bytes_delta": 4 * MiB,
                "host_before": host(),
                "host_after": host(),
                "pinned_since_previous": {"since_phase": "after_call", "blocks": 2, "bytes": 4 * MiB, "seconds": 0.002},
                "pinned_allocation": "cudaHostAlloc",
            }
        },
    }


def noop() -> dict[str, Any]:
    """A valid no-op report (disabled)."""
    data = executed()
    data["setup"]["host_cache_release"].update(
        status="noop",
        noop_reason="disabled",
        detail="release disabled (enabled=False)",
        released=False,
        timings={
            "collect_seconds": 0.0,
            "synchronize_seconds": None,
            "snapshot_seconds": 0.0,
            "release_seconds": None,
        },
        device="cuda",
        synchronized=False,
        entry_point=None,
        collection=None,
        before=None,
        after=None,
        allocator_bytes_delta=None,
        host_before=None,
        host_after=None,
    )
    return data


def changed(data: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A copy of `data` with fields of `setup.host_cache_release` replaced."""
    data = copy.deepcopy(data)
    data["setup"]["host_cache_release"].update(fields)
    return data


def refused(data: Any, match: str) -> None:
    with pytest.raises(ReportError, match=match):
        parse_report(data)


# --- what is accepted -------------------------------------------------------------------------


def test_a_valid_executed_report_parses_as_a_host_cache_release_report():
    report = parse_report(executed())
    assert isinstance(report, HostCacheReleaseReport)
    assert report.release.allocator_bytes_delta == 4 * MiB
    assert report.model_dump(mode="json") == executed()


def test_a_valid_noop_report_parses():
    assert parse_report(noop()).release.noop_reason == "disabled"


def test_reports_are_frozen():
    report = parse_report(executed())
    with pytest.raises(ValueError, match="frozen"):
        report.release.phase = "other"  # type: ignore[misc]


def test_a_json_document_parses_like_a_mapping():
    assert parse_report(json.dumps(executed())) == parse_report(executed())
    assert parse_report(json.dumps(executed()).encode()) == parse_report(executed())


def test_the_route_tells_the_report_types_apart():
    refusal = {
        "schema_version": 1,
        "route": "phase_boundary_refusal",
        "setup": {
            "boundary_refusal": {
                "boundary": "before_transformer",
                "action": "release_pytorch_host_cache",
                "reason": "denoising",
                "detail": "pipe is inside a denoising loop",
                "requested_by": "host",
                "call_index": 0,
            }
        },
    }
    action = {
        "schema_version": 1,
        "route": "boundary_action",
        "setup": {"boundary_action": {"action": "log", "boundary": "after_call", "status": "executed"}},
    }
    assert isinstance(parse_report(refusal), BoundaryRefusalReport)
    assert isinstance(parse_report(action), ActionReport)


# --- what is refused, with the field named -----------------------------------------------------


@pytest.mark.parametrize("missing", ["before", "after", "host_before", "host_after"])
def test_an_executed_release_needs_its_snapshots(missing: str):
    refused(changed(executed(), **{missing: None}), rf"^{OURS}: {RELEASE}: .*needs {missing}$")


def test_an_executed_release_needs_its_release_timing():
    data = executed()
    data["setup"]["host_cache_release"]["timings"]["release_seconds"] = None
    refused(data, r"an executed release needs timings\.release_seconds")


def test_an_executed_release_names_its_entry_point():
    refused(changed(executed(), entry_point=None), "an executed release names its entry_point and device")


def test_released_without_executed_is_refused():
    refused(changed(noop(), released=True), r"released must be true exactly when status is 'executed'")


def test_executed_without_released_is_refused():
    refused(changed(executed(), released=False), r"released must be true exactly when status is 'executed'")


def test_a_noop_needs_a_reason():
    refused(changed(noop(), noop_reason=None), r"status 'noop' needs a noop_reason")


def test_an_executed_release_has_no_noop_reason():
    refused(changed(executed(), noop_reason="disabled"), r"noop_reason must be null when status is 'executed'")


def test_a_noop_has_no_release_timing():
    data = noop()
    data["setup"]["host_cache_release"]["timings"]["release_seconds"] = 0.1
    refused(data, r"timings\.release_seconds must be null when the release call did not run")


def test_a_delta_that_is_not_before_minus_after_is_refused():
    refused(
        changed(executed(), allocator_bytes_delta=5),
        r"allocator_bytes_delta must be 4194304 \(before\.allocated_bytes minus after\.allocated_bytes\)",
    )


def test_a_delta_without_both_snapshots_is_refused():
    refused(changed(noop(), allocator_bytes_delta=0), r"allocator_bytes_delta must be None")


def test_a_delta_with_an_unavailable_snapshot_must_be_null():
    after = unavailable_snapshot("read failed").model_dump(mode="json")
    refused(changed(executed(), after=after), r"allocator_bytes_delta must be None")
    assert parse_report(changed(executed(), after=after, allocator_bytes_delta=None)).release.after == (
        unavailable_snapshot("read failed")
    )


def test_a_negative_delta_is_allowed_when_it_is_what_was_observed():
    data = changed(executed(), before=snapshot(1 * MiB, 0), after=snapshot(3 * MiB, 0), allocator_bytes_delta=-2 * MiB)
    assert parse_report(data).release.allocator_bytes_delta == -2 * MiB


@pytest.mark.parametrize("field", ["allocated_bytes", "active_bytes"])
def test_negative_snapshot_bytes_are_refused(field: str):
    data = executed()
    data["setup"]["host_cache_release"]["before"][field] = -1
    refused(data, rf"{RELEASE}\.before\.{field}: -1 is out of range; expected a value of at least 0")


@pytest.mark.parametrize("field", ["rss_bytes", "private_bytes", "physical_available_bytes", "commit_available_bytes"])
def test_negative_host_bytes_are_refused(field: str):
    data = executed()
    data["setup"]["host_cache_release"]["host_after"][field] = -1
    refused(data, rf"{RELEASE}\.host_after\.{field}: -1 is out of range; expected a value of at least 0")


def test_a_byte_count_must_be_an_integer():
    data = executed()
    data["setup"]["host_cache_release"]["before"]["allocated_bytes"] = 4096.0
    refused(data, rf"{RELEASE}\.before\.allocated_bytes: expected an integer, got 4096.0")


@pytest.mark.parametrize("where", ["root", "release", "timings", "before", "host_before", "collection"])
def test_unknown_fields_are_refused_by_name(where: str):
    data = executed()
    body = data["setup"]["host_cache_release"]
    target = {"root": data, "release": body}.get(where) or body[where]
    target["bogus"] = 1
    refused(data, r"bogus: unknown key: this report has no such field")


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_another_schema_version_is_refused(version: object):
    data = executed()
    data["schema_version"] = version
    refused(data, r"pytorch_host_cache_release\.schema_version: expected 1, got ")


def test_an_unknown_route_is_refused():
    data = executed()
    data["route"] = "somewhere_else"
    refused(data, rf"^{OURS}: <root>: 'somewhere_else' is not a route of ddo_hooks' reports; the routes: ")


def test_an_unavailable_snapshot_with_counters_is_refused():
    data = executed()
    data["setup"]["host_cache_release"]["before"].update(status="unavailable", unavailable_reason="read failed")
    refused(data, rf"{RELEASE}\.before: Value error, an unavailable snapshot carries no counters")


def test_an_unavailable_snapshot_needs_a_reason():
    with pytest.raises(ValueError, match="an unavailable snapshot needs unavailable_reason saying why"):
        AllocatorSnapshot(
            status="unavailable",
            allocated_bytes=None,
            reported_active_bytes=None,
            active_bytes=None,
            active_counter_consistent=False,
        )


def test_an_available_snapshot_needs_owned_bytes():
    with pytest.raises(ValueError, match="an available snapshot needs allocated_bytes"):
        AllocatorSnapshot(
            status="available",
            allocated_bytes=None,
            reported_active_bytes=None,
            active_bytes=None,
            active_counter_consistent=False,
        )


def test_an_available_snapshot_has_no_unavailable_reason():
    with pytest.raises(ValueError, match=r"unavailable_reason is only for status='unavailable'"):
        AllocatorSnapshot.model_validate({**snapshot(4096, 0), "unavailable_reason": "why"})


@pytest.mark.parametrize(
    ("reported", "active", "expected"),
    [(1024, 512, "1024"), (-1, 0, "None"), (8192, 8192, "None"), (1024.0, 1024, "None"), (None, 0, "None")],
)
def test_active_bytes_must_follow_the_validation_rule(reported: object, active: int, expected: str):
    data = executed()
    data["setup"]["host_cache_release"]["before"].update(
        allocated_bytes=4096, reported_active_bytes=reported, active_bytes=active
    )
    refused(data, rf"{RELEASE}\.before: Value error, active_bytes must be {expected}: the validated value")


def test_active_counter_consistent_must_agree_with_active_bytes():
    data = executed()
    data["setup"]["host_cache_release"]["before"]["active_counter_consistent"] = False
    refused(data, r"active_counter_consistent must be True when active_bytes is 1048576")


def test_a_non_finite_reported_counter_is_refused():
    with pytest.raises(ValueError, match="reported_active_bytes must be finite"):
        AllocatorSnapshot.model_validate({**snapshot(4096, 0), "reported_active_bytes": math.inf, "active_bytes": None})


def test_the_torch_2_11_counters_seen_after_a_release_are_a_valid_inconsistent_snapshot():
    s = AllocatorSnapshot(
        status="available",
        allocated_bytes=0,
        reported_active_bytes=3_904_897_030,
        active_bytes=None,
        active_counter_consistent=False,
    )
    assert s.reported_active_bytes == 3_904_897_030


def test_the_torch_2_11_counters_cannot_be_passed_off_as_validated():
    with pytest.raises(ValueError, match=r"active_bytes must be None: .*3904897030 against allocated_bytes=0"):
        AllocatorSnapshot(
            status="available",
            allocated_bytes=0,
            reported_active_bytes=3_904_897_030,
            active_bytes=3_904_897_030,
            active_counter_consistent=True,
        )


def test_timings_that_exceed_elapsed_seconds_are_refused():
    refused(changed(executed(), elapsed_seconds=0.4), r"the timings add up to more than elapsed_seconds")


@pytest.mark.parametrize("elapsed", [-0.1, "inf", "NaN"])
def test_elapsed_seconds_must_be_finite_and_non_negative(elapsed: object):
    refused(changed(executed(), elapsed_seconds=elapsed), rf"{RELEASE}\.elapsed_seconds: ")


def test_synchronized_needs_a_synchronize_timing():
    data = executed()
    data["setup"]["host_cache_release"]["timings"]["synchronize_seconds"] = None
    refused(data, r"a synchronized release needs timings\.synchronize_seconds")


def test_a_synchronize_timing_needs_synchronized():
    refused(
        changed(executed(), synchronized=False),
        r"timings\.synchronize_seconds must be null when the device was not",
    )


def test_survivors_must_be_among_the_expected():
    data = executed()
    data["setup"]["host_cache_release"]["collection"].update(expected_freed=["vae"], survivors=["vae", "text_encoder"])
    refused(
        data,
        rf"{RELEASE}\.collection: Value error, survivors \['text_encoder'\] are not among expected_freed",
    )


def test_a_full_strategy_always_collects_fully():
    with pytest.raises(ValueError, match="strategy 'full' always collects the oldest generation"):
        GarbageCollection(strategy="full", full_collection=False, unreachable_objects=0)


def test_a_young_strategy_never_collects_fully():
    with pytest.raises(ValueError, match="strategy 'young' never collects the oldest generation"):
        GarbageCollection(strategy="young", full_collection=True, unreachable_objects=0)


def test_below_threshold_goes_with_a_skip_decision():
    decision = {
        "min_releasable_bytes": 8 * MiB,
        "releasable_bytes": 4 * MiB,
        "decision": "skip_below_threshold",
    }
    refused(
        changed(executed(), threshold=decision),
        r"noop_reason 'below_threshold' goes with threshold\.decision 'skip_below_threshold'",
    )
    refused(
        changed(noop(), noop_reason="below_threshold"),
        r"noop_reason 'below_threshold' goes with threshold\.decision 'skip_below_threshold'",
    )


@pytest.mark.parametrize("phase", ["", "Before", "a" * 65, "before transformer", "abc\n"])
def test_a_malformed_phase_label_is_refused(phase: str):
    refused(changed(executed(), phase=phase), rf"{RELEASE}\.phase: .* is not a phase label: a lowercase letter")


def test_a_host_observation_lists_only_its_own_fields_as_unavailable():
    with pytest.raises(ValueError, match=r"unavailable names unknown field 'gpu_bytes'"):
        HostObservation(platform="linux", rss_bytes=1, unavailable={"gpu_bytes": "no"})
    with pytest.raises(ValueError, match=r"unavailable names unknown field 'platform'"):
        HostObservation(platform="linux", rss_bytes=1, unavailable={"platform": "no"})


def test_an_unavailable_host_field_has_no_value():
    with pytest.raises(ValueError, match="rss_bytes is listed as unavailable but has a value"):
        HostObservation(platform="linux", rss_bytes=1, unavailable={"rss_bytes": "psutil failed"})


def test_parse_report_lists_every_failing_field():
    data = changed(executed(), elapsed_seconds=-1.0, bogus=True)
    with pytest.raises(ReportError) as raised:
        parse_report(data)
    assert f"{RELEASE}.elapsed_seconds" in str(raised.value)
    assert f"{RELEASE}.bogus" in str(raised.value)
    assert raised.value.__cause__ is not None


def test_parse_report_refuses_what_is_not_json():
    refused("{not json", r"^not a valid report \(not JSON, so of neither shape\): <root>: Invalid JSON")


def test_the_json_schema_names_every_route():
    schema = report_json_schema()
    assert schema["title"] == "DDOReport"
    ours, ddo = schema["oneOf"]  # ddo_hooks' shape, then DDO's own (tests/test_ddo_reports.py)
    assert set(ours["discriminator"]["mapping"]) == {
        "pytorch_host_cache_release",
        "phase_boundary_refusal",
        "boundary_action",
        "auxiliary_cpu_source_detach",
        "pinned_copy_repack",
        "done_components_release",
        "ring_offload",
    }
    assert set(ddo["discriminator"]["mapping"]) == {
        "pytorch_host_cache_release",
        "host_memory_observation",
        "vmm_auxiliary_source_detachment",
        "native_vmm_idle_cache_release",
        "diffusers_group_offload",
    }


# --- property tests ----------------------------------------------------------------------------

COUNTERS = st.one_of(st.integers(), st.floats(), st.none(), st.booleans())
OWNED = st.none() | st.integers(min_value=0)


@given(reported=COUNTERS, allocated=OWNED)
def test_validate_active_counter_keeps_exactly_the_integers_within_owned(reported: object, allocated: int | None):
    validated = validate_active_counter(reported, allocated)
    usable = (
        allocated is not None and type(reported) is int and 0 <= reported <= allocated  # type: ignore[operator]
    )
    assert validated == (reported if usable else None)
    assert validated is None or type(validated) is int


@given(reported=COUNTERS, allocated=st.integers(min_value=0))
def test_a_validated_counter_always_makes_a_consistent_snapshot(reported: object, allocated: int):
    if isinstance(reported, bool) or (isinstance(reported, float) and not math.isfinite(reported)):
        reported = None
    active = validate_active_counter(reported, allocated)
    s = AllocatorSnapshot(
        status="available",
        allocated_bytes=allocated,
        reported_active_bytes=reported,
        active_bytes=active,
        active_counter_consistent=active is not None,
    )
    assert s.active_bytes == active


FINITE = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)
NAMES = st.text(min_size=1, max_size=12)
BYTES = st.integers(min_value=0, max_value=1 << 64)


@st.composite
def allocator_snapshots(draw: st.DrawFn) -> AllocatorSnapshot:
    if draw(st.booleans()):
        return unavailable_snapshot(draw(NAMES))
    allocated = draw(BYTES)
    reported = draw(st.none() | st.integers() | st.floats(allow_nan=False, allow_infinity=False))
    active = validate_active_counter(reported, allocated)
    return AllocatorSnapshot(
        status="available",
        allocated_bytes=allocated,
        reported_active_bytes=reported,
        active_bytes=active,
        active_counter_consistent=active is not None,
        counter_layout=draw(st.sampled_from(["torch>=2.10", "torch2.7-2.9", None])),
    )


@st.composite
def host_observations(draw: st.DrawFn) -> HostObservation:
    values: dict[str, int | None] = {}
    unavailable: dict[str, str] = {}
    for name in ("rss_bytes", "private_bytes", "physical_available_bytes", "commit_available_bytes", "rss_anon_bytes",
                 "rss_file_bytes", "rss_shmem_bytes", "cgroup_memory_bytes", "cgroup_limit_bytes"):  # fmt: skip
        values[name] = draw(st.none() | BYTES)
        if values[name] is None and draw(st.booleans()):
            unavailable[name] = draw(NAMES)
    platform = draw(st.sampled_from(["linux", "windows", "darwin", "other"]))
    return HostObservation(platform=platform, unavailable=unavailable, **values)


@st.composite
def collections(draw: st.DrawFn) -> GarbageCollection:
    strategy = draw(st.sampled_from(["full", "young", "auto"]))
    full = {"full": True, "young": False}.get(strategy, draw(st.booleans()))
    expected = draw(st.lists(NAMES, max_size=4, unique=True))
    survivors = [name for name in expected if draw(st.booleans())]
    return GarbageCollection(
        strategy=strategy,
        full_collection=full,
        unreachable_objects=draw(BYTES),
        expected_freed=tuple(expected),
        survivors=tuple(survivors),
    )


@st.composite
def release_reports(draw: st.DrawFn) -> HostCacheReleaseReport:
    executed = draw(st.booleans())
    synchronized = draw(st.booleans())
    timings = ReleaseTimings(
        collect_seconds=draw(FINITE),
        synchronize_seconds=draw(FINITE) if synchronized else None,
        snapshot_seconds=draw(FINITE),
        release_seconds=draw(FINITE) if executed else None,
    )
    parts = [timings.collect_seconds, timings.snapshot_seconds]
    parts += [t for t in (timings.synchronize_seconds, timings.release_seconds) if t is not None]
    elapsed = sum(parts) + draw(FINITE)
    if executed:
        reason, threshold_decisions = None, ["release", "release_counter_untrusted"]
        before, after = draw(allocator_snapshots()), draw(allocator_snapshots())
        host_before, host_after = draw(host_observations()), draw(host_observations())
    else:
        reason = draw(st.sampled_from(["disabled", "unsupported_build", "cuda_not_initialized", "forked_child"]))
        threshold_decisions = ["release", "release_counter_untrusted"]
        if draw(st.booleans()):
            reason, threshold_decisions = "below_threshold", ["skip_below_threshold"]
        before, after = draw(st.none() | allocator_snapshots()), None
        host_before, host_after = draw(st.none() | host_observations()), None
    threshold = None
    if reason == "below_threshold" or draw(st.booleans()):
        threshold = ThresholdDecision(
            min_releasable_bytes=draw(BYTES),
            releasable_bytes=draw(st.none() | BYTES),
            decision=draw(st.sampled_from(threshold_decisions)),
        )
    known = before is not None and after is not None
    delta = (
        before.allocated_bytes - after.allocated_bytes
        if known and before.allocated_bytes is not None and after.allocated_bytes is not None
        else None
    )
    release = HostCacheRelease(
        phase=draw(st.from_regex(r"[a-z][a-z0-9_.\-]{0,63}", fullmatch=True)),
        status="executed" if executed else "noop",
        noop_reason=reason,
        detail=draw(st.text(max_size=40)),
        released=executed,
        elapsed_seconds=elapsed,
        timings=timings,
        device=draw(st.sampled_from(["cuda:0", "cuda:1"]) if executed else st.sampled_from(["cuda", "cuda:3", None])),
        synchronized=synchronized,
        entry_point="torch._C._host_emptyCache" if executed else draw(st.none() | NAMES),
        torch_version=draw(st.sampled_from(["2.11.0+cu130", "2.13.0", "2.13.0+cpu"])),
        collection=draw(st.none() | collections()),
        threshold=threshold,
        before=before,
        after=after,
        allocator_bytes_delta=delta,
        host_before=host_before,
        host_after=host_after,
    )
    return HostCacheReleaseReport(setup=HostCacheReleaseSetup(host_cache_release=release))


@given(release_reports())
def test_a_report_round_trips_through_its_json_mapping(report: HostCacheReleaseReport):
    assert parse_report(report.model_dump(mode="json")) == report


@given(release_reports())
def test_a_report_round_trips_through_json_text(report: HostCacheReleaseReport):
    assert parse_report(report.model_dump_json()) == report
    assert parse_report(json.dumps(report.model_dump(mode="json"))) == report
