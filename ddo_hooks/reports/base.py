"""What every report model of ddo_hooks' shape shares: the strict base model and the reusable field types.

A report is read with :func:`~ddo_hooks.reports.parse.parse_report`, whose
:class:`~ddo_hooks.errors.ReportError` names each field that is wrong, in this project's words
(:func:`describe_errors` words the ``ValidationError`` of a model built directly).

Examples:
    >>> from ddo_hooks import parse_report, release_pytorch_host_cache
    >>> data = release_pytorch_host_cache(phase="after_call").model_dump(mode="json")
    >>> data["setup"]["host_cache_release"]["host_after"] = {"platform": "linux", "rss_bytes": -1}
    >>> parse_report(data)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.ReportError: not a valid report of ddo_hooks' shape (...): ...rss_bytes: -1 ...
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, NamedTuple

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictInt,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError, PydanticSerializationError

from ddo_hooks._diagnostics import cut, did_you_mean, format_key_path, keys_at, show_value
from ddo_hooks.boundaries import PHASE_PATTERN

__all__ = [
    "FROM_CHECKED_JSON",
    "PHASE_PATTERN",
    "SCHEMA_VERSION",
    "Bytes",
    "Count",
    "HostObservation",
    "Names",
    "PhaseLabel",
    "ReportModel",
    "ReportSummary",
    "RouteReport",
    "Seconds",
    "describe_errors",
    "explain_error",
    "model_at",
    "observed_summary",
]

SCHEMA_VERSION: Final = 1
"""The schema version of ddo_hooks' reports."""

Bytes = Annotated[StrictInt, Field(ge=0)]
"""A byte count: a non-negative integer."""

Count = Annotated[StrictInt, Field(ge=0)]
"""A count of things: a non-negative integer."""

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A duration in seconds: a finite, non-negative number (an integer such as ``0`` is one; ``true`` and
``"5"`` are not)."""

Names = Annotated[tuple[str, ...], Strict(False)]
"""Names in order: a JSON array of strings (a list in Python; the strings themselves are strict)."""

PhaseLabel = Annotated[str, Field(pattern=PHASE_PATTERN)]
"""A phase label such as ``before_transformer`` (see :data:`PHASE_PATTERN`)."""


FROM_CHECKED_JSON = {"strings_from_checked_json": True}
"""The validation context of a report validated from UTF-8 JSON text by pydantic_core.

Its JSON parser refuses a lone surrogate (``"\\ud800"``), which ``json.loads`` lets through, and text
decoded from UTF-8 holds none: every string of such a report can be written as JSON, so a report
validated with this context skips writing itself out to prove it
(:meth:`RouteReport._writable_as_json`, a third of a release report's validation). Every other
check runs.
"""


class ReportModel(BaseModel):
    """The base of every report model: strict, frozen, fields documented.

    Strict as the JSON Schema is: unknown fields are refused, and no value is coerced (``"5"``
    or ``true`` is not a number, ``1.0`` is not a count); an integer is a number of seconds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True)


def _schema_version(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):  # Literal[1] alone takes true and 1.0
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": str(SCHEMA_VERSION)})
    return value


def _route_required(schema: dict[str, Any]) -> None:
    """A report names its route (the model needs it to tell the routes apart), though it has a default."""
    if "route" in schema.get("properties", {}):
        schema["required"] = sorted({*schema.get("required", ()), "route"})


class RouteReport(ReportModel):
    """The shape of every report of ddo_hooks: ``schema_version``, a ``route`` and one section under ``setup``.

    Each route's report subclasses it with its ``route`` literal and its ``setup`` model, whose
    one field is the route's section (e.g. ``setup.host_cache_release``).
    """

    model_config = ConfigDict(json_schema_extra=_route_required)

    schema_version: Annotated[Literal[1], BeforeValidator(_schema_version)] = SCHEMA_VERSION
    """The schema version of ddo_hooks' reports."""

    @model_validator(mode="after")
    def _writable_as_json(self, info: ValidationInfo) -> RouteReport:
        if info.context is FROM_CHECKED_JSON:  # its strings cannot hold half a surrogate pair (see there)
            return self
        try:
            self.model_dump_json()
        except PydanticSerializationError as e:
            why = "a string holds half of a surrogate pair, which UTF-8 cannot encode" if "surrogate" in str(e) else e
            raise ValueError(f"the report cannot be written as JSON: {cut(str(why), 120)}; use plain text") from e
        return self

    @abstractmethod
    def summary(self) -> ReportSummary:
        """What a table shows of this report (every route writes its own)."""

    @property
    def body(self) -> ReportModel:
        """The one section under ``setup``, whatever the route."""
        setup = self.setup  # type: ignore[attr-defined]  # every route's model declares its setup; the base does not
        return getattr(setup, next(iter(type(setup).model_fields)))


class HostObservation(ReportModel):
    """A snapshot of the process's host memory (not a continuous peak)."""

    platform: Literal["linux", "windows", "darwin", "other"]
    """The operating system the observation was made on."""
    rss_bytes: Bytes | None
    """Process resident set size (psutil)."""
    private_bytes: Bytes | None = None
    """Windows: process private bytes (``PrivateUsage``, committed private memory)."""
    physical_available_bytes: Bytes | None = None
    """Windows: physical memory available (``GlobalMemoryStatusEx.ullAvailPhys``)."""
    commit_available_bytes: Bytes | None = None
    """Windows: commit the process can still use (``ullAvailPageFile``), not pagefile free disk space."""
    rss_anon_bytes: Bytes | None = None
    """Linux: anonymous resident memory (``RssAnon`` of ``/proc/self/status``): the heap, and copies of weights."""
    rss_file_bytes: Bytes | None = None
    """Linux: file-backed resident memory (``RssFile``): e.g. the mmap'd pages of safetensors files, which the
    kernel can drop and read again while they are clean."""
    rss_shmem_bytes: Bytes | None = None
    """Linux: resident shared memory (``RssShmem``); CUDA's pinned host memory shows here. It cannot be swapped."""
    cgroup_memory_bytes: Bytes | None = None
    """Linux: the memory charged to the process's cgroup (v2 ``memory.current``, v1 ``memory.usage_in_bytes``),
    page cache included; what a container's limit is measured against."""
    cgroup_limit_bytes: Bytes | None = None
    """Linux: that cgroup's limit (``memory.max``, ``memory.limit_in_bytes``); null when it sets none, or when
    not observed (then listed in ``unavailable``)."""
    unavailable: dict[str, str] = Field(default_factory=dict)
    """Fields that could not be observed, each with the reason; those fields are null."""

    @model_validator(mode="after")
    def _unavailable_are_null(self) -> HostObservation:
        for name in self.unavailable:
            if name not in type(self).model_fields or name in ("platform", "unavailable"):
                raise ValueError(f"unavailable names unknown field {show_value(name)}")
            if getattr(self, name) is not None:
                raise ValueError(f"{name} is listed as unavailable but has a value")
        return self


class ReportSummary(NamedTuple):
    """What a table shows of one report, whatever its route: each route's model writes it (:meth:`RouteReport.summary`).

    A named tuple: immutable, and made for each of the records ``summarize`` reads at a third of
    the cost of a frozen dataclass.

    Attributes:
        boundary: The boundary or phase the report belongs to (``""`` when the route has none).
        action: What produced it: ``host_cache_release``, a user action's name, ``repack``...
        kind: ``executed``, ``noop`` or ``refused``.
        reason: The no-op or refusal reason code; ``None`` when executed.
        detail: The report's sentence for people.
        owned_before: Pinned bytes the allocator owned before, when read.
        owned_after: Pinned bytes the allocator owned after, when read.
        delta: ``allocator_bytes_delta`` (before minus after), when known.
        rss_before: Process RSS before, when observed.
        rss_after: Process RSS after (or the one observation made), when observed.
        elapsed_seconds: The time it took, when timed.
        repinned_bytes: Bytes pinned since the previous boundary, when counted.
        repin_seconds: Seconds spent pinning them, when counted.
        memory_after: The host observation after it, which says which memory the RSS is.
    """

    boundary: str
    action: str
    kind: Literal["executed", "noop", "refused"]
    reason: str | None
    detail: str
    owned_before: int | None = None
    owned_after: int | None = None
    delta: int | None = None
    rss_before: int | None = None
    rss_after: int | None = None
    elapsed_seconds: float | None = None
    repinned_bytes: int | None = None
    repin_seconds: float | None = None
    memory_after: HostObservation | None = None


def observed_summary(
    section: Any, *, boundary: str, action: str, reason: str | None, once: bool = False, **more: Any
) -> ReportSummary:
    """The summary of a section that observed the host before and after it ran: its outcome, RSS and time.

    ``section`` has ``status``, ``detail``, ``host_before``/``host_after`` (:class:`HostObservation` or
    ``None``) and ``elapsed_seconds``; ``more`` are the summary's other fields. ``once``: a no-op's one
    reading of the host (the same before and after: nothing ran between them) is shown once, as after.
    """
    host_before, host_after = section.host_before, section.host_after
    if once and section.status == "noop" and host_before == host_after:
        host_before = None
    return ReportSummary(
        boundary=boundary,
        action=action,
        kind=section.status,
        reason=reason,
        detail=section.detail,
        rss_before=host_before.rss_bytes if host_before else None,
        rss_after=host_after.rss_bytes if host_after else None,
        elapsed_seconds=section.elapsed_seconds,
        memory_after=host_after,
        **more,
    )


_EXPECTED = {
    "float_type": "a number", "float_parsing": "a number", "int_type": "an integer", "int_parsing": "an integer",
    "bool_type": "true or false", "bool_parsing": "true or false", "string_type": "a string",
    "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
    "tuple_type": "a list", "list_type": "a list",
}  # fmt: skip
"""What a report field of each pydantic error kind expects, in this project's words."""


_BOUNDS = {
    "greater_than_equal": ("ge", "of at least"), "greater_than": ("gt", "greater than"),
    "less_than_equal": ("le", "of at most"), "less_than": ("lt", "less than"),
}  # fmt: skip
"""The pydantic error kinds of a number out of its range: the bound's key in the context, and its words."""

_PATTERNS = {
    PHASE_PATTERN: "a phase label: a lowercase letter, then up to 63 lowercase letters, digits, '_', '.' or '-' "
    "(e.g. 'before_vae')",
    r"^[0-9a-f]{32}$": "a run id: 32 lowercase hexadecimal digits",
    r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$": "a component name: a letter or digit, then up to 127 letters, digits, "
    "'_', '.' or '-'",
}
"""What a value of each pattern the reports use looks like, in words."""


def explain_error(item: Any, model: type[BaseModel] | None = None, loc: tuple[Any, ...] | None = None) -> str:
    """One pydantic error of a report as people read it, showing the value written (cut).

    ``model`` (the report's type) and ``loc`` (the error's place in it, without the route) let an
    unknown key name the nearest known one.

    Examples:
        >>> explain_error({"type": "literal_error", "msg": "Input should be 'executed' or 'noop'",
        ...                "input": "exploded", "ctx": {"expected": "'executed' or 'noop'"}})
        "'exploded' is not one of executed, noop"
        >>> explain_error({"type": "literal_error", "input": "1", "ctx": {"expected": "1"}, "msg": ""})
        "expected 1, got '1' (a string: write 1 without quotes)"
        >>> explain_error({"type": "float_parsing", "msg": "Input should be a valid number", "input": "5"})
        "expected a number, got '5'"
        >>> explain_error({"type": "extra_forbidden", "msg": "Extra inputs are not permitted", "input": 1},
        ...               HostObservation, ("rss_byte",))
        "unknown key; did you mean 'rss_bytes'?"
    """
    kind, message, ctx = item["type"], item["msg"], item.get("ctx") or {}
    if kind == "literal_error":
        choices = [choice.strip("'") for choice in ctx["expected"].replace(" or ", ", ").split(", ")]
        if len(choices) == 1:
            quoted = isinstance(item["input"], str) and not ctx["expected"].startswith("'")
            unquote = f" (a string: write {choices[0]} without quotes)" if quoted else ""
            return f"expected {ctx['expected']}, got {show_value(item['input'])}{unquote}"
        return f"{show_value(item['input'])} is not one of {', '.join(choices)}"
    if kind in _BOUNDS:
        bound, wanted = _BOUNDS[kind]
        return f"{show_value(item.get('input'))} is out of range; expected a value {wanted} {ctx[bound]}"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        form = _PATTERNS.get(pattern, f"the form {pattern} (a regular expression)")
        return f"{show_value(item.get('input'))} is not {form}"
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return f"expected a non-empty string, got {show_value(item.get('input'))}"
    if kind == "union_tag_invalid":
        tag, expected = show_value(ctx.get("tag")), ctx["expected_tags"].replace("'", "")
        return f"{tag} is not a route of ddo_hooks' reports; the routes: {expected}"
    if kind == "union_tag_not_found":
        return "missing: every report names its route (ddo-hooks schema report lists them)"
    if kind == "extra_forbidden":
        where = tuple(item["loc"] if loc is None else loc)
        guess = did_you_mean(where[-1] if where else None, keys_at(model, where[:-1]) if model else [])
        return f"unknown key; did you mean {guess!r}?" if guess else "unknown key: this report has no such field"
    if kind == "missing":
        return "required key is missing; add it"
    if kind in _EXPECTED and "input" in item:
        return f"expected {_EXPECTED[kind]}, got {show_value(item['input'])}"
    if kind.endswith("_type") and "input" in item:
        return f"{message}, got {show_value(item['input'])}"
    return cut(message, 300)


def model_at(loc: Any, types: Mapping[str, type[BaseModel]] | None) -> tuple[type[BaseModel] | None, tuple[Any, ...]]:
    """The report type an error's ``loc`` starts in (its first part names the route) and the rest of ``loc``."""
    loc = tuple(loc)
    if types and loc and loc[0] in types:
        return types[loc[0]], loc[1:]
    return None, loc


def describe_errors(
    error: ValidationError, *, limit: int = 20, types: Mapping[str, type[BaseModel]] | None = None
) -> str:
    """Every problem of a report's validation error, ``key.path: problem``, joined by ``; `` (at most ``limit``).

    ``types``: each route's report type, so that an unknown key names the nearest known one.
    """
    items = error.errors(include_url=False)
    parts = [
        f"{format_key_path(i['loc']) if i['loc'] else '<root>'}: {explain_error(i, *model_at(i['loc'], types))}"
        for i in items[:limit]
    ]
    more = f"; ... and {len(items) - limit} more" if len(items) > limit else ""
    return "; ".join(parts) + more
