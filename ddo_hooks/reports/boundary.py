"""Reports of the phase hooks themselves: a refused boundary, and a user action's result.

Examples:
    >>> refusal = BoundaryRefusal(boundary="before_vae", action="host_cache_release", reason="denoising",
    ...                           detail="FluxPipeline is inside its denoising loop", requested_by="host", call_index=1)
    >>> BoundaryRefusalReport(setup=BoundaryRefusalSetup(boundary_refusal=refusal)).route
    'phase_boundary_refusal'
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from ddo_hooks.boundaries import RefusalReason
from ddo_hooks.reports.base import Bytes, PhaseLabel, ReportModel, RouteReport

__all__ = [
    "ActionReport",
    "ActionResult",
    "ActionResultSetup",
    "BoundaryRefusal",
    "BoundaryRefusalReport",
    "BoundaryRefusalSetup",
]


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
    requested_by: Literal["pipeline", "host"]
    """``pipeline``: fired by a pipeline call; ``host``: a manual ``Attachment.boundary`` request."""
    call_index: Bytes
    """How many pipeline calls the attachment had seen when the request came."""


class BoundaryRefusalSetup(ReportModel):
    """The ``setup`` section of a refusal report."""

    boundary_refusal: BoundaryRefusal
    """The refusal's fields."""


class BoundaryRefusalReport(RouteReport):
    """The DDO report of a refused boundary (route ``phase_boundary_refusal``)."""

    route: Literal["phase_boundary_refusal"] = "phase_boundary_refusal"
    """What produced the report."""
    setup: BoundaryRefusalSetup
    """The report body."""


class ActionResult(ReportModel):
    """Fields under ``setup.boundary_action``: the result of a user-registered action."""

    action: str = Field(min_length=1)
    """The registered action name."""
    boundary: PhaseLabel
    """The boundary it ran at."""
    status: Literal["executed", "noop"]
    """What the action says it did."""
    detail: str = ""
    """A sentence for people."""
    data: dict[str, JsonValue] = Field(default_factory=dict)
    """Any JSON data the action wants to keep."""


class ActionResultSetup(ReportModel):
    """The ``setup`` section of a user action's report."""

    boundary_action: ActionResult
    """The action's fields."""


class ActionReport(RouteReport):
    """The DDO report of a user-registered boundary action (route ``boundary_action``)."""

    route: Literal["boundary_action"] = "boundary_action"
    """What produced the report."""
    setup: ActionResultSetup
    """The report body."""
