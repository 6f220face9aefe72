"""The report of the ring runtime at attach (route ``ring_offload``), schema version 1.

The policy's ``offload: {runtime: ring}`` runs the pipeline's components through the ring runtime
(:mod:`ddo_hooks.streaming`): the children of their largest ``ModuleList``s stream their weights
through one ring on the device, under the compute; everything else stays on the device. The report
says, per component, what streams and what stays, and the ring's size; or why nothing was applied.

Examples:
    >>> part = RingComponent(component="transformer", status="streamed", units=24,
    ...     streamed_bytes=1_870_000_000, device_bytes=760_000_000)
    >>> body = RingOffload(phase="attach", status="executed", noop_reason=None,
    ...     detail="24 units stream", device="cuda:0", components=(part,), ring_bytes=360_000_000,
    ...     lookahead=2, resident_budget_bytes=0, elapsed_seconds=0.4)
    >>> RingOffloadReport(setup=RingOffloadSetup(ring_offload=body)).summary().kind
    'executed'
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Strict, model_validator

from ddo_hooks.reports.base import Bytes, Count, PhaseLabel, ReportModel, ReportSummary, RouteReport, Seconds

__all__ = ["RingComponent", "RingOffload", "RingOffloadReport", "RingOffloadSetup"]


class RingComponent(ReportModel):
    """One component under the ring runtime."""

    component: str
    """The pipeline's name for it."""
    status: Literal["streamed", "on_device"]
    """``streamed``: its units' weights stream through the ring; ``on_device``: it stays on the device whole (its
    units would stream fewer bytes than the policy's ``stream_above``, or it has none)."""
    units: Count
    """Its units (the children of its largest ``ModuleList``s that have a weight to stream)."""
    streamed_bytes: Bytes
    """What its units copy in each pass, before the residency budget keeps some of it on the device."""
    device_bytes: Bytes
    """What it keeps on the device from attach (everything but what streams)."""

    @model_validator(mode="after")
    def _coherent(self) -> RingComponent:
        if (self.status == "streamed") != bool(self.units):
            raise ValueError("a streamed component has units, and one on the device has none")
        return self


class RingOffload(ReportModel):
    """Fields under ``setup.ring_offload``."""

    phase: PhaseLabel
    """When it ran: ``attach``."""
    status: Literal["executed", "noop"]
    """``executed``: the runtime runs the components; ``noop``: it was not applied, see ``noop_reason``."""
    noop_reason: Literal["no_cuda"] | None
    """``no_cuda``: the ring runs on a CUDA device and this process has none (the pipeline runs as loaded)."""
    detail: str
    """A sentence for people."""
    device: str
    """Where the ring and the components' resident weights are."""
    components: Annotated[tuple[RingComponent, ...], Strict(False)]
    """Each component, in the pipeline's order."""
    ring_bytes: Bytes
    """The ring's size on the device, allocated once."""
    lookahead: Count
    """How many units ahead of the running one are copied in."""
    resident_budget_bytes: Bytes
    """The policy's ``resident_bytes``: units' weights kept on the device after the first forward, chosen by the
    least compute per byte."""
    elapsed_seconds: Seconds
    """Planning, checking the sources, copying the resident weights and allocating the ring."""

    @model_validator(mode="after")
    def _coherent(self) -> RingOffload:
        if (self.status == "noop") != (self.noop_reason is not None):
            raise ValueError("noop_reason must be set exactly when status is 'noop'")
        if self.status == "noop" and (self.components or self.ring_bytes):
            raise ValueError("a runtime not applied has no components and no ring")
        return self


class RingOffloadSetup(ReportModel):
    """The ``setup`` section of a ring runtime report."""

    ring_offload: RingOffload
    """The runtime's fields."""


class RingOffloadReport(RouteReport):
    """The report of the ring runtime applied at attach (route ``ring_offload``)."""

    route: Literal["ring_offload"] = "ring_offload"
    """What produced the report."""
    setup: RingOffloadSetup
    """The report body."""

    @property
    def ring(self) -> RingOffload:
        """Shortcut for ``setup.ring_offload``."""
        return self.setup.ring_offload

    def summary(self) -> ReportSummary:
        """The runtime as a table row (action ``ring``)."""
        body = self.ring
        return ReportSummary(boundary=body.phase, action="ring", kind=body.status, reason=body.noop_reason,
                             detail=body.detail, elapsed_seconds=body.elapsed_seconds)  # fmt: skip
