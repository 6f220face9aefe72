"""Any report: the union of every route of ddo_hooks' shape, its parser and JSON Schema; DDO's own shape beside it.

Every public result of ddo_hooks is a *report* of ddo_hooks' shape: a frozen, strictly validated model with
``schema_version``, a ``route`` naming what produced it, and one section under ``setup``
(:class:`~ddo_hooks.reports.base.RouteReport`). :func:`parse_report` reads any of them back.

It also reads the reports of DDO itself (``diffusers-dynamic-offloader``: its
``DynamicOffloadMetrics``, :mod:`ddo_hooks.reports.ddo`), whose shape differs under the same
``schema_version`` 1 and, for the release, the same route. The rule that tells them apart: a
document with a top-level ``configuration`` or ``runtime`` key is DDO's shape (DDO always writes
both; a ddo_hooks report never has either), any other is ddo_hooks' shape
(:func:`report_shape`). A document is validated against that one family only, and an error says
which shape it was read as, and why.

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> report = release_pytorch_host_cache(phase="after_call")
    >>> parse_report(report.model_dump(mode="json")) == report
    True
    >>> release = {"phase": "after_call", "status": "disabled", "released": False,
    ...            "elapsed_seconds": 1e-06}
    >>> ddo = {"schema_version": 1, "route": "pytorch_host_cache_release",
    ...        "configuration": {"enabled": False}, "setup": {"host_cache_release": release},
    ...        "runtime": {}}
    >>> type(parse_report(ddo)).__name__
    'DDOHostCacheReleaseReport'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias, get_args

from pydantic import BaseModel, Discriminator, Field, Tag, TypeAdapter, ValidationError
from pydantic_core import from_json

from ddo_hooks import _moved
from ddo_hooks.errors import ReportError
from ddo_hooks.reports.auxiliary_sources import AuxiliarySourceDetachReport
from ddo_hooks.reports.base import describe_errors
from ddo_hooks.reports.boundary import ActionReport, BoundaryRefusalReport
from ddo_hooks.reports.ddo.base import DDO_SHAPE_KEYS, ddo_shape_keys, describe_ddo_errors
from ddo_hooks.reports.ddo.group import DDOGroupOffloadReport
from ddo_hooks.reports.ddo.host import DDOHostCacheReleaseReport, DDOHostMemoryReport
from ddo_hooks.reports.ddo.native import DDONativeIdleCacheReleaseReport
from ddo_hooks.reports.ddo.routes import DDO_REPORT_ADAPTER, DDO_REPORT_TYPES, DDO_ROUTE_TYPES, DDOPackageReport
from ddo_hooks.reports.ddo.vmm_auxiliary import DDOAuxiliarySourceDetachmentReport
from ddo_hooks.reports.done_components import DoneComponentsReleaseReport
from ddo_hooks.reports.host_cache import HostCacheReleaseReport
from ddo_hooks.reports.repack import PinnedCopyRepackReport
from ddo_hooks.reports.ring import RingOffloadReport

__all__ = [
    "ANY_REPORT_ADAPTER",
    "ANY_REPORT_TYPES",
    "REPORT_ADAPTER",
    "REPORT_TYPES",
    "ROUTES",
    "ROUTE_TYPES",
    "AnyReport",
    "DdoHooksReport",
    "EitherShapeReport",
    "ReportShape",
    "parse_report",
    "report_json_schema",
    "report_shape",
]

OurReport: TypeAlias = (
    HostCacheReleaseReport
    | BoundaryRefusalReport
    | ActionReport
    | AuxiliarySourceDetachReport
    | PinnedCopyRepackReport
    | DoneComponentsReleaseReport
    | RingOffloadReport
)
"""A report of ddo_hooks' shape: one model per route."""

DdoHooksReport: TypeAlias = Annotated[OurReport, Field(discriminator="route")]
"""Any report of ddo_hooks' own shape, schema version 1, told apart by ``route`` (``DDOReport`` until 0.1:
every other ``DDO*`` model is of DDO's shape)."""

REPORT_TYPES: tuple[type[Any], ...] = get_args(OurReport)
"""Every report model, one per route."""

ROUTES: tuple[str, ...] = tuple(cls.model_fields["route"].default for cls in REPORT_TYPES)
"""Every route name."""

ROUTE_TYPES: dict[str, type[Any]] = dict(zip(ROUTES, REPORT_TYPES, strict=True))
"""Each route and its report type (error messages look up field names in it)."""

REPORT_ADAPTER: TypeAdapter[Any] = TypeAdapter(DdoHooksReport)
"""The pydantic adapter of :data:`DdoHooksReport` (its ``validate_python`` lists every problem)."""

AnyReport: TypeAlias = (
    OurReport
    | DDOHostCacheReleaseReport
    | DDOHostMemoryReport
    | DDOAuxiliarySourceDetachmentReport
    | DDONativeIdleCacheReleaseReport
    | DDOGroupOffloadReport
)
"""What :func:`parse_report` returns: a report of ddo_hooks' shape or of DDO's own."""

ReportShape = Literal["ddo_hooks", "ddo"]
"""The two shapes: ddo_hooks' own (:data:`DdoHooksReport`) and DDO's
(:data:`~ddo_hooks.reports.ddo.routes.DDOPackageReport`)."""


def report_shape(data: Any) -> ReportShape:
    """Which shape a document (or a report model) is read as: the one rule that tells them apart.

    ``"ddo"`` when it is a mapping with a top-level ``configuration`` or ``runtime`` key (or a
    model of DDO's shape), else ``"ddo_hooks"``.

    Examples:
        >>> report_shape({"schema_version": 1, "route": "pytorch_host_cache_release", "runtime": {}})
        'ddo'
        >>> report_shape({"schema_version": 1, "route": "pytorch_host_cache_release", "setup": {}})
        'ddo_hooks'
    """
    if isinstance(data, BaseModel):
        return "ddo" if isinstance(data, DDO_REPORT_TYPES) else "ddo_hooks"
    return "ddo" if ddo_shape_keys(data) else "ddo_hooks"


EitherShapeReport: TypeAlias = Annotated[
    Annotated[DdoHooksReport, Tag("ddo_hooks")] | Annotated[DDOPackageReport, Tag("ddo")],
    Discriminator(report_shape),
]
"""A report of either shape, told apart by :func:`report_shape`: what a tracker's record holds."""

ANY_REPORT_TYPES: tuple[type[Any], ...] = (*REPORT_TYPES, *DDO_REPORT_TYPES)
"""Every report model of either shape: ddo_hooks' routes, then DDO's."""

ANY_REPORT_ADAPTER: TypeAdapter[Any] = TypeAdapter(EitherShapeReport)
"""Both shapes, told apart by :func:`report_shape`: the JSON Schema of :func:`report_json_schema`.

Validate with :func:`parse_report`, whose errors name the shape and leave out the shape's tag."""


def _refused(shape: ReportShape, data: Any, found: str) -> str:
    """The message of a document refused as ``shape``: which shape it was read as, why, and its problems."""
    if data is None:
        return f"not a valid report (not JSON, so of neither shape): {found}"
    if shape == "ddo_hooks":
        neither = " or ".join(repr(k) for k in DDO_SHAPE_KEYS)
        return f"not a valid report of ddo_hooks' shape (no top-level {neither}): {found}"
    keys = ddo_shape_keys(data)
    why = f" (it has a top-level {' and '.join(repr(k) for k in keys)})" if keys else ""  # none: a model instance
    return f"not a valid report of DDO's shape{why}: {found}"


def parse_report(data: Any) -> AnyReport:
    """Validate a mapping, a JSON document or a DDO metrics object as a report of either shape.

    The shape is decided first (:func:`report_shape`: DDO's when the document has a top-level
    ``configuration`` or ``runtime``), then the document is validated against that shape's
    models only.

    Args:
        data: A mapping (e.g. ``report.model_dump(mode="json")`` or DDO's ``metrics.as_dict()``),
            a JSON document (``str``/``bytes``), a report model, or any object with an
            ``as_dict()`` method (DDO's ``DynamicOffloadMetrics``; DDO is not imported here).

    Returns:
        The validated report model for its shape and ``route``.

    Raises:
        ReportError: The data is not a valid report of the shape it was read as; the message
            names the shape and why, then lists each field path. Text that holds half of a
            surrogate pair (U+D800 to U+DFFF as a character, which no UTF-8 file or JSON text
            decodes to) is a :class:`~ddo_hooks.errors.ReportError` too, naming its offset.

    Examples:
        >>> parse_report({"schema_version": 2, "route": "pytorch_host_cache_release", "setup": {}})
        Traceback (most recent call last):
        ...
        ddo_hooks.errors.ReportError: not a valid report of ddo_hooks' shape (no top-level ...): ...
        >>> parse_report({"schema_version": 1, "route": "pytorch_host_cache_release", "configuration": {},
        ...               "setup": {}, "runtime": {}})
        Traceback (most recent call last):
        ...
        ddo_hooks.errors.ReportError: not a valid report of DDO's shape (it has a top-level ...
    """
    if not isinstance(data, (str, bytes, bytearray, Mapping, BaseModel)) and callable(getattr(data, "as_dict", None)):
        data = data.as_dict()  # DDO's DynamicOffloadMetrics, duck-typed
    text = isinstance(data, (str, bytes, bytearray))
    shape: ReportShape
    try:
        document = from_json(data) if text else data
    except ValueError:  # not JSON: ddo_hooks' adapter says where
        document, shape = None, "ddo_hooks"
    except TypeError as e:  # pydantic_core cannot encode a str holding half a surrogate pair as UTF-8
        raise _half_surrogate(data) from e
    else:
        shape = report_shape(document)
    adapter = DDO_REPORT_ADAPTER if shape == "ddo" else REPORT_ADAPTER
    try:
        return adapter.validate_json(data) if text else adapter.validate_python(data)
    except ValidationError as e:
        if shape == "ddo":
            found = describe_ddo_errors(e, types=DDO_ROUTE_TYPES)
        else:
            found = describe_errors(e, types=ROUTE_TYPES)
        raise ReportError(_refused(shape, document, found)) from e


def _half_surrogate(text: Any) -> ReportError:
    """The error for text that UTF-8 cannot encode: where its first half of a surrogate pair is."""
    at = next((i for i, character in enumerate(text) if "\ud800" <= character <= "\udfff"), None)
    where = f" ({text[at]!r} at offset {at:,})" if at is not None else ""
    return ReportError(
        f"not a valid report: the text holds half of a surrogate pair{where}, which UTF-8 cannot encode; a "
        "report read from a UTF-8 file or from JSON never holds one: check where the text came from"
    )


def report_json_schema() -> dict[str, Any]:
    """Return the JSON Schema of a report of either shape (any route), as checked into ``ddo_hooks/schemas``.

    ``oneOf`` two families: ddo_hooks' reports (which refuse a ``configuration`` or ``runtime``
    key) and DDO's own (which require both), so a document matches at most one.

    Examples:
        >>> schema = report_json_schema()
        >>> schema["title"], len(schema["oneOf"])
        ('DDOReport', 2)
    """
    schema = ANY_REPORT_ADAPTER.json_schema()
    schema["title"] = "DDOReport"
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def __getattr__(name: str) -> Any:
    return _moved.old_attribute(__name__, name)
