"""The pinned host allocator's counters as a report holds them: one snapshot, and the pinning between two.

A report of the release core (:mod:`~ddo_hooks.reports.host_cache`), of a repack
(:mod:`~ddo_hooks.reports.repack`) and of ``release_done_components`` reads the allocator through these models;
:mod:`ddo_hooks.release.counters` makes them from the raw counters. A counter that could not be read is ``None``
in an ``unavailable`` snapshot, never zero.

Examples:
    >>> unavailable_snapshot("no CUDA host allocator").status
    'unavailable'
    >>> validate_active_counter(-1, 1024) is None  # a negative counter is never used
    True
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import StrictBool, StrictFloat, StrictInt, field_validator, model_validator

from ddo_hooks._diagnostics import show_repr
from ddo_hooks.reports.base import Bytes, PhaseLabel, ReportModel, Seconds

__all__ = ["AllocatorSnapshot", "PinningSince", "owned_delta", "unavailable_snapshot", "validate_active_counter"]


def validate_active_counter(reported: object, allocated: int | None) -> int | None:
    """Validate a reported active-bytes counter against the owned bytes, as the spec says.

    Args:
        reported: The active counter as the allocator reported it (any value, or ``None``).
        allocated: The owned (cached + live) bytes of the same snapshot, or ``None``.

    Returns:
        The counter when it is a non-negative integer no greater than ``allocated``;
        otherwise ``None`` (absent, negative, not an integer, or greater than owned).

    Examples:
        >>> validate_active_counter(1024, 4096)
        1024
        >>> validate_active_counter(3_904_897_030, 0) is None  # torch 2.11 after a release
        True
    """
    if allocated is None or isinstance(reported, bool) or not isinstance(reported, int):
        return None
    if reported < 0 or reported > allocated:
        return None
    return reported


class AllocatorSnapshot(ReportModel):
    """One reading of PyTorch's pinned host allocator counters (raw stats, no CUDA call)."""

    status: Literal["available", "unavailable"]
    """``available`` when the counters were read; ``unavailable`` otherwise (never zeros)."""
    unavailable_reason: str | None = None
    """Why the counters could not be read; ``None`` when available."""
    allocated_bytes: Bytes | None
    """Bytes of pinned blocks the allocator owns, cached and live (power-of-two rounded).

    Not native host storage and not total process memory."""
    reported_active_bytes: StrictInt | StrictFloat | None
    """The active (handed-out) counter exactly as reported; may be negative or too large."""
    active_bytes: Bytes | None
    """The validated active counter: ``None`` when absent, negative, non-integer or above owned."""
    active_counter_consistent: StrictBool
    """Whether ``active_bytes`` is usable; never use an inconsistent counter for decisions."""
    counter_layout: Literal["torch>=2.10", "torch2.7-2.9"] | None = None
    """Which key set the raw stats used (``allocated_bytes`` changed meaning in torch 2.10)."""
    pinned_blocks_total: Bytes | None = None
    """Blocks the allocator has pinned since the process started (``num_host_alloc``); ``None`` when not reported."""
    pinned_bytes_total: Bytes | None = None
    """Bytes the allocator has pinned since the process started (the owned counter's ``allocated``)."""
    pin_seconds_total: Seconds | None = None
    """Seconds the allocator has spent pinning since the process started (``host_alloc_time.total``)."""

    @field_validator("reported_active_bytes")
    @classmethod
    def _finite(cls, value: int | float | None) -> int | float | None:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("reported_active_bytes must be finite; store a non-finite counter as null")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> AllocatorSnapshot:
        if self.status == "unavailable":
            filled = [
                name
                for name in (
                    "allocated_bytes",
                    "reported_active_bytes",
                    "active_bytes",
                    "counter_layout",
                    "pinned_blocks_total",
                    "pinned_bytes_total",
                    "pin_seconds_total",
                )
                if getattr(self, name) is not None
            ]
            if filled or self.active_counter_consistent:
                raise ValueError(
                    f"an unavailable snapshot carries no counters, but {filled or ['active_counter_consistent']}"
                    " is set; set status='available' or clear those fields"
                )
            if not self.unavailable_reason:
                raise ValueError("an unavailable snapshot needs unavailable_reason saying why")
            return self
        allocated = self.allocated_bytes
        if allocated is None:
            raise ValueError("an available snapshot needs allocated_bytes")
        if self.unavailable_reason is not None:
            raise ValueError("unavailable_reason is only for status='unavailable'")
        expected = validate_active_counter(self.reported_active_bytes, allocated)
        if self.active_bytes != expected:
            raise ValueError(
                f"active_bytes must be {expected!r}: the validated value of reported_active_bytes="
                f"{show_repr(self.reported_active_bytes)} against allocated_bytes={show_repr(allocated)}"
            )
        if self.active_counter_consistent != (expected is not None):
            raise ValueError(
                f"active_counter_consistent must be {expected is not None} when active_bytes is {show_repr(expected)}"
            )
        return self


def owned_delta(before: AllocatorSnapshot | None, after: AllocatorSnapshot | None) -> int | None:
    """``before.allocated_bytes - after.allocated_bytes`` (positive: given back); ``None`` when either is unknown.

    Examples:
        >>> owned_delta(None, None) is None
        True
    """
    if before is None or after is None or before.allocated_bytes is None or after.allocated_bytes is None:
        return None
    return before.allocated_bytes - after.allocated_bytes


class PinningSince(ReportModel):
    """What pinning the allocator did between the previous boundary of the same attachment and this one.

    This is the cost a release passes on: a block given back must be pinned again at the next
    onload that needs it. Each figure is ``None`` where the counters could not be read (never 0).
    """

    since_phase: PhaseLabel
    """The previous boundary, whose ``after`` (or ``before``) snapshot is the starting point."""
    blocks: Bytes | None
    """Blocks pinned in between (``num_host_alloc``)."""
    bytes: Bytes | None
    """Bytes pinned in between."""
    seconds: Seconds | None
    """Seconds spent pinning in between (``host_alloc_time``)."""


def unavailable_snapshot(reason: str) -> AllocatorSnapshot:
    """A snapshot whose counters could not be read (never reported as zeros)."""
    return AllocatorSnapshot(
        status="unavailable",
        unavailable_reason=reason,
        allocated_bytes=None,
        reported_active_bytes=None,
        active_bytes=None,
        active_counter_consistent=False,
    )
