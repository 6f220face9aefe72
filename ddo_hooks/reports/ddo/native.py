"""DDO's release of its native VMM allocator's idle device backing (route ``native_vmm_idle_cache_release``).

From DDO 0.1.0rc2's ``device_cache.release_native_vmm_idle_cache`` and the pool statistics of
``ddo_vmm_allocator.native.NativeVmmLibrary`` 0.1.0rc2 (``torch_pool_stats``,
``trim_idle_torch_pool``). It concerns device memory (VMM backing), not pinned host memory; it
is read here because a DDO host reports it at the same phase boundaries.

Examples:
    >>> data = {"schema_version": 1, "route": "native_vmm_idle_cache_release",
    ...         "configuration": {"enabled": True, "clear_cublas_workspaces": False},
    ...         "setup": {"device_cache_release": {"phase": "x", "status": "cuda_not_initialized",
    ...                                            "trim_executed": False, "elapsed_seconds": 8e-07}},
    ...         "runtime": {}}
    >>> DDONativeIdleCacheReleaseReport.model_validate(data).summary().reason
    'cuda_not_initialized'
"""

from __future__ import annotations

from typing import Literal

from pydantic import StrictBool, model_validator

from ddo_hooks.reports.base import Bytes, Count, ReportSummary, Seconds
from ddo_hooks.reports.ddo.base import AlwaysTrue, DDOEmptyRuntime, DDOModel, DDORouteReport, One, omittable

__all__ = [
    "DDODeviceCacheRelease",
    "DDONativeIdleCacheReleaseConfiguration",
    "DDONativeIdleCacheReleaseReport",
    "DDONativeIdleCacheReleaseSetup",
    "DDOPoolStats",
]

_POOL_KEYS = (
    "pool_enabled",
    "pool_mapped_bytes",
    "pool_requested_bytes",
    "pool_leased_bytes",
    "pool_available_bytes",
    "pool_pending_bytes",
    "pool_quarantined_bytes",
    "pool_live_allocation_count",
    "pool_reserved_allocation_count",
    "pool_backing_count",
    "pool_idle_backing_bytes",
    "pool_eviction_attempts",
    "pool_failures",
    "pool_idle_backing_count",
    "pool_eviction_wait_seconds",
    "pool_schema_version",
)


class DDOPoolStats(DDOModel):
    """The native pool's unique-backing statistics (schema v1), or ``{}`` when the library has none."""

    pool_enabled: One | None = omittable()
    """Always 1 (the native library refuses other values)."""
    pool_mapped_bytes: Bytes | None = omittable()
    """Device bytes mapped: leased + available + pending + quarantined."""
    pool_requested_bytes: Bytes | None = omittable()
    """Bytes the live allocations asked for (at most leased)."""
    pool_leased_bytes: Bytes | None = omittable()
    """Mapped bytes leased to live allocations."""
    pool_available_bytes: Bytes | None = omittable()
    """Mapped bytes free for reuse."""
    pool_pending_bytes: Bytes | None = omittable()
    """Mapped bytes waiting for their stream work to finish."""
    pool_quarantined_bytes: Bytes | None = omittable()
    """Mapped bytes held back after a failure."""
    pool_live_allocation_count: Count | None = omittable()
    """Live allocations."""
    pool_reserved_allocation_count: Count | None = omittable()
    """Reserved allocations."""
    pool_backing_count: Count | None = omittable()
    """Backing objects."""
    pool_idle_backing_bytes: Bytes | None = omittable()
    """Bytes of wholly idle backing (what a trim can release; at most mapped)."""
    pool_eviction_attempts: Count | None = omittable()
    """Eviction attempts since the process started."""
    pool_failures: Count | None = omittable()
    """Failures since the process started."""
    pool_idle_backing_count: Count | None = omittable()
    """Wholly idle backing objects (at most backing_count)."""
    pool_eviction_wait_seconds: Seconds | None = omittable()
    """Host seconds spent waiting in evictions."""
    pool_schema_version: One | None = omittable()
    """The statistics' schema version, 1."""

    @model_validator(mode="after")
    def _all_or_none(self) -> DDOPoolStats:
        if not self.given(*_POOL_KEYS):
            return self
        if missing := self.missing(*_POOL_KEYS):
            raise ValueError(f"pool statistics are all written or none ({{}}); missing {', '.join(missing)}")
        parts = (self.pool_leased_bytes, self.pool_available_bytes, self.pool_pending_bytes)
        if self.pool_mapped_bytes != sum(p or 0 for p in (*parts, self.pool_quarantined_bytes)):
            raise ValueError("pool_mapped_bytes is leased + available + pending + quarantined bytes")
        if (self.pool_requested_bytes or 0) > (self.pool_leased_bytes or 0):
            raise ValueError("pool_requested_bytes exceeds pool_leased_bytes")
        if (self.pool_idle_backing_bytes or 0) > (self.pool_mapped_bytes or 0):
            raise ValueError("pool_idle_backing_bytes exceeds pool_mapped_bytes")
        if (self.pool_idle_backing_count or 0) > (self.pool_backing_count or 0):
            raise ValueError("pool_idle_backing_count exceeds pool_backing_count")
        return self


_NATIVE_KEYS = ("pool_before_cublas_clear", "cublas_workspaces_cleared", "before", "after", "library")


class DDODeviceCacheRelease(DDOModel):
    """Fields under ``setup.device_cache_release``."""

    phase: str
    """The phase label the caller passed (any string; ``""`` by default)."""
    status: Literal["disabled", "cuda_not_initialized", "native_allocator_not_installed", "unsupported", "completed"]
    """``disabled`` (``enabled=False``), ``cuda_not_initialized``, ``native_allocator_not_installed``
    (no native VMM allocator is installed in torch), ``unsupported`` (the library has no idle
    trim, or refused it), ``completed`` (the trim ran)."""
    trim_executed: StrictBool
    """True exactly when ``status`` is ``completed``."""
    pool_before_cublas_clear: DDOPoolStats | None = omittable()
    """The pool before cuBLAS workspaces were cleared (only with ``clear_cublas_workspaces``)."""
    cublas_workspaces_cleared: AlwaysTrue | None = omittable()
    """Written (true) when cuBLAS workspaces were cleared."""
    before: DDOPoolStats | None = omittable()
    """The pool before the trim (``completed``, and ``unsupported`` when the trim refused)."""
    after: DDOPoolStats | None = omittable()
    """The pool after the trim (``completed`` only)."""
    library: str | None = omittable()
    """The native library's path (``unsupported`` and ``completed``)."""
    elapsed_seconds: Seconds
    """Host time of the call, GC and synchronize included."""

    @model_validator(mode="after")
    def _coherent(self) -> DDODeviceCacheRelease:
        given = self.given(*_NATIVE_KEYS)
        if self.trim_executed != (self.status == "completed"):
            raise ValueError("trim_executed is true exactly when status is 'completed'")
        if self.status not in ("unsupported", "completed"):
            if given:
                raise ValueError(f"status {self.status!r} comes before the native library is used; no {given[0]}")
            return self
        if self.library is None:
            raise ValueError(f"status {self.status!r} names the native library")
        if len(self.given("pool_before_cublas_clear", "cublas_workspaces_cleared")) == 1:
            raise ValueError("pool_before_cublas_clear and cublas_workspaces_cleared are written together")
        if self.status == "completed" and (self.before is None or self.after is None):
            raise ValueError("a completed trim has before and after")
        if self.status == "unsupported" and self.after is not None:
            raise ValueError("an unsupported trim has no after")
        return self


class DDONativeIdleCacheReleaseConfiguration(DDOModel):
    """The ``configuration`` of DDO's native idle-cache release report."""

    enabled: StrictBool
    """The ``enabled`` argument."""
    clear_cublas_workspaces: StrictBool
    """Whether cuBLAS workspaces were to be cleared first."""


class DDONativeIdleCacheReleaseSetup(DDOModel):
    """The ``setup`` of DDO's native idle-cache release report."""

    device_cache_release: DDODeviceCacheRelease
    """The release."""


class DDONativeIdleCacheReleaseReport(DDORouteReport):
    """DDO's release of idle native VMM device backing (route ``native_vmm_idle_cache_release``)."""

    route: Literal["native_vmm_idle_cache_release"]
    """What produced the report."""
    configuration: DDONativeIdleCacheReleaseConfiguration
    """The request."""
    setup: DDONativeIdleCacheReleaseSetup
    """The release."""
    runtime: DDOEmptyRuntime
    """Always ``{}``."""

    @model_validator(mode="after")
    def _as_configured(self) -> DDONativeIdleCacheReleaseReport:
        body, config = self.setup.device_cache_release, self.configuration
        if config.enabled == (body.status == "disabled"):
            raise ValueError("status is 'disabled' exactly when configuration.enabled is false")
        cleared = body.cublas_workspaces_cleared is not None
        if cleared and not config.clear_cublas_workspaces:
            raise ValueError("cuBLAS workspaces were cleared although configuration.clear_cublas_workspaces is false")
        if config.clear_cublas_workspaces and body.library is not None and not cleared:
            raise ValueError("configuration.clear_cublas_workspaces is true, so the native path clears them first")
        return self

    def summary(self) -> ReportSummary:
        """The release as a table row (device backing: no pinned-host or RSS figures)."""
        body = self.setup.device_cache_release
        done = body.status == "completed"
        idle = body.before.pool_idle_backing_bytes if body.before is not None else None
        freed = "" if idle is None else f"; {idle:,} idle backing bytes before"
        return ReportSummary(
            boundary=body.phase,
            action="ddo.device_cache_release",
            kind="executed" if done else "noop",
            reason=None if done else body.status,
            detail=f"DDO's native idle VMM release: {body.status}{freed}",
            elapsed_seconds=body.elapsed_seconds,
        )
