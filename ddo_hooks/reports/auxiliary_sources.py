"""Report models of the bounded auxiliary CPU source detachment (route ``auxiliary_cpu_source_detach``).

The report is one of ddo_hooks' shape, schema version 1, like every other: a frozen, strictly validated
model with ``schema_version``, ``route`` and a ``setup`` section, here
``setup.auxiliary_cpu_source_detach``. It records what was copied, what was skipped and why,
the ceiling, what each component's offload runtime reported, and host observations before and
after. It does not prove that the operating system got memory back: a loader storage is freed
only when nobody else holds a view into it.

Examples:
    >>> from ddo_hooks.reports.parse import parse_report
    >>> detach = AuxiliarySourceDetach(
    ...     status="noop", noop_reason="disabled", detail="disabled: nothing was inspected or copied",
    ...     max_copy_bytes=16 * 2**20, elapsed_seconds=0.0)
    >>> setup = AuxiliarySourceDetachSetup(auxiliary_cpu_source_detach=detach)
    >>> report = AuxiliarySourceDetachReport(setup=setup)
    >>> data = report.model_dump(mode="json")
    >>> data["route"], data["setup"]["auxiliary_cpu_source_detach"]["status"]
    ('auxiliary_cpu_source_detach', 'noop')
    >>> parse_report(data) == report
    True
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict, StrictBool, StrictInt, model_validator

from ddo_hooks.reports.base import (
    Bytes,
    HostObservation,
    Names,
    ReportModel,
    ReportSummary,
    RouteReport,
    Seconds,
    observed_summary,
)

__all__ = [
    "AuxiliarySourceDetach",
    "AuxiliarySourceDetachReport",
    "AuxiliarySourceDetachSetup",
    "ComponentSourceObservation",
    "DetachRefusalReason",
    "DetachSkipReason",
]

Count = Annotated[StrictInt, Field(ge=0)]
"""A number of things: a non-negative integer."""

DetachRefusalReason = Literal[
    "runtime_not_attached",
    "execution_started",
    "interval_observation_unsupported",
    "intervals_unavailable",
    "interval_count_mismatch",
    "observation_invalid",
    "unsupported_tensor",
    "partial_alias",
    "overlaps_retained_interval",
    "exceeds_ceiling",
]
"""Why a detachment was refused (nothing was changed):

* ``runtime_not_attached``: a component is not attached to its offload runtime.
* ``execution_started``: a forward already ran under the runtime.
* ``interval_observation_unsupported``: the runtime keeps native CPU sources and its adapter has
  no interval observation (an older adapter supports only the zero-CPU-source case).
* ``intervals_unavailable``: the runtime keeps native CPU sources and the adapter reports their
  intervals as unavailable.
* ``interval_count_mismatch``: the number of reported intervals differs from the native binding count.
* ``observation_invalid``: the adapter returned something that is not an observation.
* ``unsupported_tensor``: a registered tensor is a subclass (e.g. quantized), sparse, not on the CPU, ...
* ``partial_alias``: two registered tensors overlap without being the same view.
* ``overlaps_retained_interval``: a selected view overlaps a payload interval the runtime retains.
* ``exceeds_ceiling``: the selected views total more than ``max_copy_bytes``.
"""

DetachSkipReason = Literal["runtime_source", "pinned", "owns_storage"]
"""Why a registered CPU tensor was not selected:

* ``runtime_source``: it is exactly a payload interval the runtime retains as its own source.
* ``pinned``: it lives in pinned host memory, which is no loader view (a copy would unpin it).
* ``owns_storage``: it alone covers an ordinary, resizable PyTorch allocation, so it keeps nothing else alive.
"""


class ComponentSourceObservation(ReportModel):
    """What one component's offload runtime reported through its source-observation adapter."""

    component: str = Field(min_length=1)
    """The pipeline component, e.g. ``transformer``."""
    runtime: str = Field(min_length=1)
    """The offload runtime applied to it, e.g. ``diffusers_group_offload``."""
    adapter: str = Field(min_length=1)
    """The adapter's class, ``module.QualifiedName``."""
    attached: StrictBool
    """Whether the component is attached to the runtime."""
    execution_started: StrictBool | None = None
    """Whether a forward already ran under the runtime; ``None`` when not asked (refused before)."""
    native_binding_count: Count | None = None
    """How many CPU source tensors the runtime itself keeps; ``None`` when not asked."""
    interval_observation: Literal["reported", "unavailable", "unsupported"] | None = None
    """``reported``: the adapter listed every retained interval. ``unavailable``: it said it cannot.
    ``unsupported``: an older adapter without the observation. ``None`` when not asked."""
    retained_intervals: Count | None = None
    """How many retained CPU payload intervals were reported."""
    retained_bytes: Bytes | None = None
    """The bytes those intervals cover (overlapping intervals counted once each)."""

    @model_validator(mode="after")
    def _coherent(self) -> ComponentSourceObservation:
        reported = self.interval_observation == "reported"
        if reported != (self.retained_intervals is not None) or reported != (self.retained_bytes is not None):
            raise ValueError(
                "retained_intervals and retained_bytes are set exactly when interval_observation='reported'"
            )
        return self


class AuxiliarySourceDetach(ReportModel):
    """Fields under ``setup.auxiliary_cpu_source_detach``."""

    status: Literal["executed", "noop", "refused"]
    """``executed``: the selected views were copied. ``noop``: nothing was attempted (see
    ``noop_reason``). ``refused``: nothing was changed (see ``refusal_reason``)."""
    noop_reason: Literal["disabled"] | None = None
    """Why nothing was attempted; only with ``status='noop'``."""
    refusal_reason: DetachRefusalReason | None = None
    """The reason code of a refusal; only with ``status='refused'``."""
    detail: str = Field(min_length=1)
    """A sentence saying what happened, for people."""
    offending: Names = ()
    """The components or tensors (``component.qualified.name``) a refusal is about."""
    max_copy_bytes: Bytes
    """The copy ceiling: the selected views may total at most this many bytes."""
    selected_tensors: Count | None = None
    """Registered tensor objects selected for copying; ``None`` when refused before selecting."""
    selected_bytes: Bytes | None = None
    """Bytes the selected views need (exact aliases counted once); ``None`` when refused before selecting."""
    copied_tensors: Count = 0
    """Registered tensor objects now backed by storage of their own."""
    copied_bytes: Bytes = 0
    """Bytes copied into new storage (exact aliases share one copy)."""
    alias_groups: Count = 0
    """Copied storages shared by more than one registered tensor (tied weights kept tied)."""
    skipped_tensors: dict[DetachSkipReason, Count] = Field(default_factory=dict)
    """Registered CPU tensors not selected, by reason."""
    skipped_bytes: dict[DetachSkipReason, Bytes] = Field(default_factory=dict)
    """Bytes of the tensors not selected, by reason."""
    components: Annotated[tuple[ComponentSourceObservation, ...], Strict(False)] = ()
    """What each component's runtime adapter reported, in order."""
    elapsed_seconds: Seconds
    """Inspection, copying and host observations; not compute time."""
    host_before: HostObservation | None = None
    """Host memory before copying (executed only)."""
    host_after: HostObservation | None = None
    """Host memory after copying (executed only); a snapshot, not proof of OS commit recovery."""

    @model_validator(mode="after")
    def _coherent(self) -> AuxiliarySourceDetach:
        status = self.status
        if (self.noop_reason is not None) != (status == "noop"):
            raise ValueError("noop_reason is set exactly when status is 'noop'")
        if (self.refusal_reason is not None) != (status == "refused"):
            raise ValueError("refusal_reason is set exactly when status is 'refused'")
        if status != "refused" and self.offending:
            raise ValueError("offending names only go with status 'refused'")
        if set(self.skipped_tensors) != set(self.skipped_bytes):
            raise ValueError("skipped_tensors and skipped_bytes must name the same reasons")
        observed = self.host_before is not None and self.host_after is not None
        if status == "executed":
            if not observed:
                raise ValueError("an executed detachment needs host_before and host_after")
            if (self.copied_tensors, self.copied_bytes) != (self.selected_tensors, self.selected_bytes):
                raise ValueError("an executed detachment copies exactly the selected tensors and bytes")
            if self.copied_bytes > self.max_copy_bytes:
                raise ValueError("copied_bytes may not exceed max_copy_bytes")
            if self.alias_groups > self.copied_tensors:
                raise ValueError("alias_groups cannot exceed copied_tensors")
            return self
        if self.copied_tensors or self.copied_bytes or self.alias_groups:
            raise ValueError(f"a {status} detachment copies nothing: copied_* and alias_groups must be 0")
        if self.host_before is not None or self.host_after is not None:
            raise ValueError(f"a {status} detachment observes no host memory; leave host_before/host_after null")
        if self.refusal_reason == "exceeds_ceiling" and not (
            self.selected_bytes is not None and self.selected_bytes > self.max_copy_bytes
        ):
            raise ValueError("an exceeds_ceiling refusal needs selected_bytes greater than max_copy_bytes")
        return self


class AuxiliarySourceDetachSetup(ReportModel):
    """The ``setup`` section of an auxiliary source detachment report."""

    auxiliary_cpu_source_detach: AuxiliarySourceDetach
    """The detachment's fields."""


class AuxiliarySourceDetachReport(RouteReport):
    """The report of one auxiliary CPU source detachment (route ``auxiliary_cpu_source_detach``)."""

    route: Literal["auxiliary_cpu_source_detach"] = "auxiliary_cpu_source_detach"
    """What produced the report."""
    setup: AuxiliarySourceDetachSetup
    """The report body."""

    @property
    def detach(self) -> AuxiliarySourceDetach:
        """Shortcut for ``setup.auxiliary_cpu_source_detach``."""
        return self.setup.auxiliary_cpu_source_detach

    def summary(self) -> ReportSummary:
        """The detachment as a table row (no boundary of its own): status, reason, RSS before and after."""
        d = self.detach
        return observed_summary(d, boundary="", action=self.route, reason=d.noop_reason or d.refusal_reason)
