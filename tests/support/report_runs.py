"""Report files as workers write them: runs with envelopes (run, call, host, pid, rank), real reports.

The executed releases come from the release core on `FakeHostAllocator` (a CPU machine has no
CUDA host allocator), so their allocator snapshots and host observations are real report
fields: owned pinned bytes before and after, the delta, and the process RSS before and after.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ddo_hooks import MetricsTracker, parse_report, release_pytorch_host_cache
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.reports.boundary import (
    ActionReport,
    ActionResult,
    ActionResultSetup,
    BoundaryRefusal,
    BoundaryRefusalReport,
    BoundaryRefusalSetup,
)
from ddo_hooks.reports.envelope import RecordEnvelope
from support.ddo_payloads import CORPUS
from support.fakes import FakeHostAllocator

MiB = 1 << 20
GiB = 1 << 30
BOUNDARIES = ("before_transformer", "before_vae", "after_call")
START = datetime(2026, 11, 30, 19, 0, tzinfo=timezone.utc)


def executed(phase: str, cached: int, live: int = 16 * MiB):
    """An executed release that gave back ``cached`` bytes, with ``live`` bytes still in use."""
    with use_backend(FakeHostAllocator(cached_bytes=cached, live_bytes=live)):  # young: a full collection costs
        return release_pytorch_host_cache(enabled=True, phase=phase, device="cuda:0", collect="young")  # ~0.2 s


def below_threshold(phase: str):
    """A no-op: fewer releasable bytes than the policy's min_releasable_bytes."""
    with use_backend(FakeHostAllocator(cached_bytes=MiB)):
        return release_pytorch_host_cache(
            enabled=True, phase=phase, device="cuda:0", min_releasable_bytes=GiB, collect="young"
        )


def refused(boundary: str, reason: str, call: int) -> BoundaryRefusalReport:
    refusal = BoundaryRefusal(
        boundary=boundary,
        action="host_cache_release",
        reason=reason,
        detail=f"refused for {reason}: a sentence that explains, at some length, what was going on in the pipeline",
        requested_by="pipeline",
        call_index=call,
    )
    return BoundaryRefusalReport(setup=BoundaryRefusalSetup(boundary_refusal=refusal))


def action(boundary: str, name: str = "my_pkg.log_memory_in_detail") -> ActionReport:
    result = ActionResult(action=name, boundary=boundary, status="executed", data={"rss_bytes": 5 * GiB})
    return ActionReport(setup=ActionResultSetup(boundary_action=result))


def envelope(run: str, call: int, boundary: str, *, n: int, rank=None, world=None, host="gpu-node-1", pid=4242):
    return RecordEnvelope(
        run_id=run * (32 // len(run)),
        call_index=call,
        boundary=boundary,
        timestamp=START + timedelta(seconds=n),
        pid=pid,
        host=host,
        rank=rank,
        world_size=world,
    )


def gpu_run(run: str, *, rank=None, world=None, calls=(1, 2), host="gpu-node-1", pid=4242, start=0):
    """A run as the GPU machine's workers record it: releases, a no-op, refusals and a user action."""
    tracker = MetricsTracker()
    n = start
    for call in calls:
        reports = [
            ("host_cache_before_transformer", executed("before_transformer", int(3.6 * GiB))),
            ("host_cache_before_vae", executed("before_vae", 272 * MiB)),
            ("host_cache_before_vae", refused("before_vae", "inference_in_progress", call)),
            ("host_cache_after_call", below_threshold("after_call")),
            ("host_cache_after_call", refused("after_call", "not_reached", call)),
            ("my_pkg.log_memory_in_detail_after_call", action("after_call")),
        ]
        for component, report in reports:
            boundary = next(b for b in BOUNDARIES if component.endswith(b))
            n += 1
            env = envelope(run, call, boundary, n=n, rank=rank, world=world, host=host, pid=pid)
            tracker.record(report, component=component, envelope=env)
    return tracker


def ddo_release(phase: str, status: str = "released"):
    """DDO's release report at ``phase``: the corpus's Linux release (4 GiB given back), or one of its no-ops."""
    name = "released.handwritten-from-source" if status == "released" else status
    payload = json.loads((CORPUS / f"ddo-0.1.0rc2-pytorch_host_cache_release.{name}.json").read_text(encoding="utf-8"))
    payload["setup"]["host_cache_release"]["phase"] = phase
    return parse_report(payload)


def ddo_run(run: str, *, calls=(1, 2), host="gpu-node-1", pid=4343):
    """A run whose releases ran on DDO's core (``core: ddo``): two released, then a ``cuda_not_initialized`` no-op."""
    tracker = MetricsTracker()
    n = 0
    for call in calls:
        for boundary in BOUNDARIES:
            report = ddo_release(boundary, "released" if boundary != "after_call" else "cuda_not_initialized")
            n += 1
            env = envelope(run, call, boundary, n=n, host=host, pid=pid)
            tracker.record(report, component=f"host_cache_{boundary}", envelope=env)
    return tracker


def write(tracker: MetricsTracker, path: Path) -> Path:
    return tracker.write_jsonl(path)
