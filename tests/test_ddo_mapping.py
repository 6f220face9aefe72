"""DDO's release report in ddo_hooks' terms: the tables cover every status and field, the conversions hold."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest
from support.ddo_payloads import corpus_files, corpus_name

from ddo_hooks import parse_report
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.reports.allocator import AllocatorSnapshot
from ddo_hooks.reports.base import HostObservation
from ddo_hooks.reports.ddo.base import DDOHostSnapshot
from ddo_hooks.reports.ddo.host import (
    DDOAllocatorSnapshot,
    DDOHostCacheRelease,
    DDOHostCacheReleaseConfiguration,
    DDOHostCacheReleaseReport,
    DDOReleaseStatus,
)
from ddo_hooks.reports.ddo.mapping import (
    DDO_RELEASE_FIELDS,
    DDO_RELEASE_STATUSES,
    UNMATCHED_NOOP_REASONS,
    from_ddo_allocator_snapshot,
    from_ddo_host_snapshot,
    from_ddo_release,
)
from ddo_hooks.reports.host_cache import HostCacheRelease, HostCacheReleaseReport, NoopReason

RELEASES = [path for path in corpus_files() if corpus_name(path).startswith("pytorch_host_cache_release.")]


def release_of(path: Path) -> DDOHostCacheReleaseReport:
    report = parse_report(json.loads(path.read_text(encoding="utf-8")))
    assert isinstance(report, DDOHostCacheReleaseReport)
    return report


def named(paths: list[str | None]) -> set[str]:
    """Every key a column names (``before/after.allocated_bytes, x``: before, after, allocated_bytes, x)."""
    names = set()
    for cell in filter(None, paths):
        head, _, tail = cell.partition(",")
        names.update(head.strip().replace("/", ".").split("."))
        names.update(part.strip() for part in tail.split(",") if part.strip())
    return names


def test_every_ddo_status_maps_once_and_every_noop_reason_is_accounted_for():
    assert set(DDO_RELEASE_STATUSES) == set(typing.get_args(DDOReleaseStatus))
    reasons = [reason for _, reason, _ in DDO_RELEASE_STATUSES.values() if reason is not None]
    assert sorted(reasons + list(UNMATCHED_NOOP_REASONS)) == sorted(typing.get_args(NoopReason))
    for status, reason, note in DDO_RELEASE_STATUSES.values():
        assert (status == "executed") == (reason is None)
        assert note.endswith(".")


def test_the_field_table_names_every_field_of_both_release_reports():
    ddo_names = named([pair.ddo for pair in DDO_RELEASE_FIELDS])
    our_names = named([pair.ours for pair in DDO_RELEASE_FIELDS])
    for model in (DDOHostCacheReleaseReport, DDOHostCacheRelease, DDOAllocatorSnapshot, DDOHostSnapshot):
        missing = set(model.model_fields) - ddo_names - {"setup"}
        assert not missing, f"DDO's {model.__name__} fields not in the table: {missing}"
    assert set(DDOHostCacheReleaseConfiguration.model_fields) <= ddo_names
    for model in (HostCacheReleaseReport, HostCacheRelease, AllocatorSnapshot, HostObservation):
        missing = set(model.model_fields) - our_names - {"setup"}
        assert not missing, f"ddo_hooks' {model.__name__} fields not in the table: {missing}"
    for pair in DDO_RELEASE_FIELDS:
        assert pair.ddo or pair.ours
        if pair.ddo is None or pair.ours is None:
            assert pair.note.startswith(("No answer", "No counterpart", "Implied")), pair


@pytest.mark.parametrize("path", RELEASES, ids=lambda p: p.name)
def test_a_ddo_release_converts_exactly_when_it_did_nothing(path: Path):
    ddo = release_of(path)
    ours = from_ddo_release(ddo, torch_version="2.13.0+cpu")
    status, reason, _ = DDO_RELEASE_STATUSES[ddo.release.status]
    if status == "executed":
        assert ours is None
        return
    assert ours is not None
    r = ours.release
    assert (r.status, r.noop_reason, r.released) == (status, reason, False)
    assert (r.phase, r.elapsed_seconds, r.torch_version) == (
        ddo.release.phase,
        ddo.release.elapsed_seconds,
        "2.13.0+cpu",
    )
    assert parse_report(ours.model_dump(mode="json")) == ours  # a valid ddo_hooks report, of ddo_hooks' shape
    assert from_ddo_release(ddo.as_dict(), torch_version="2.13.0+cpu") == ours  # the payload converts the same


def test_an_unsupported_ddo_release_is_ddo_hooks_unsupported_build():
    payload = release_of(RELEASES[0]).as_dict()
    payload["setup"]["host_cache_release"].update(status="unsupported", released=False)
    payload["configuration"]["enabled"] = True
    for key in ("before", "after", "host_before", "host_after", "allocator_bytes_delta"):
        payload["setup"]["host_cache_release"].pop(key, None)
    ours = from_ddo_release(payload, torch_version="2.11.0")
    assert ours is not None
    assert ours.release.noop_reason == "unsupported_build"


def test_a_phase_ddo_hooks_cannot_label_gives_none_and_another_route_is_refused():
    payload = json.loads(next(p for p in RELEASES if corpus_name(p).endswith(".disabled")).read_text(encoding="utf-8"))
    payload["setup"]["host_cache_release"]["phase"] = ""  # DDO's default
    assert from_ddo_release(payload, torch_version="2.13.0") is None
    observation = next(p for p in corpus_files() if corpus_name(p).startswith("host_memory_observation."))
    with pytest.raises(InvalidArgumentError, match=r"reads DDO's release report .* got DDOHostMemoryReport"):
        from_ddo_release(json.loads(observation.read_text(encoding="utf-8")), torch_version="2.13.0")


def snapshots() -> list[tuple[str, Any]]:
    found = []
    for path in RELEASES:
        release = release_of(path).release
        for name in ("before", "after", "host_before", "host_after"):
            if getattr(release, name) is not None:
                found.append((f"{corpus_name(path)}:{name}", getattr(release, name)))
    return found


@pytest.mark.parametrize(("where", "snapshot"), snapshots(), ids=[w for w, _ in snapshots()])
def test_ddos_snapshots_convert_to_ddo_hooks(where: str, snapshot: Any):
    if isinstance(snapshot, DDOAllocatorSnapshot):
        ours = from_ddo_allocator_snapshot(snapshot)
        assert ours.status == snapshot.status
        assert ours.allocated_bytes == snapshot.allocated_bytes
        assert ours.active_bytes == snapshot.active_bytes
        assert (ours.unavailable_reason is None) == (snapshot.status == "available")
        return
    host = from_ddo_host_snapshot(snapshot, platform="linux")
    assert host is not None
    assert host.rss_bytes == snapshot.process_rss_bytes
    assert host.platform == (snapshot.platform or "linux")
    assert host.private_bytes == snapshot.process_private_bytes


@pytest.mark.parametrize(
    ("snapshot", "reason"),
    [
        ({"status": "unavailable"}, "torch.cuda.host_memory_stats is missing"),
        ({"status": "unavailable", "error": "boom"}, "boom"),
        ({"status": "unavailable", "allocated_bytes": None, "reported_active_bytes": 5, "active_bytes": None,
          "active_counter_consistent": False}, "allocated_bytes.current was not a non-negative integer"),
    ],
)  # fmt: skip
def test_an_unavailable_allocator_snapshot_says_why_in_ddo_hooks_terms(snapshot: dict[str, Any], reason: str):
    ours = from_ddo_allocator_snapshot(DDOAllocatorSnapshot.model_validate(snapshot))
    assert ours.status == "unavailable"
    assert ours.unavailable_reason is not None
    assert ours.unavailable_reason.startswith(reason)
    assert ours.reported_active_bytes is None  # ddo_hooks keeps no counter of an unavailable snapshot


def test_a_host_snapshot_without_its_platform_gives_none_and_errors_become_unavailable():
    assert from_ddo_host_snapshot(DDOHostSnapshot(process_rss_bytes=1)) is None
    failed = from_ddo_host_snapshot(DDOHostSnapshot(process_observation_error="no psutil"), platform="darwin")
    assert failed is not None
    assert (failed.rss_bytes, failed.unavailable) == (None, {"rss_bytes": "no psutil"})
    windows = DDOHostSnapshot(process_rss_bytes=1, process_observation_error="x", system_observation_error="y")
    host = from_ddo_host_snapshot(windows, platform="linux")  # the snapshot's Windows keys win
    assert host is not None
    assert host.platform == "windows"
    assert host.unavailable == {"private_bytes": "x", "physical_available_bytes": "y", "commit_available_bytes": "y"}
