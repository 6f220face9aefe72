"""What every model of DDO's own report shape shares, and the rule that tells that shape from ddo_hooks'.

DDO 0.1.0rc2's ``DynamicOffloadMetrics.as_dict()`` always writes five keys::

    {"schema_version": 1, "route": "...", "configuration": {...}, "setup": {...}, "runtime": {...}}

A ddo_hooks report never has a top-level ``configuration`` or ``runtime`` (its models refuse
unknown keys), so a document with either key is read as DDO's shape and one with neither as
ddo_hooks' (:func:`ddo_shape_keys`); each document is validated against exactly one of the two.

DDO leaves a key out where it has nothing to say (``before`` of a release that did not run)
rather than writing ``null``. Such a key is declared with :func:`omittable`: absent is accepted,
``null`` is refused, and a model writes it back only when it was given, so
``model_dump(mode="json")`` (and :meth:`DDORouteReport.as_dict`) give back exactly DDO's keys.

Examples:
    >>> ddo = {"schema_version": 1, "route": "x", "configuration": {}, "setup": {}, "runtime": {}}
    >>> ddo_shape_keys(ddo)
    ('configuration', 'runtime')
    >>> ddo_shape_keys({"schema_version": 1, "route": "x", "setup": {}})
    ()
    >>> DDOHostSnapshot.model_validate({"process_rss_bytes": 123}).platform is None
    True
    >>> DDOHostSnapshot.model_validate({"process_rss_bytes": 1, "process_rss_bytes_extra": 2})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for DDOHostSnapshot
    ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import format_key_path, show_value
from ddo_hooks.reports.base import Bytes, ReportModel, RouteReport, explain_error, model_at

__all__ = [
    "DDO_SHAPE_KEYS",
    "DDO_VERSION",
    "AlwaysFalse",
    "AlwaysTrue",
    "DDOEmptyRuntime",
    "DDOHostSnapshot",
    "DDOModel",
    "DDORouteReport",
    "One",
    "describe_ddo_errors",
    "ddo_shape_keys",
    "omittable",
]

DDO_VERSION = "0.1.0rc2"
"""The ``diffusers-dynamic-offloader`` release whose report shapes these models follow."""

DDO_SHAPE_KEYS = ("configuration", "runtime")
"""The top-level keys that only DDO's shape has: a document with either is read as DDO's report."""


def ddo_shape_keys(data: Any) -> tuple[str, ...]:
    """The top-level keys of ``data`` that mark DDO's own shape (:data:`DDO_SHAPE_KEYS`); ``()`` when none.

    Args:
        data: A decoded JSON document (anything; only a mapping can have keys).

    Returns:
        The marking keys present, in the order of :data:`DDO_SHAPE_KEYS`.
    """
    if not isinstance(data, Mapping):
        return ()
    return tuple(key for key in DDO_SHAPE_KEYS if key in data)


def _exactly_one(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):  # Literal[1] alone takes true and 1.0
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": "1"})
    return value


One = Annotated[Literal[1], BeforeValidator(_exactly_one)]
"""The integer 1 exactly (not ``true``, not ``1.0``): DDO's schema versions and constant flags."""


def _a_bool(value: Any) -> Any:
    if not isinstance(value, bool):  # Literal[False] alone takes 0, Literal[True] 1
        raise PydanticCustomError("bool_type", "Input should be a valid boolean")
    return value


AlwaysTrue = Annotated[Literal[True], BeforeValidator(_a_bool)]
"""``true`` exactly (not ``1``): a flag DDO writes only as true."""

AlwaysFalse = Annotated[Literal[False], BeforeValidator(_a_bool)]
"""``false`` exactly (not ``0``): a flag DDO writes only as false."""


def _not_null_in_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema of an :func:`omittable` key: its type without ``null``, and no default."""
    options = [option for option in schema.pop("anyOf", []) if option != {"type": "null"}]
    schema.pop("default", None)
    if len(options) == 1:
        schema.update(options[0])
    elif options:
        schema["anyOf"] = options


def omittable() -> Any:
    """A key DDO writes only sometimes, and never as ``null``: may be absent; ``null`` is refused.

    Declare it as ``name: T | None = omittable()``; ``None`` in Python means the key was absent.
    """
    return Field(default=None, json_schema_extra=_not_null_in_schema)


def _is_omittable(field: FieldInfo) -> bool:
    return field.json_schema_extra is _not_null_in_schema


class DDOModel(ReportModel):
    """The base of every model of DDO's shape: strict and frozen as ddo_hooks' own, and faithful to DDO's keys.

    A field with a default is a key DDO may leave out: it is written back only when it was given
    (``model_fields_set``), so a validated payload dumps to exactly the keys it had.
    """

    @model_validator(mode="before")
    @classmethod
    def _omitted_not_null(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                if _is_omittable(field) and name in data and data[name] is None:
                    raise ValueError(f"{name} is null; DDO leaves this key out instead of writing null")
        return data

    @model_serializer(mode="wrap")
    def _given_keys(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        fields, given = type(self).model_fields, self.model_fields_set
        return {key: value for key, value in data.items() if fields[key].is_required() or key in given}

    def given(self, *names: str) -> list[str]:
        """Which of ``names`` this payload has (keys DDO wrote), in the order asked."""
        return [name for name in names if name in self.model_fields_set]

    def missing(self, *names: str) -> list[str]:
        """Which of ``names`` this payload lacks (keys DDO left out), in the order asked."""
        return [name for name in names if name not in self.model_fields_set]


class DDOEmptyRuntime(DDOModel):
    """The ``runtime`` of a route that has none: DDO writes ``{}`` (no hook reports into it)."""


class DDOHostSnapshot(DDOModel):
    """DDO's best-effort host observation (``host_cache._host_snapshot``): CPU only, never CUDA.

    On every system DDO writes ``process_rss_bytes`` (psutil) or, when psutil failed,
    ``process_observation_error``. On Windows it adds ``process_private_bytes`` and either the
    pair ``available_physical_bytes``/``available_process_commit_bytes`` (``GlobalMemoryStatusEx``)
    or ``system_observation_error``. It does not say which operating system it ran on: only the
    Windows keys show it (:attr:`platform`).
    """

    process_rss_bytes: Bytes | None = omittable()
    """Process resident set size (psutil ``memory_info().rss``)."""
    process_private_bytes: Bytes | None = omittable()
    """Windows: process private bytes (psutil ``memory_info().private``)."""
    process_observation_error: str | None = omittable()
    """Why psutil could not observe the process (its exception's text)."""
    available_physical_bytes: Bytes | None = omittable()
    """Windows: physical memory available (``GlobalMemoryStatusEx.ullAvailPhys``)."""
    available_process_commit_bytes: Bytes | None = omittable()
    """Windows: commit the process can still use (``ullAvailPageFile``)."""
    system_observation_error: str | None = omittable()
    """Windows: why ``GlobalMemoryStatusEx`` could not be read (its exception's text)."""

    @property
    def platform(self) -> Literal["windows"] | None:
        """``"windows"`` when a Windows-only key is present; ``None`` when the payload does not say."""
        windows = ("process_private_bytes", "available_physical_bytes", "system_observation_error")
        return "windows" if self.given(*windows) else None

    @model_validator(mode="after")
    def _as_ddo_writes_it(self) -> DDOHostSnapshot:
        rss, error = self.process_rss_bytes, self.process_observation_error
        if rss is None and error is None:
            raise ValueError("DDO writes process_rss_bytes or, when psutil failed, process_observation_error")
        pair = self.given("available_physical_bytes", "available_process_commit_bytes")
        if len(pair) == 1:
            raise ValueError("DDO writes available_physical_bytes and available_process_commit_bytes together")
        if pair and self.system_observation_error is not None:
            raise ValueError("system_observation_error is written instead of the available_* pair, not with it")
        if self.process_private_bytes is not None and (rss is None or error is not None):
            raise ValueError("process_private_bytes is written after process_rss_bytes, when psutil did not fail")
        if self.platform is None:
            if rss is not None and error is not None:
                raise ValueError("process_rss_bytes and process_observation_error together happen only on Windows")
            return self
        if not pair and self.system_observation_error is None:
            raise ValueError(
                "a Windows observation (it has a Windows-only key) has the available_* pair or system_observation_error"
            )
        if rss is not None and error is None and self.process_private_bytes is None:
            raise ValueError("on Windows DDO writes process_private_bytes with process_rss_bytes")
        return self


class DDORouteReport(RouteReport, DDOModel):
    """The shape of every DDO report: ``schema_version``, ``route``, ``configuration``, ``setup``, ``runtime``.

    Each route subclasses it with its ``route`` literal and its three section models. It is a
    :class:`~ddo_hooks.reports.base.RouteReport` (a table row through :meth:`summary`), whose
    :meth:`as_dict` gives back DDO's payload as ``DynamicOffloadMetrics.as_dict()`` wrote it.
    """

    schema_version: One
    """DDO's metrics schema version (``DYNAMIC_OFFLOAD_METRICS_SCHEMA_VERSION``), always written."""

    def as_dict(self) -> dict[str, Any]:
        """DDO's payload, as ``DynamicOffloadMetrics.as_dict()`` returns it (JSON-ready)."""
        return self.model_dump(mode="json")


def _explain(item: Any, types: Mapping[str, type[BaseModel]] | None) -> str:
    kind = item["type"]
    if kind == "union_tag_invalid":
        tag, expected = show_value(item["ctx"].get("tag")), item["ctx"]["expected_tags"].replace("'", "")
        return f"{tag} is not a route whose report ddo_hooks reads in DDO's shape; those routes: {expected}"
    if kind == "union_tag_not_found":
        return "missing: every DDO report names its route"
    return explain_error(item, *model_at(item["loc"], types))


def describe_ddo_errors(
    error: ValidationError, *, limit: int = 20, types: Mapping[str, type[BaseModel]] | None = None
) -> str:
    """Every problem of a DDO-shaped report's validation, ``key.path: problem``, joined by ``; ``.

    ``types``: each route's report type, so that an unknown key names the nearest known one.
    """
    items = error.errors(include_url=False)
    parts = [f"{format_key_path(i['loc']) if i['loc'] else '<root>'}: {_explain(i, types)}" for i in items[:limit]]
    more = f"; ... and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(parts) + more
