"""DDO's report of a component placed on diffusers' group offloading (route ``diffusers_group_offload``).

From DDO 0.1.0rc2's ``enable_offload`` (route ``diffusers_group_offload``) and
``DynamicOffloadApplyResult.metrics_snapshot``: ``configuration`` is the resolved settings
(:mod:`~ddo_hooks.reports.ddo.group_config`), ``setup`` the arguments passed to diffusers'
``apply_group_offloading`` (``enable_diffusers_group_offload``'s event payload), and ``runtime``
``{}`` (this route has no DDO hook), or ``{"execution_timing": ...}`` when the snapshot was
taken with an execution timer (``DynamicOffloadExecutionTimer.snapshot``). Group offloading
pins CPU copies of the weights (with ``use_stream``): this is the route whose pinned host
memory a release gives back.

Examples:
    >>> setup = DDOGroupOffloadSetup.model_validate(
    ...     {"offload_type": "block_level", "use_stream": True, "record_stream": False,
    ...      "low_cpu_mem_usage": True})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for DDOGroupOffloadSetup
    ...
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict, StrictBool, StrictInt, model_validator

from ddo_hooks.reports.base import Count, ReportModel, ReportSummary, Seconds
from ddo_hooks.reports.ddo.base import AlwaysFalse, AlwaysTrue, DDOModel, DDORouteReport, One, omittable
from ddo_hooks.reports.ddo.group_config import DDOGroupOffloadConfiguration

__all__ = [
    "DDODiagnosticStepWait",
    "DDOExecutionTiming",
    "DDOGroupOffloadReport",
    "DDOGroupOffloadRuntime",
    "DDOGroupOffloadSetup",
    "DDOQuantizedBackend",
]


class DDOQuantizedBackend(DDOModel):
    """SDNQ-quantized modules DDO found in the component (their own forward is kept)."""

    sdnq_module_count: Annotated[StrictInt, Field(ge=1)]
    """How many modules are SDNQ-quantized."""
    sdnq_status: Literal["detected_forward_preserved"]
    """Always ``detected_forward_preserved``."""


class DDOGroupOffloadSetup(DDOModel):
    """The ``setup`` of DDO's group-offload report: what ``apply_group_offloading`` was given."""

    offload_type: Literal["leaf_level", "block_level"]
    """diffusers' offload granularity."""
    use_stream: StrictBool
    """Whether onloads overlap compute on a CUDA stream (this pins the CPU copies)."""
    record_stream: StrictBool
    """Whether tensors are recorded on the stream."""
    low_cpu_mem_usage: StrictBool
    """Whether pinned copies are made at onload instead of ahead."""
    num_blocks_per_group: Annotated[StrictInt, Field(ge=1)] | None = omittable()
    """Blocks per group; written only for ``block_level``."""
    quantized_backend: DDOQuantizedBackend | None = omittable()
    """Written when the component has SDNQ-quantized modules."""

    @model_validator(mode="after")
    def _blocks(self) -> DDOGroupOffloadSetup:
        if (self.offload_type == "block_level") != (self.num_blocks_per_group is not None):
            raise ValueError("num_blocks_per_group is written exactly for offload_type 'block_level'")
        return self


class DDODiagnosticStepWait(DDOModel):
    """The explicit per-step wait of a diagnostic timer (it disqualifies the run as a benchmark)."""

    enabled: AlwaysTrue
    """Always true when written."""
    scope: Literal["compute_boundary_event_host_wait"]
    """What was waited for."""
    calls: Count
    """Waits made."""
    host_seconds: Seconds
    """Host time spent waiting."""
    benchmark_eligible: AlwaysFalse
    """Always false."""


_COMPLETE = ("stream", "phase_seconds", "step_seconds", "tail_seconds", "steady_state_seconds_per_step")


class DDOExecutionTiming(DDOModel):
    """CUDA-event timing of one run on the compute stream (``DynamicOffloadExecutionTimer.snapshot``)."""

    schema_version: One
    """The timing's schema version, 1."""
    clock: Literal["cuda_event"]
    """CUDA events."""
    unit: Literal["seconds"]
    """Seconds."""
    scope: Literal["compute_stream_with_dependencies"]
    """Compute-stream intervals, dependencies and launch gaps included."""
    failed: StrictBool
    """Whether the timed block raised."""
    diagnostic_step_wait: DDODiagnosticStepWait | None = omittable()
    """Written when the timer waited at each step."""
    status: Literal["disabled", "not_finished", "pending", "complete"]
    """``disabled`` (no events), ``not_finished`` (the block has not exited), ``pending`` (the
    last event has not completed), ``complete``."""
    step_count: Count | None = omittable()
    """Steps marked (``pending`` only)."""
    stream: Annotated[StrictInt, Field(ge=0)] | None = omittable()
    """The CUDA stream handle (``complete`` only)."""
    phase_seconds: Seconds | None = omittable()
    """From the first event to the end (``complete`` only)."""
    step_seconds: Annotated[tuple[Seconds, ...], Strict(False)] | None = omittable()
    """Each step's interval (``complete`` only)."""
    tail_seconds: Seconds | None = omittable()
    """From the last step to the end (``complete`` only)."""
    steady_state_seconds_per_step: Seconds | None = None
    """The mean of the steps after the first; null with fewer than two steps (``complete`` only)."""

    @model_validator(mode="after")
    def _by_status(self) -> DDOExecutionTiming:
        complete, pending = self.given(*_COMPLETE), self.given("step_count")
        if self.status == "complete":
            if len(complete) < len(_COMPLETE) or pending:
                raise ValueError(f"a complete timing has {', '.join(_COMPLETE)} and no step_count")
            steady_expected = len(self.step_seconds or []) > 1
            if (self.steady_state_seconds_per_step is not None) != steady_expected:
                raise ValueError("steady_state_seconds_per_step is null exactly when there are fewer than two steps")
        elif complete or (pending and self.status != "pending") or (self.status == "pending" and not pending):
            raise ValueError(f"a {self.status!r} timing has only step_count when pending, and no complete figures")
        if self.diagnostic_step_wait is not None and self.status == "disabled":
            raise ValueError("a diagnostic step wait needs enabled timing")
        return self


class DDOGroupOffloadRuntime(DDOModel):
    """The ``runtime`` of DDO's group-offload report: ``{}``, or the execution timing attached."""

    execution_timing: DDOExecutionTiming | None = omittable()
    """The timer's snapshot, when the host attached one."""


class DDOGroupOffloadReport(DDORouteReport):
    """DDO's report of a component on diffusers' group offloading (route ``diffusers_group_offload``)."""

    route: Literal["diffusers_group_offload"]
    """What produced the report."""
    configuration: DDOGroupOffloadConfiguration
    """DDO's resolved settings."""
    setup: DDOGroupOffloadSetup
    """What diffusers was given."""
    runtime: DDOGroupOffloadRuntime
    """``{}`` or the execution timing."""

    @property
    def body(self) -> ReportModel:
        """The ``setup`` itself: this route writes its fields straight under it."""
        return self.setup

    def summary(self) -> ReportSummary:
        """The placement as a table row (a setup, not a boundary: no phase)."""
        s = self.setup
        blocks = "" if s.num_blocks_per_group is None else f" x{s.num_blocks_per_group}"
        stream = "stream" if s.use_stream else "no stream"
        return ReportSummary(
            boundary="",
            action="ddo.group_offload",
            kind="executed",
            reason=None,
            detail=f"DDO placed the component on diffusers group offload: {s.offload_type}{blocks}, {stream}",
        )
