"""Any DDO report: the union of every route, its parser and its JSON Schema.

Every public result of ddo_hooks is a *DDO report*: a frozen, strictly validated model with
``schema_version``, a ``route`` naming what produced it, and one section under ``setup``
(:class:`~ddo_hooks.reports.base.RouteReport`). :func:`parse_report` reads any of them back.

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> report = release_pytorch_host_cache(phase="after_call")
    >>> parse_report(report.model_dump(mode="json")) == report
    True
"""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias

from pydantic import Field, TypeAdapter, ValidationError

from ddo_hooks.errors import ReportError
from ddo_hooks.reports.auxiliary import AuxiliarySourceDetachReport
from ddo_hooks.reports.base import describe_errors
from ddo_hooks.reports.boundary import ActionReport, BoundaryRefusalReport
from ddo_hooks.reports.pages import DoneComponentsReleaseReport
from ddo_hooks.reports.release import HostCacheReleaseReport
from ddo_hooks.reports.repack import PinnedCopyRepackReport

__all__ = ["REPORT_ADAPTER", "REPORT_TYPES", "ROUTES", "DDOReport", "parse_report", "report_json_schema"]

DDOReport: TypeAlias = Annotated[
    HostCacheReleaseReport
    | BoundaryRefusalReport
    | ActionReport
    | AuxiliarySourceDetachReport
    | PinnedCopyRepackReport
    | DoneComponentsReleaseReport,
    Field(discriminator="route"),
]
"""Any DDO report of schema version 1, told apart by ``route``."""

REPORT_TYPES = (
    HostCacheReleaseReport,
    BoundaryRefusalReport,
    ActionReport,
    AuxiliarySourceDetachReport,
    PinnedCopyRepackReport,
    DoneComponentsReleaseReport,
)
"""Every report model, one per route."""

ROUTES: tuple[str, ...] = tuple(cls.model_fields["route"].default for cls in REPORT_TYPES)
"""Every route name."""

REPORT_ADAPTER: TypeAdapter[Any] = TypeAdapter(DDOReport)
"""The pydantic adapter of :data:`DDOReport` (its ``validate_python`` lists every problem)."""


def parse_report(
    data: Any,
) -> (
    HostCacheReleaseReport
    | BoundaryRefusalReport
    | ActionReport
    | AuxiliarySourceDetachReport
    | PinnedCopyRepackReport
    | DoneComponentsReleaseReport
):
    """Validate a mapping or a JSON string as a DDO report.

    Args:
        data: A mapping (e.g. ``report.model_dump(mode="json")``) or a JSON document (``str``/``bytes``).

    Returns:
        The validated report model for its ``route``.

    Raises:
        ReportError: The data is not a valid DDO report; the message lists each field path.

    Examples:
        >>> parse_report({"schema_version": 2, "route": "pytorch_host_cache_release", "setup": {}})
        Traceback (most recent call last):
        ...
        ddo_hooks.errors.ReportError: not a valid DDO report: ...
    """
    try:
        if isinstance(data, (str, bytes, bytearray)):
            return REPORT_ADAPTER.validate_json(data)
        return REPORT_ADAPTER.validate_python(data)
    except ValidationError as e:
        raise ReportError(f"not a valid DDO report: {describe_errors(e)}") from e


def report_json_schema() -> dict[str, Any]:
    """Return the JSON Schema of a DDO report (any route), as checked into ``ddo_hooks/schemas``.

    Examples:
        >>> report_json_schema()["title"]
        'DDOReport'
    """
    schema = REPORT_ADAPTER.json_schema()
    schema["title"] = "DDOReport"
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
