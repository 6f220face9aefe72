"""Turn the pinned host allocator's raw counters into an :class:`AllocatorSnapshot`.

The raw stats changed meaning in torch 2.10 (measured on the GPU machine; the report reference's
"Torch-version caveats of the counters" says more):

- torch 2.7 to 2.9: the owned bytes (cached and live) are ``reserved_bytes``, the bytes handed out
  ("active") ``allocated_bytes``;
- torch 2.10 and later: the owned bytes are ``allocated_bytes``, the bytes handed out ``active_bytes``.

Owned bytes are trusted. The active counter is wrong before torch 2.13 (it only grows on
2.10-2.12, and drifts by a byte per event-drained free on 2.7-2.12), so it is kept as
reported and validated separately: it is usable only when it is a non-negative integer no
greater than the owned bytes.

Examples:
    >>> raw = {"allocated_bytes": {"current": 0}, "active_bytes": {"current": 3_904_897_030}}
    >>> snap = snapshot_from_raw(raw)
    >>> snap.allocated_bytes, snap.reported_active_bytes
    (0, 3904897030)
    >>> snap.active_bytes, snap.active_counter_consistent
    (None, False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from ddo_hooks.reports.allocator import AllocatorSnapshot, PinningSince, unavailable_snapshot, validate_active_counter

__all__ = ["pinning_between", "read_snapshot", "snapshot_from_raw", "unavailable_snapshot"]


def read_snapshot(read: Any) -> AllocatorSnapshot:
    """A snapshot of what ``read()`` returns (a backend's ``raw_host_stats``); a failed read is unavailable."""
    try:
        return snapshot_from_raw(read())
    except Exception as e:  # counters are observations: a failed read is unavailable, never zero
        return unavailable_snapshot(f"reading the host allocator stats raised {type(e).__name__}: {e}")


def _current(raw: Mapping[str, Any], key: str) -> Any:
    """``raw[key]["current"]`` (nested layout) or ``raw[key + ".current"]`` (flat layout)."""
    return _field(raw, key, "current")


def _has(raw: Mapping[str, Any], key: str) -> bool:
    return key in raw or f"{key}.current" in raw


def snapshot_from_raw(raw: Mapping[str, Any] | None) -> AllocatorSnapshot:
    """Normalize raw host-allocator stats of any supported torch into a snapshot.

    Args:
        raw: What ``torch._C._cuda_hostMemoryStats()`` returned, or ``None`` when this
            torch cannot read the counters.

    Returns:
        An available snapshot, or an unavailable one that says why.
    """
    if raw is None:
        return unavailable_snapshot("this torch cannot read the host allocator counters (torch >= 2.7 can)")
    layout: Literal["torch>=2.10", "torch2.7-2.9"]
    if _has(raw, "active_bytes"):
        layout, owned_key, active_key = "torch>=2.10", "allocated_bytes", "active_bytes"
    elif _has(raw, "reserved_bytes"):
        layout, owned_key, active_key = "torch2.7-2.9", "reserved_bytes", "allocated_bytes"
    else:
        return unavailable_snapshot(f"unrecognized host allocator stats keys: {sorted(raw)[:8]}")
    owned = _current(raw, owned_key)
    if isinstance(owned, bool) or not isinstance(owned, int) or owned < 0:
        return unavailable_snapshot(f"host allocator reported {owned_key}.current={owned!r}, not a byte count")
    reported = _current(raw, active_key)
    if (
        isinstance(reported, bool)
        or not isinstance(reported, (int, float))
        or (isinstance(reported, float) and not math.isfinite(reported))
    ):
        reported = None
    active = validate_active_counter(reported, owned)
    micros = _field(raw, "host_alloc_time", "total")
    return AllocatorSnapshot(
        status="available",
        allocated_bytes=owned,
        reported_active_bytes=reported,
        active_bytes=active,
        active_counter_consistent=active is not None,
        counter_layout=layout,
        pinned_blocks_total=_count(raw.get("num_host_alloc")),
        pinned_bytes_total=_count(_field(raw, owned_key, "allocated")),
        pin_seconds_total=_seconds(micros),
    )


def _field(raw: Mapping[str, Any], key: str, field: str) -> Any:
    """``raw[key][field]`` (nested layout) or ``raw[key + "." + field]`` (flat layout)."""
    value = raw.get(key)
    return value.get(field) if isinstance(value, Mapping) else raw.get(f"{key}.{field}")


def _seconds(micros: Any) -> float | None:
    """Microseconds as seconds, or ``None`` when not a finite non-negative number."""
    if isinstance(micros, bool) or not isinstance(micros, (int, float)) or not math.isfinite(micros) or micros < 0:
        return None
    return micros / 1e6


def pinning_between(since_phase: str, start: AllocatorSnapshot, end: AllocatorSnapshot) -> PinningSince:
    """What the allocator pinned between two snapshots; a figure either lacks (or that went down) is ``None``.

    Examples:
        >>> raw = {"allocated_bytes": {"current": 0, "allocated": 4096}, "active_bytes": {"current": 0},
        ...        "num_host_alloc": 1, "host_alloc_time": {"total": 500}}
        >>> later = {**raw, "allocated_bytes": {"current": 0, "allocated": 12288}, "num_host_alloc": 3,
        ...          "host_alloc_time": {"total": 2500}}
        >>> pinning_between("before_vae", snapshot_from_raw(raw), snapshot_from_raw(later))
        PinningSince(since_phase='before_vae', blocks=2, bytes=8192, seconds=0.002)
    """

    def change(name: str) -> Any:
        a, b = getattr(start, name), getattr(end, name)
        return None if a is None or b is None or b < a else b - a

    return PinningSince(
        since_phase=since_phase,
        blocks=change("pinned_blocks_total"),
        bytes=change("pinned_bytes_total"),
        seconds=change("pin_seconds_total"),
    )


def _count(value: Any) -> int | None:
    """A non-negative integer counter, or ``None`` (absent or not a count: never read as 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
