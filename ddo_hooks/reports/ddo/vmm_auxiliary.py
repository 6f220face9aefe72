"""DDO's report of residual CPU source detachment (route ``vmm_auxiliary_source_detachment``).

From DDO 0.1.0rc2's ``auxiliary_sources.detach_auxiliary_cpu_sources``: with ``enabled=False`` it
writes ``status``, ``copied_bytes`` (0) and ``elapsed_seconds``; enabled, on an attached
``vmm_fast`` component, it copies the loader-owned CPU tensors and writes the counts, the
source shards and the host before and after (``detached``, or ``no_source_backed_cpu_tensors``
when nothing was copied).

Examples:
    >>> data = {"schema_version": 1, "route": "vmm_auxiliary_source_detachment",
    ...         "configuration": {"enabled": False, "max_copy_bytes": 16777216},
    ...         "setup": {"auxiliary_source_detachment": {"status": "disabled", "copied_bytes": 0,
    ...                                                   "elapsed_seconds": 5e-07}},
    ...         "runtime": {}}
    >>> DDOAuxiliarySourceDetachmentReport.model_validate(data).summary().kind
    'noop'
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictInt, model_validator

from ddo_hooks.reports.base import Bytes, Count, Names, ReportSummary, Seconds
from ddo_hooks.reports.ddo.base import (
    AlwaysFalse,
    DDOEmptyRuntime,
    DDOHostSnapshot,
    DDOModel,
    DDORouteReport,
    omittable,
)

__all__ = [
    "DDOAuxiliaryConfiguration",
    "DDOAuxiliarySetup",
    "DDOAuxiliarySourceDetachment",
    "DDOAuxiliarySourceDetachmentReport",
]

MAX_SHARD_SAMPLES = 16
"""DDO lists at most 16 source shards."""

_ENABLED_KEYS = (
    "copied_storage_groups",
    "copied_tensor_owners",
    "copied_named_references",
    "unbound_cpu_storage_groups",
    "source_shard_count",
    "source_shard_samples",
    "scope",
    "gpu_placement_changed",
    "commit_recovery_proven",
    "host_before",
    "host_after",
)


class DDOAuxiliarySourceDetachment(DDOModel):
    """Fields under ``setup.auxiliary_source_detachment``."""

    status: Literal["disabled", "detached", "no_source_backed_cpu_tensors"]
    """``disabled`` (``enabled=False``); ``detached`` when bytes were copied; otherwise
    ``no_source_backed_cpu_tensors``."""
    copied_bytes: Bytes
    """Bytes of CPU tensors copied away from the loader's storage (0 when disabled)."""
    copied_storage_groups: Count | None = omittable()
    """Distinct source-backed storages copied."""
    copied_tensor_owners: Count | None = omittable()
    """Tensor objects re-pointed at the copies."""
    copied_named_references: Count | None = omittable()
    """Registered names (parameters and buffers) re-pointed."""
    unbound_cpu_storage_groups: Count | None = omittable()
    """CPU storages without source provenance, left alone."""
    source_shard_count: Count | None = omittable()
    """Safetensors files the copied storages came from."""
    source_shard_samples: Names | None = omittable()
    """The first 16 of them, sorted."""
    scope: Literal["source_backed_registered_cpu_tensors_after_fast_attach"] | None = omittable()
    """What was considered."""
    gpu_placement_changed: AlwaysFalse | None = omittable()
    """Always false: detachment never changes CUDA residency."""
    commit_recovery_proven: AlwaysFalse | None = omittable()
    """Always false: giving the loader's pages back to the OS is not proven."""
    host_before: DDOHostSnapshot | None = omittable()
    """Host memory before the copy."""
    host_after: DDOHostSnapshot | None = omittable()
    """Host memory after the copy."""
    elapsed_seconds: Seconds
    """Host time of the call."""

    @model_validator(mode="after")
    def _coherent(self) -> DDOAuxiliarySourceDetachment:
        given = self.given(*_ENABLED_KEYS)
        if self.status == "disabled":
            if given or self.copied_bytes:
                raise ValueError("a disabled report has only status, copied_bytes 0 and elapsed_seconds")
            return self
        if missing := self.missing(*_ENABLED_KEYS):
            raise ValueError(f"an enabled detachment has {', '.join(missing)}")
        groups, shards = self.copied_storage_groups or 0, self.source_shard_count or 0
        if (self.status == "detached") != (self.copied_bytes > 0):
            raise ValueError("status is 'detached' exactly when copied_bytes is above 0")
        if (groups > 0) != (self.copied_bytes > 0) or (shards > 0) != (groups > 0) or shards > groups:
            raise ValueError("copied bytes, storage groups and shards are all 0 or all above 0 (shards <= groups)")
        if not groups <= (self.copied_tensor_owners or 0) <= (self.copied_named_references or 0):
            raise ValueError("copied_storage_groups <= copied_tensor_owners <= copied_named_references")
        samples = list(self.source_shard_samples or ())
        if len(samples) != min(shards, MAX_SHARD_SAMPLES) or samples != sorted(set(samples)):
            raise ValueError("source_shard_samples are the first min(source_shard_count, 16) shards, sorted")
        return self


class DDOAuxiliaryConfiguration(DDOModel):
    """The ``configuration`` of DDO's detachment report."""

    enabled: StrictBool
    """The ``enabled`` argument."""
    max_copy_bytes: Annotated[StrictInt, Field(gt=0)]
    """The most bytes DDO may copy (a positive integer; 16 MiB by default)."""


class DDOAuxiliarySetup(DDOModel):
    """The ``setup`` of DDO's detachment report."""

    auxiliary_source_detachment: DDOAuxiliarySourceDetachment
    """The detachment."""


class DDOAuxiliarySourceDetachmentReport(DDORouteReport):
    """DDO's report of detaching residual loader-owned CPU tensors (route ``vmm_auxiliary_source_detachment``)."""

    route: Literal["vmm_auxiliary_source_detachment"]
    """What produced the report."""
    configuration: DDOAuxiliaryConfiguration
    """The request."""
    setup: DDOAuxiliarySetup
    """The detachment."""
    runtime: DDOEmptyRuntime
    """Always ``{}``."""

    @model_validator(mode="after")
    def _within_the_limit(self) -> DDOAuxiliarySourceDetachmentReport:
        body = self.setup.auxiliary_source_detachment
        if self.configuration.enabled == (body.status == "disabled"):
            raise ValueError("status is 'disabled' exactly when configuration.enabled is false")
        if body.copied_bytes > self.configuration.max_copy_bytes:
            raise ValueError("copied_bytes exceeds configuration.max_copy_bytes (DDO refuses such a copy)")
        return self

    def summary(self) -> ReportSummary:
        """The detachment as a table row: copied bytes and RSS before and after."""
        body = self.setup.auxiliary_source_detachment
        disabled = body.status == "disabled"
        return ReportSummary(
            boundary="",
            action="ddo.auxiliary_source_detachment",
            kind="noop" if disabled else "executed",
            reason="disabled" if disabled else None,
            detail=f"DDO's auxiliary source detachment: {body.status}, {body.copied_bytes:,} bytes copied",
            rss_before=body.host_before.process_rss_bytes if body.host_before else None,
            rss_after=body.host_after.process_rss_bytes if body.host_after else None,
            elapsed_seconds=body.elapsed_seconds,
        )
