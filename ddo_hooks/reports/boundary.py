"""Reports of the phase hooks themselves: a refused boundary, and a user action's result.

Examples:
    >>> refusal = BoundaryRefusal(
    ...     boundary="before_vae", action="host_cache_release", reason="denoising",
    ...     detail="FluxPipeline is inside its denoising loop", requested_by="host", call_index=1)
    >>> BoundaryRefusalReport(setup=BoundaryRefusalSetup(boundary_refusal=refusal)).route
    'phase_boundary_refusal'

    Built directly (as ``ctx.action_report(...)`` does), an invalid action result raises a
    :class:`~ddo_hooks.errors.ReportError` naming the field, for example NaN or infinity in
    ``data``, which JSON cannot hold:

    >>> ActionResult(action="log", boundary="after_call", status="executed",
    ...              data={"ratio": float("nan")})
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.ReportError: ...invalid: data: nan at data.ratio is not a JSON number; ...
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, JsonValue, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import KeyPath, format_key_path, show_repr
from ddo_hooks.boundaries import RefusalReason
from ddo_hooks.errors import ReportError
from ddo_hooks.reports.base import (
    Bytes,
    HostObservation,
    PhaseLabel,
    ReportModel,
    ReportSummary,
    RouteReport,
    Seconds,
    describe_errors,
)

__all__ = [
    "ActionReport",
    "ActionResult",
    "ActionResultSetup",
    "BoundaryRefusal",
    "BoundaryRefusalReport",
    "BoundaryRefusalSetup",
    "OBSERVED",
    "RequestedBy",
]


RequestedBy = Literal["pipeline", "host"]
"""Who asked for a boundary: the pipeline's call (its signal) or the host (a request)."""

_HOST_FIELDS = ("rss_bytes", "rss_anon_bytes", "rss_file_bytes", "rss_shmem_bytes", "cgroup_memory_bytes")
OBSERVED = ("rss_before", "rss_after", "rss_bytes", "seconds", *_HOST_FIELDS[1:])
"""The names in an action's ``data`` that tables read as what the action observed (bytes, seconds)."""


def _number(value: Any) -> bool:
    """Whether ``value`` is a number >= 0 (an action's data is any JSON)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0  # a tuple: no union made


def _count(value: Any) -> int | None:
    """``value`` when it is an int >= 0, else ``None``."""
    return value if _number(value) and isinstance(value, int) else None


class BoundaryRefusal(ReportModel):
    """Fields under ``setup.boundary_refusal``: a boundary that was requested and not run."""

    boundary: PhaseLabel
    """The boundary that was refused."""
    action: str = Field(min_length=1)
    """The action that did not run."""
    reason: RefusalReason
    """Why it was refused."""
    detail: str
    """A sentence saying what was going on, for people."""
    requested_by: RequestedBy
    """``pipeline``: fired by a pipeline call; ``host``: a manual ``Attachment.boundary`` request."""
    call_index: Bytes
    """How many pipeline calls the attachment had seen when the request came."""


class BoundaryRefusalSetup(ReportModel):
    """The ``setup`` section of a refusal report."""

    boundary_refusal: BoundaryRefusal
    """The refusal's fields."""


class BoundaryRefusalReport(RouteReport):
    """The report of a refused boundary (route ``phase_boundary_refusal``)."""

    route: Literal["phase_boundary_refusal"] = "phase_boundary_refusal"
    """What produced the report."""
    setup: BoundaryRefusalSetup
    """The report body."""

    def summary(self) -> ReportSummary:
        """The refusal as a table row: the boundary, the action that did not run, the reason."""
        r = self.setup.boundary_refusal
        return ReportSummary(boundary=r.boundary, action=r.action, kind="refused", reason=r.reason, detail=r.detail)


class ActionResult(ReportModel):
    """Fields under ``setup.boundary_action``: the result of a user-registered action."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            action = show_repr(data.get("action"))
            raise ReportError(f"the boundary_action report of {action} is invalid: {describe_errors(e)}") from e

    action: str = Field(min_length=1)
    """The registered action name."""
    boundary: PhaseLabel
    """The boundary it ran at."""
    status: Literal["executed", "noop"]
    """What the action says it did."""
    detail: str = ""
    """A sentence for people."""
    data: dict[str, JsonValue] = Field(default_factory=dict)
    """Any JSON data the action wants to keep (numbers finite: no NaN or infinity; ints of at most 4,300 digits)."""
    elapsed_seconds: Seconds | None = None
    """How long the action took at the boundary, timed by the attachment around the action's function; ``None``
    where nothing timed it (a report made outside an attachment, or written before this field)."""

    @field_validator("data", mode="before")
    @classmethod
    def _json_numbers(cls, value: Any) -> Any:
        if (found := _unwritable_number(value)) is not None:
            path, number = found
            where = f"{show_repr(number)} at {format_key_path(('data', *path))}"
            if isinstance(number, float):
                message = f"{where} is not a JSON number; store a finite number, a string or null"
            else:
                message = (
                    f"{where} has more than {_MAX_DIGITS:,} digits, which Python's json refuses; store it as a string"
                )
            raise PydanticCustomError("json_number", message)
        return value


_MAX_DIGITS = 4300
"""The longest int Python's json writes and reads (``sys.get_int_max_str_digits()``'s default)."""
_TOO_LONG = 10**_MAX_DIGITS


def _unwritable_number(value: Any) -> tuple[KeyPath, float | int] | None:
    """The first NaN, infinity or too long int in nested lists and mappings, and its path (without recursion)."""
    stack: list[tuple[KeyPath, Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path, item
        if isinstance(item, int) and not isinstance(item, bool) and abs(item) >= _TOO_LONG:
            return path, item
        if isinstance(item, dict):
            stack.extend(((*path, key), child) for key, child in reversed(item.items()))
        elif isinstance(item, (list, tuple)):
            stack.extend(((*path, index), child) for index, child in reversed(list(enumerate(item))))
    return None


class ActionResultSetup(ReportModel):
    """The ``setup`` section of a user action's report."""

    boundary_action: ActionResult
    """The action's fields."""


class ActionReport(RouteReport):
    """The report of a user-registered boundary action (route ``boundary_action``)."""

    route: Literal["boundary_action"] = "boundary_action"
    """What produced the report."""
    setup: ActionResultSetup
    """The report body."""

    def timed(self, seconds: float) -> ActionReport:
        """This report with ``elapsed_seconds`` set, unless the action set it (the attachment times each action)."""
        if self.setup.boundary_action.elapsed_seconds is not None:
            return self
        result = self.setup.boundary_action.model_copy(update={"elapsed_seconds": seconds})
        return self.model_copy(update={"setup": ActionResultSetup(boundary_action=result)})

    def summary(self) -> ReportSummary:
        """The action as a table row; what it observed comes from the names of :data:`OBSERVED` in its ``data``.

        ``rss_before`` and ``rss_after`` (as ``malloc_trim`` reports them), ``rss_bytes`` (one
        observation, shown after), ``seconds`` (its time, where the attachment did not time it:
        ``elapsed_seconds``) and the host observation's fields (``rss_anon_bytes``...: which memory the
        RSS is, as the demo's action reports them).
        """
        r = self.setup.boundary_action
        data = r.data
        memory = None
        if _count(data.get("rss_anon_bytes")) is not None or _count(data.get("rss_file_bytes")) is not None:
            host: dict[str, Any] = {name: _count(data.get(name)) for name in _HOST_FIELDS}
            memory = HostObservation(platform="linux", **host)  # the split is Linux's
        seconds: Any = r.elapsed_seconds if r.elapsed_seconds is not None else data.get("seconds")  # _number checks
        return ReportSummary(
            boundary=r.boundary,
            action=r.action,
            kind=r.status,
            reason=None,
            detail=r.detail,
            rss_before=_count(data.get("rss_before")),
            rss_after=_count(data.get("rss_after")) if "rss_after" in data else _count(data.get("rss_bytes")),
            elapsed_seconds=float(seconds) if _number(seconds) else None,
            memory_after=memory,
        )
