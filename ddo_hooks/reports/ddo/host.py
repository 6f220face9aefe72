"""DDO's reports on host memory: ``pytorch_host_cache_release`` and ``host_memory_observation``.

From DDO 0.1.0rc2's ``host_cache.release_pytorch_host_cache`` and
``host_memory.inspect_host_memory``. A release that did not run writes only ``phase``,
``status``, ``released`` and ``elapsed_seconds``; one that ran (``released``) adds the allocator
and host snapshots before and after and ``allocator_bytes_delta``.

Examples:
    >>> data = {"schema_version": 1, "route": "pytorch_host_cache_release",
    ...         "configuration": {"enabled": False},
    ...         "setup": {"host_cache_release": {"phase": "before_transformer", "status": "disabled",
    ...                                          "released": False, "elapsed_seconds": 1e-06}},
    ...         "runtime": {}}
    >>> report = DDOHostCacheReleaseReport.model_validate(data)
    >>> report.release.status, report.as_dict() == data
    ('disabled', True)
    >>> DDOHostCacheReleaseReport.model_validate({**data, "configuration": {"enabled": True}})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for DDOHostCacheReleaseReport
    ...
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Strict, StrictBool, StrictInt, model_validator

from ddo_hooks.reports.base import Bytes, Count, Names, ReportSummary, Seconds
from ddo_hooks.reports.ddo.base import (
    DDOEmptyRuntime,
    DDOHostSnapshot,
    DDOModel,
    DDORouteReport,
    omittable,
)

__all__ = [
    "DDO_RELEASE_ACTION",
    "DDOAllocatorSnapshot",
    "DDOCpuStorages",
    "DDOHostCacheRelease",
    "DDOHostCacheReleaseConfiguration",
    "DDOHostCacheReleaseReport",
    "DDOHostCacheReleaseSetup",
    "DDOHostMemory",
    "DDOHostMemoryConfiguration",
    "DDOHostMemoryReport",
    "DDOHostMemorySetup",
    "DDOInspectionError",
    "DDOReleaseStatus",
    "DDOStorageExample",
    "DDOStorageSample",
]

DDO_RELEASE_ACTION = "ddo.host_cache_release"
"""The action a table row of DDO's release report names (its :meth:`DDOHostCacheReleaseReport.summary`)."""

DDOReleaseStatus = Literal["disabled", "cuda_not_initialized", "unsupported", "released"]
"""DDO's release statuses: ``disabled`` (``enabled=False``), ``cuda_not_initialized``
(``torch.cuda.is_initialized()`` is false, also in a forked child), ``unsupported`` (no
``torch._C._accelerator_emptyHostCache``), ``released`` (the release call returned)."""

_COUNTERS = ("allocated_bytes", "reported_active_bytes", "active_bytes", "active_counter_consistent")


class DDOAllocatorSnapshot(DDOModel):
    """DDO's reading of ``torch.cuda.host_memory_stats()`` (``host_cache._allocator_snapshot``).

    Three forms: ``{"status": "unavailable"}`` (torch has no ``host_memory_stats``),
    ``{"status": "unavailable", "error": ...}`` (reading it raised), or the four counters with
    ``status`` ``available`` exactly when ``allocated_bytes`` was a non-negative integer.
    """

    status: Literal["available", "unavailable"]
    """``available`` when ``allocated_bytes.current`` was a non-negative integer."""
    error: str | None = omittable()
    """Why reading the stats raised (the exception's text); only with ``unavailable``."""
    allocated_bytes: Bytes | None = None
    """``allocated_bytes.current``: pinned bytes the allocator owns; null when not a non-negative integer."""
    reported_active_bytes: StrictInt | None = None
    """``active_bytes.current`` as torch reported it (may be negative or above allocated)."""
    active_bytes: Bytes | None = None
    """The active counter when consistent (an integer from 0 to ``allocated_bytes``), else null."""
    active_counter_consistent: StrictBool | None = None
    """Whether ``active_bytes`` is usable."""

    @model_validator(mode="after")
    def _one_of_three_forms(self) -> DDOAllocatorSnapshot:
        counters = self.given(*_COUNTERS)
        if not counters:
            if self.status != "unavailable":
                raise ValueError("a snapshot without counters is 'unavailable'")
            return self
        if self.error is not None:
            raise ValueError("error is written instead of the counters, not with them")
        if missing := self.missing(*_COUNTERS):
            raise ValueError(f"DDO writes the four counters together; missing {', '.join(missing)}")
        if (self.status == "available") != (self.allocated_bytes is not None):
            raise ValueError("status is 'available' exactly when allocated_bytes is a number")
        active, allocated = self.reported_active_bytes, self.allocated_bytes
        consistent = allocated is not None and active is not None and 0 <= active <= allocated
        if self.active_counter_consistent is not consistent:
            raise ValueError(f"active_counter_consistent must be {consistent} (0 <= reported active <= allocated)")
        if self.active_bytes != (active if consistent else None):
            raise ValueError("active_bytes is reported_active_bytes when consistent, else null")
        return self


class DDOHostCacheRelease(DDOModel):
    """Fields under ``setup.host_cache_release`` of DDO's release report."""

    phase: str
    """The phase label the caller passed (any string; ``""`` by default)."""
    status: DDOReleaseStatus
    """What happened (:data:`DDOReleaseStatus`)."""
    released: StrictBool
    """True exactly when ``status`` is ``released``."""
    before: DDOAllocatorSnapshot | None = omittable()
    """Allocator counters before the release (only when released)."""
    host_before: DDOHostSnapshot | None = omittable()
    """Host memory before the release (only when released)."""
    after: DDOAllocatorSnapshot | None = omittable()
    """Allocator counters after the release (only when released)."""
    host_after: DDOHostSnapshot | None = omittable()
    """Host memory after the release (only when released)."""
    allocator_bytes_delta: StrictInt | None = None
    """``before.allocated_bytes - after.allocated_bytes``, null when either is; only when released."""
    elapsed_seconds: Seconds
    """Host time of the whole call (``time.perf_counter``), GC and synchronize included."""

    @model_validator(mode="after")
    def _coherent(self) -> DDOHostCacheRelease:
        ran = ("before", "host_before", "after", "host_after", "allocator_bytes_delta")
        if self.released != (self.status == "released"):
            raise ValueError("released is true exactly when status is 'released'")
        given = self.given(*ran)
        if self.released and (missing := self.missing(*ran)):
            raise ValueError(f"a released report has {', '.join(missing)}")
        if not self.released and given:
            raise ValueError(f"only a released report has {', '.join(given)}; status is {self.status!r}")
        if self.released:
            before, after = self.before.allocated_bytes, self.after.allocated_bytes  # type: ignore[union-attr]  # a released report has both snapshots (checked just above)
            expected = before - after if before is not None and after is not None else None
            if self.allocator_bytes_delta != expected:
                raise ValueError(f"allocator_bytes_delta must be {expected} (before minus after allocated_bytes)")
        return self


class DDOHostCacheReleaseConfiguration(DDOModel):
    """The ``configuration`` of DDO's release report."""

    enabled: StrictBool
    """The ``enabled`` argument: false gives status ``disabled``."""


class DDOHostCacheReleaseSetup(DDOModel):
    """The ``setup`` of DDO's release report."""

    host_cache_release: DDOHostCacheRelease
    """The release's fields."""


class DDOHostCacheReleaseReport(DDORouteReport):
    """DDO's report of one pinned host-cache release (route ``pytorch_host_cache_release``, DDO's shape)."""

    route: Literal["pytorch_host_cache_release"]
    """What produced the report."""
    configuration: DDOHostCacheReleaseConfiguration
    """The request."""
    setup: DDOHostCacheReleaseSetup
    """The release."""
    runtime: DDOEmptyRuntime
    """Always ``{}``."""

    @property
    def release(self) -> DDOHostCacheRelease:
        """Shortcut for ``setup.host_cache_release``."""
        return self.setup.host_cache_release

    @model_validator(mode="after")
    def _enabled_or_disabled(self) -> DDOHostCacheReleaseReport:
        if self.configuration.enabled == (self.release.status == "disabled"):
            raise ValueError("status is 'disabled' exactly when configuration.enabled is false")
        return self

    def summary(self) -> ReportSummary:
        """The release as a table row: its phase, DDO's status, owned and RSS before and after."""
        r = self.release
        released = r.status == "released"
        return ReportSummary(
            boundary=r.phase,
            action=DDO_RELEASE_ACTION,
            kind="executed" if released else "noop",
            reason=None if released else r.status,
            detail=f"DDO's release: {r.status}",
            owned_before=r.before.allocated_bytes if r.before else None,
            owned_after=r.after.allocated_bytes if r.after else None,
            delta=r.allocator_bytes_delta,
            rss_before=r.host_before.process_rss_bytes if r.host_before else None,
            rss_after=r.host_after.process_rss_bytes if r.host_after else None,
            elapsed_seconds=r.elapsed_seconds,
        )


# -- host_memory_observation ---------------------------------------------------------------------


class DDOStorageExample(DDOModel):
    """A tensor that refers to a storage: a parameter or buffer name."""

    kind: Literal["parameter", "buffer"]
    """Whether it is a registered parameter or buffer."""
    name: str
    """Its qualified name in the module."""


class DDOStorageSample(DDOModel):
    """One CPU storage (its extent), with up to three of the tensors that refer to it."""

    storage_bytes: Bytes
    """The storage's extent (``untyped_storage().nbytes()``), not RSS."""
    references: Count
    """How many registered tensors refer to it."""
    examples: Annotated[tuple[DDOStorageExample, ...], Strict(False)]
    """The first three of them."""
    shards: Names
    """The safetensors files it came from, sorted (DDO's loader provenance; empty when unknown)."""

    @model_validator(mode="after")
    def _examples(self) -> DDOStorageSample:
        if len(self.examples) != min(self.references, 3):
            raise ValueError("examples holds the first min(references, 3) tensors")
        if list(self.shards) != sorted(set(self.shards)):
            raise ValueError("shards are sorted and distinct")
        return self


class DDOInspectionError(DDOModel):
    """A tensor whose storage could not be inspected."""

    kind: Literal["parameter", "buffer"]
    """Whether it is a registered parameter or buffer."""
    name: str
    """Its qualified name in the module."""
    error: str
    """The exception's text."""


class DDOCpuStorages(DDOModel):
    """The census of a module's registered CPU tensors and their storages (not RSS, not commit)."""

    cpu_tensor_references: Count
    """Registered parameters and buffers on the CPU (aliases counted each time)."""
    cpu_tensor_reference_bytes: Bytes
    """Their ``numel * element_size`` summed."""
    non_cpu_tensor_references: Count
    """Registered tensors on other devices (not inspected)."""
    inspection_errors: Count
    """Tensors whose storage could not be inspected."""
    unique_storage_count: Count
    """Distinct storages (by address and extent)."""
    unique_storage_bytes: Bytes
    """Their extents summed."""
    storage_samples: Annotated[tuple[DDOStorageSample, ...], Strict(False)]
    """The largest storages, largest first, at most ``configuration.max_storage_samples``."""
    omitted_storage_count: Count
    """Storages not sampled."""
    errors: Annotated[tuple[DDOInspectionError, ...], Strict(False)]
    """The first inspection errors, at most ``configuration.max_storage_samples``."""
    scope: Literal["registered_module_parameters_and_buffers_only"]
    """What was counted: never closures, native storage or other components."""

    @model_validator(mode="after")
    def _counts(self) -> DDOCpuStorages:
        samples = self.storage_samples
        if self.omitted_storage_count != self.unique_storage_count - len(samples) or self.omitted_storage_count < 0:
            raise ValueError("omitted_storage_count is unique_storage_count minus the samples")
        if [s.storage_bytes for s in samples] != sorted((s.storage_bytes for s in samples), reverse=True):
            raise ValueError("storage_samples are ordered largest first")
        if sum(s.storage_bytes for s in samples) > self.unique_storage_bytes:
            raise ValueError("the samples' storage_bytes add up to more than unique_storage_bytes")
        if self.unique_storage_count > self.cpu_tensor_references:
            raise ValueError("unique_storage_count exceeds cpu_tensor_references")
        if len(self.errors) > self.inspection_errors:
            raise ValueError("errors lists more than inspection_errors")
        return self


class DDOHostMemory(DDOModel):
    """Fields under ``setup.host_memory`` of DDO's observation report."""

    phase: str
    """The phase label the caller passed (any string; ``""`` by default)."""
    host: DDOHostSnapshot
    """The process's host memory."""
    status: Literal["observed", "partial"]
    """``partial`` when a tensor's storage could not be inspected."""
    cpu_storages: DDOCpuStorages | None = omittable()
    """The census of the passed module's CPU tensors; absent when no module was passed."""
    elapsed_seconds: Seconds
    """Host time of the observation."""

    @model_validator(mode="after")
    def _partial(self) -> DDOHostMemory:
        failed = self.cpu_storages is not None and self.cpu_storages.inspection_errors > 0
        if (self.status == "partial") != failed:
            raise ValueError("status is 'partial' exactly when cpu_storages.inspection_errors is above 0")
        return self


class DDOHostMemoryConfiguration(DDOModel):
    """The ``configuration`` of DDO's observation report."""

    max_storage_samples: Count
    """The most storages (and errors) listed."""


class DDOHostMemorySetup(DDOModel):
    """The ``setup`` of DDO's observation report."""

    host_memory: DDOHostMemory
    """The observation."""


class DDOHostMemoryReport(DDORouteReport):
    """DDO's read-only observation of host memory at a phase (route ``host_memory_observation``)."""

    route: Literal["host_memory_observation"]
    """What produced the report."""
    configuration: DDOHostMemoryConfiguration
    """The request."""
    setup: DDOHostMemorySetup
    """The observation."""
    runtime: DDOEmptyRuntime
    """Always ``{}``."""

    @model_validator(mode="after")
    def _within_the_limit(self) -> DDOHostMemoryReport:
        storages, most = self.setup.host_memory.cpu_storages, self.configuration.max_storage_samples
        if storages is not None:
            if len(storages.storage_samples) != min(storages.unique_storage_count, most):
                raise ValueError("storage_samples holds min(unique_storage_count, max_storage_samples) storages")
            if len(storages.errors) != min(storages.inspection_errors, most):
                raise ValueError("errors holds min(inspection_errors, max_storage_samples) errors")
        return self

    def summary(self) -> ReportSummary:
        """The observation as a table row: its phase and the RSS observed."""
        memory = self.setup.host_memory
        storages = memory.cpu_storages
        census = "" if storages is None else f"; {storages.unique_storage_count} CPU storages"
        return ReportSummary(
            boundary=memory.phase,
            action="ddo.host_memory",
            kind="executed",
            reason=None,
            detail=f"DDO's host memory observation: {memory.status}{census}",
            rss_after=memory.host.process_rss_bytes,
            elapsed_seconds=memory.elapsed_seconds,
        )
