"""Any report of DDO's own shape that ddo_hooks reads: the union of its routes, told apart by ``route``.

Examples:
    >>> DDO_ROUTES  # doctest: +NORMALIZE_WHITESPACE
    ('pytorch_host_cache_release', 'host_memory_observation', 'vmm_auxiliary_source_detachment',
     'native_vmm_idle_cache_release', 'diffusers_group_offload')
"""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias, get_args

from pydantic import Field, TypeAdapter

from ddo_hooks.reports.ddo.group import DDOGroupOffloadReport
from ddo_hooks.reports.ddo.host import DDOHostCacheReleaseReport, DDOHostMemoryReport
from ddo_hooks.reports.ddo.native import DDONativeIdleCacheReleaseReport
from ddo_hooks.reports.ddo.vmm_auxiliary import DDOAuxiliarySourceDetachmentReport

__all__ = ["DDO_REPORT_ADAPTER", "DDO_REPORT_TYPES", "DDO_ROUTES", "DDO_ROUTE_TYPES", "DDOPackageReport"]

DDOPackageReport: TypeAlias = Annotated[
    DDOHostCacheReleaseReport
    | DDOHostMemoryReport
    | DDOAuxiliarySourceDetachmentReport
    | DDONativeIdleCacheReleaseReport
    | DDOGroupOffloadReport,
    Field(discriminator="route"),
]
"""Any report of DDO's own shape that ddo_hooks reads (DDO 0.1.0rc2's host-memory routes), told apart by ``route``."""

DDO_REPORT_TYPES = (
    DDOHostCacheReleaseReport,
    DDOHostMemoryReport,
    DDOAuxiliarySourceDetachmentReport,
    DDONativeIdleCacheReleaseReport,
    DDOGroupOffloadReport,
)
"""Every model of DDO's shape, one per route."""

DDO_ROUTES: tuple[str, ...] = tuple(get_args(cls.model_fields["route"].annotation)[0] for cls in DDO_REPORT_TYPES)
"""Every route of DDO's shape that ddo_hooks reads."""

DDO_ROUTE_TYPES: dict[str, type[Any]] = dict(zip(DDO_ROUTES, DDO_REPORT_TYPES, strict=True))
"""Each route of DDO's shape and its report type (error messages look up field names in it)."""

DDO_REPORT_ADAPTER: TypeAdapter[Any] = TypeAdapter(DDOPackageReport)
"""The pydantic adapter of :data:`DDOPackageReport`."""
