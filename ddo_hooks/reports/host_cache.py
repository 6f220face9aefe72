"""The report of the release core (route ``pytorch_host_cache_release``), schema version 1.

A host can print or serialize it without reading allocator internals::

    {"schema_version": 1, "route": "pytorch_host_cache_release",
     "setup": {"host_cache_release": {"phase": "before_transformer", "status": "executed", ...}}}

Validation rejects impossible reports (negative byte counts, an executed release without
allocator snapshots, ``released`` without ``executed``, a delta that is not before minus
after) with a message that names the field.

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> report = release_pytorch_host_cache(phase="after_call")
    >>> data = report.model_dump(mode="json")
    >>> data["schema_version"], data["route"], data["setup"]["host_cache_release"]["status"]
    (1, 'pytorch_host_cache_release', 'noop')
    >>> HostCacheReleaseReport.model_validate(data) == report
    True
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import StrictBool, StrictInt, model_validator

from ddo_hooks import _moved
from ddo_hooks._diagnostics import cut, show_repr
from ddo_hooks.reports.allocator import AllocatorSnapshot, PinningSince, owned_delta
from ddo_hooks.reports.base import (
    Bytes,
    HostObservation,
    Names,
    PhaseLabel,
    ReportModel,
    ReportSummary,
    RouteReport,
    Seconds,
    observed_summary,
)

__all__ = [
    "GarbageCollection",
    "HostCacheRelease",
    "HostCacheReleaseReport",
    "HostCacheReleaseSetup",
    "NoopReason",
    "ReleaseTimings",
    "ThresholdDecision",
    "measured_summary",
    "noop_release",
]

NoopReason = Literal[
    "disabled",
    "unsupported_build",
    "cuda_not_initialized",
    "forked_child",
    "lazy_init_required",
    "below_threshold",
    "not_triggered",
]
"""Why a release did nothing (``not_triggered``: the policy releases only after a component was dropped)."""


class ReleaseTimings(ReportModel):
    """Where ``elapsed_seconds`` went, step by step."""

    collect_seconds: Seconds
    """Python garbage collection."""
    synchronize_seconds: Seconds | None
    """Waiting once for the selected device's transfers; ``None`` when not synchronized."""
    snapshot_seconds: Seconds
    """Reading allocator counters and host memory, before and after."""
    release_seconds: Seconds | None
    """The torch release call itself; ``None`` when it was not called."""


class GarbageCollection(ReportModel):
    """How Python garbage was collected before the release."""

    strategy: Literal["full", "young", "auto"]
    """``full``: every generation. ``young``: generations 0 and 1 only. ``auto``: young, then
    full only if an object expected to be freed is still alive."""
    full_collection: StrictBool
    """Whether the oldest generation was collected."""
    unreachable_objects: Bytes
    """Unreachable objects found (the return value of :func:`gc.collect`)."""
    expected_freed: Names = ()
    """Names of the objects the caller expected to be freed (dropped components)."""
    survivors: Names = ()
    """Expected-freed objects still alive after collection: something else references them,
    so their memory cannot be released."""

    @model_validator(mode="after")
    def _survivors_expected(self) -> GarbageCollection:
        survivors = self.survivors
        unknown = set(survivors) - set(self.expected_freed) if survivors else None  # usually none survive
        if unknown:
            raise ValueError(f"survivors {cut(str(sorted(unknown)), 120)} are not among expected_freed")
        strategy, full_collection = self.strategy, self.full_collection
        if strategy == "full" and not full_collection:
            raise ValueError("strategy 'full' always collects the oldest generation")
        if strategy == "young" and full_collection:
            raise ValueError("strategy 'young' never collects the oldest generation")
        return self


class ThresholdDecision(ReportModel):
    """The decision against ``min_releasable_bytes``, made from the snapshot before release."""

    min_releasable_bytes: Bytes
    """The configured minimum of releasable cached bytes."""
    releasable_bytes: Bytes | None
    """Owned minus validated active bytes; ``None`` when the active counter was not usable."""
    decision: Literal["release", "skip_below_threshold", "release_counter_untrusted"]
    """``release_counter_untrusted``: the active counter was inconsistent or comes from a torch
    whose counter is known wrong (< 2.13), so it was not used and the release ran anyway."""


class HostCacheRelease(ReportModel):
    """Fields under ``setup.host_cache_release``."""

    phase: PhaseLabel
    """The requested phase label."""
    status: Literal["executed", "noop"]
    """``executed``: the boundary ran. ``noop``: it did nothing, see ``noop_reason``."""
    noop_reason: NoopReason | None
    """Why nothing was done; ``None`` when executed."""
    detail: str
    """A sentence saying what happened, for people."""
    released: StrictBool
    """The release call completed. Not a proof that any byte count was returned."""
    elapsed_seconds: Seconds
    """GC, one completion boundary, sampling and release; not denoise compute time."""
    timings: ReleaseTimings
    """The breakdown of ``elapsed_seconds``."""
    device: str | None
    """The selected CUDA device (``cuda:N``), when one was resolved."""
    synchronized: StrictBool
    """Whether the selected device was synchronized. A device without a CUDA context has no
    transfers to wait for and is not synchronized (that would create a context)."""
    entry_point: str | None
    """The torch function that released the cache, e.g. ``torch._C._host_emptyCache``."""
    torch_version: str
    """``torch.__version__`` of the process."""
    collection: GarbageCollection | None
    """How garbage was collected; ``None`` when no collection ran."""
    threshold: ThresholdDecision | None = None
    """The ``min_releasable_bytes`` decision; ``None`` when no minimum was set."""
    before: AllocatorSnapshot | None
    """Allocator counters before the release."""
    after: AllocatorSnapshot | None
    """Allocator counters after the release."""
    allocator_bytes_delta: StrictInt | None
    """``before.allocated_bytes - after.allocated_bytes`` (signed); ``None`` when unknown.
    Not guaranteed OS commit recovery; concurrent allocation can invalidate attribution."""
    host_before: HostObservation | None
    """Host memory before the release."""
    host_after: HostObservation | None
    """Host memory after the release."""
    pinned_since_previous: PinningSince | None = None
    """Pinning done since the previous boundary of the same attachment; ``None`` for the first one,
    for a direct call, and where no snapshot was taken."""
    pinned_allocation: Literal["cudaHostAlloc", "cudaHostRegister"] | None = None
    """How this process pins: ``cudaHostRegister`` with ``PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True``,
    else ``cudaHostAlloc`` (torch's default); ``None`` where nothing could be released."""

    @model_validator(mode="after")
    def _coherent(self) -> HostCacheRelease:
        executed, reason, timings = self.status == "executed", self.noop_reason, self.timings
        synchronize_seconds, release_seconds = timings.synchronize_seconds, timings.release_seconds
        before, after = self.before, self.after  # each field read once: every record of a file is checked
        if executed and reason is not None:
            raise ValueError("noop_reason must be null when status is 'executed'")
        if not executed and reason is None:
            raise ValueError("status 'noop' needs a noop_reason")
        if self.released != executed:
            raise ValueError("released must be true exactly when status is 'executed' (the release call completed)")
        if executed:
            if before is None or after is None or self.host_before is None or self.host_after is None:
                missing = [n for n in ("before", "after", "host_before", "host_after") if getattr(self, n) is None]
                raise ValueError(f"an executed release needs {', '.join(missing)}")
            if release_seconds is None:
                raise ValueError("an executed release needs timings.release_seconds")
            if self.entry_point is None or self.device is None:
                raise ValueError("an executed release names its entry_point and device")
        elif release_seconds is not None:
            raise ValueError("timings.release_seconds must be null when the release call did not run")
        synchronized = self.synchronized
        if synchronized and synchronize_seconds is None:
            raise ValueError("a synchronized release needs timings.synchronize_seconds")
        if not synchronized and synchronize_seconds is not None:
            raise ValueError("timings.synchronize_seconds must be null when the device was not synchronized")
        threshold = self.threshold
        if (threshold is not None and threshold.decision == "skip_below_threshold") != (reason == "below_threshold"):
            raise ValueError("noop_reason 'below_threshold' goes with threshold.decision 'skip_below_threshold'")
        expected = owned_delta(before, after)
        if self.allocator_bytes_delta != expected:
            must = f"allocator_bytes_delta must be {show_repr(expected)}"
            raise ValueError(f"{must} (before.allocated_bytes minus after.allocated_bytes)")
        parts = [timings.collect_seconds, timings.snapshot_seconds]
        if synchronize_seconds is not None:
            parts.append(synchronize_seconds)
        if release_seconds is not None:
            parts.append(release_seconds)
        if sum(parts) > self.elapsed_seconds + 1e-6:
            raise ValueError("the timings add up to more than elapsed_seconds")
        return self


def measured_summary(section: Any, *, boundary: str, action: str, reason: str | None, **more: Any) -> ReportSummary:
    """The summary of a section that read the allocator and the host before and after (a release, a repack).

    ``section`` has ``status``, ``detail``, ``before``/``after`` (:class:`AllocatorSnapshot` or
    ``None``), ``allocator_bytes_delta``, ``host_before``/``host_after`` and ``elapsed_seconds``.
    """
    before, after = section.before, section.after
    return observed_summary(
        section,
        boundary=boundary,
        action=action,
        reason=reason,
        once=True,
        owned_before=before.allocated_bytes if before else None,
        owned_after=after.allocated_bytes if after else None,
        delta=section.allocator_bytes_delta,
        **more,
    )


class HostCacheReleaseSetup(ReportModel):
    """The ``setup`` section of a host-cache release report."""

    host_cache_release: HostCacheRelease
    """The release boundary's fields."""


class HostCacheReleaseReport(RouteReport):
    """The report of one host-cache boundary (route ``pytorch_host_cache_release``)."""

    route: Literal["pytorch_host_cache_release"] = "pytorch_host_cache_release"
    """What produced the report."""
    setup: HostCacheReleaseSetup
    """The report body."""

    @property
    def release(self) -> HostCacheRelease:
        """Shortcut for ``setup.host_cache_release``."""
        return self.setup.host_cache_release

    def summary(self) -> ReportSummary:
        """The release as a table row: its phase, status, owned and RSS before and after, re-pinning."""
        r = self.release
        since = r.pinned_since_previous
        return measured_summary(
            r,
            boundary=r.phase,
            action="host_cache_release",
            reason=r.noop_reason,
            repinned_bytes=since.bytes if since else None,
            repin_seconds=since.seconds if since else None,
        )


def noop_release(
    phase: str,
    reason: NoopReason,
    detail: str,
    *,
    device: str | None,
    torch_version: str,
    elapsed_seconds: float,
    host: HostObservation | None = None,
    snapshot_seconds: float = 0.0,
) -> HostCacheReleaseReport:
    """The report of a release that did not run: nothing collected, synchronized, read or released.

    ``host``: the host observed at the boundary (the RSS before and after, since nothing ran), taken in
    ``snapshot_seconds``.
    """
    timings = ReleaseTimings(
        collect_seconds=0.0, synchronize_seconds=None, snapshot_seconds=snapshot_seconds, release_seconds=None
    )
    release = HostCacheRelease(
        phase=phase, status="noop", noop_reason=reason, detail=detail, released=False,
        elapsed_seconds=max(elapsed_seconds, snapshot_seconds), timings=timings, device=device, synchronized=False,
        entry_point=None, torch_version=torch_version, collection=None, before=None, after=None,
        allocator_bytes_delta=None, host_before=host, host_after=host,
    )  # fmt: skip
    return HostCacheReleaseReport(setup=HostCacheReleaseSetup(host_cache_release=release))


def __getattr__(name: str) -> Any:
    return _moved.old_attribute(__name__, name)
