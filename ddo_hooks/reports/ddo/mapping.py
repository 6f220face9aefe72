"""DDO's release report in ddo_hooks' terms: the status and field correspondence, and the conversions it allows.

DDO's ``pytorch_host_cache_release`` and ddo_hooks' share a route name and a purpose, not a
shape. :data:`DDO_RELEASE_STATUSES` maps DDO's status to ddo_hooks' ``status`` and
``noop_reason``; :data:`DDO_RELEASE_FIELDS` pairs every field of both (``None`` on the side that
has no counterpart, with the reason). ``docs/with-ddo.md`` renders both tables from here.

The conversions are exact where DDO says enough, and say so where it does not:

* :func:`from_ddo_allocator_snapshot`: always (DDO reads the same two counters with the same rule);
* :func:`from_ddo_host_snapshot`: when the operating system is known (DDO's snapshot shows it
  only on Windows; pass ``platform`` otherwise);
* :func:`from_ddo_release`: a DDO release that did nothing becomes ddo_hooks' no-op report (given
  the torch version, which DDO does not record); a ``released`` one gives ``None``, because an
  executed ddo_hooks report states what DDO does not measure (the split of the elapsed time, the
  entry point, the device synchronized, the garbage collected).

Examples:
    >>> release = {"phase": "before_vae", "status": "unsupported", "released": False,
    ...            "elapsed_seconds": 2e-06}
    >>> data = {"schema_version": 1, "route": "pytorch_host_cache_release",
    ...         "configuration": {"enabled": True}, "setup": {"host_cache_release": release},
    ...         "runtime": {}}
    >>> ours = from_ddo_release(data, torch_version="2.11.0")
    >>> ours.release.status, ours.release.noop_reason
    ('noop', 'unsupported_build')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ddo_hooks.boundaries import PHASE_PATTERN
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.reports.allocator import AllocatorSnapshot, unavailable_snapshot
from ddo_hooks.reports.base import HostObservation
from ddo_hooks.reports.ddo.base import DDOHostSnapshot
from ddo_hooks.reports.ddo.host import DDOAllocatorSnapshot, DDOHostCacheReleaseReport, DDOReleaseStatus
from ddo_hooks.reports.host_cache import HostCacheReleaseReport, NoopReason, noop_release

__all__ = [
    "DDO_RELEASE_FIELDS",
    "DDO_RELEASE_STATUSES",
    "UNMATCHED_NOOP_REASONS",
    "FieldPair",
    "from_ddo_allocator_snapshot",
    "from_ddo_host_snapshot",
    "from_ddo_release",
]

DDO_RELEASE_STATUSES: Mapping[DDOReleaseStatus, tuple[Literal["executed", "noop"], NoopReason | None, str]] = {
    "disabled": ("noop", "disabled", "Both: the caller passed `enabled=False`."),
    "cuda_not_initialized": (
        "noop",
        "cuda_not_initialized",
        "DDO asks only `torch.cuda.is_initialized()`; ddo_hooks also reads the allocator's counters, so where "
        "memory was pinned without a CUDA tensor it says `lazy_init_required` or releases, and in a forked child "
        "`forked_child`: DDO says `cuda_not_initialized` for all of these.",
    ),
    "unsupported": (
        "noop",
        "unsupported_build",
        "DDO looks only for `torch._C._accelerator_emptyHostCache` (torch >= 2.12); ddo_hooks also uses "
        "`torch._C._host_emptyCache` (torch >= 2.5), so on torch 2.5-2.11 ddo_hooks releases where DDO says "
        "`unsupported`.",
    ),
    "released": (
        "executed",
        None,
        "Both: the release call returned. Neither proves that bytes went back to the operating system.",
    ),
}
"""DDO's release status → (ddo_hooks' ``status``, ``noop_reason``, the note on how far they agree)."""

UNMATCHED_NOOP_REASONS: Mapping[NoopReason, str] = {
    "forked_child": "DDO says `cuda_not_initialized` (torch reports CUDA uninitialized in a forked child).",
    "lazy_init_required": "DDO says `cuda_not_initialized` (it does not read the allocator's counters).",
    "below_threshold": "No answer: DDO has no `min_releasable_bytes`.",
    "not_triggered": "No answer: DDO has no policy; its caller decides when to call.",
}
"""ddo_hooks' no-op reasons that no DDO status gives, and what DDO says in their place."""


@dataclass(frozen=True)
class FieldPair:
    """A row of the field correspondence: a DDO key path and a ddo_hooks one, or ``None`` on the side without one.

    Attributes:
        ddo: The key in DDO's report (under ``setup.host_cache_release`` unless it starts at the top).
        ours: The key in ddo_hooks' report (under ``setup.host_cache_release`` likewise).
        note: How the values correspond, or why there is no counterpart.
    """

    ddo: str | None
    ours: str | None
    note: str


_H = "host_before/host_after"
_S = "before/after"
DDO_RELEASE_FIELDS: tuple[FieldPair, ...] = (
    FieldPair(
        "schema_version", "schema_version", "Both 1; the shapes still differ (the top-level keys tell them apart)."
    ),
    FieldPair("route", "route", "The same name, `pytorch_host_cache_release`."),
    FieldPair(
        "configuration.enabled", None, "No counterpart: ddo_hooks writes a disabled call as `noop_reason` `disabled`."
    ),
    FieldPair("runtime", None, "No counterpart: always `{}` on this route."),
    FieldPair(
        "phase",
        "phase",
        f'The same; ddo_hooks requires a phase label (`{PHASE_PATTERN}`), DDO any string (`""` by default).',
    ),
    FieldPair("status", "status, noop_reason", "See the status table."),
    FieldPair("released", "released", "The same: true exactly when the release call returned."),
    FieldPair(_S, _S, "Allocator counters, only when released (ddo_hooks: null when not executed)."),
    FieldPair(
        f"{_S}.status", f"{_S}.status", "The same: `available` when `allocated_bytes` is a non-negative integer."
    ),
    FieldPair(
        f"{_S}.error",
        f"{_S}.unavailable_reason",
        'The exception\'s text; a bare `{"status": "unavailable"}` means torch has no `host_memory_stats`.',
    ),
    FieldPair(f"{_S}.allocated_bytes", f"{_S}.allocated_bytes", "The same counter (`allocated_bytes.current`)."),
    FieldPair(
        f"{_S}.reported_active_bytes",
        f"{_S}.reported_active_bytes",
        "The same raw counter (`active_bytes.current`); ddo_hooks writes null when unavailable.",
    ),
    FieldPair(f"{_S}.active_bytes", f"{_S}.active_bytes", "The same rule: the counter when 0 <= active <= allocated."),
    FieldPair(f"{_S}.active_counter_consistent", f"{_S}.active_counter_consistent", "The same."),
    FieldPair(None, f"{_S}.counter_layout", "No answer: DDO reads one key set (`allocated_bytes.current`)."),
    FieldPair(
        None,
        f"{_S}.pinned_blocks_total, pinned_bytes_total, pin_seconds_total",
        "No answer: DDO does not read the pinning totals.",
    ),
    FieldPair(_H, _H, "Host memory, only when released."),
    FieldPair(f"{_H}.process_rss_bytes", f"{_H}.rss_bytes", "The same (psutil RSS)."),
    FieldPair(f"{_H}.process_private_bytes", f"{_H}.private_bytes", "The same (Windows)."),
    FieldPair(
        f"{_H}.available_physical_bytes", f"{_H}.physical_available_bytes", "The same (Windows, `ullAvailPhys`)."
    ),
    FieldPair(
        f"{_H}.available_process_commit_bytes",
        f"{_H}.commit_available_bytes",
        "The same (Windows, `ullAvailPageFile`).",
    ),
    FieldPair(f"{_H}.process_observation_error", f"{_H}.unavailable.rss_bytes", "Why psutil failed."),
    FieldPair(
        f"{_H}.system_observation_error",
        f"{_H}.unavailable.physical_available_bytes, commit_available_bytes",
        "Why `GlobalMemoryStatusEx` failed.",
    ),
    FieldPair(None, f"{_H}.platform", "No answer: DDO does not say; only its Windows keys show Windows."),
    FieldPair(None, f"{_H}.rss_anon_bytes, rss_file_bytes, rss_shmem_bytes", "No answer: DDO does not split the RSS."),
    FieldPair(None, f"{_H}.cgroup_memory_bytes, cgroup_limit_bytes", "No answer: DDO does not read the cgroup."),
    FieldPair(
        "allocator_bytes_delta",
        "allocator_bytes_delta",
        "The same: before minus after `allocated_bytes`, null when either is.",
    ),
    FieldPair(
        "elapsed_seconds", "elapsed_seconds", "The whole call in both (garbage collection and synchronize included)."
    ),
    FieldPair(None, "detail", "No answer: DDO writes no sentence."),
    FieldPair(None, "timings", "No answer: DDO does not split its elapsed time."),
    FieldPair(
        None,
        "device, synchronized",
        "No answer: DDO synchronizes its `device` argument when released but does not record it.",
    ),
    FieldPair(None, "entry_point", "Implied: `torch._C._accelerator_emptyHostCache`, the only one DDO calls."),
    FieldPair(None, "torch_version", "No answer: DDO does not record it."),
    FieldPair(None, "collection", "No answer: DDO runs a full `gc.collect()` when it releases but keeps no count."),
    FieldPair(None, "threshold", "No answer: DDO has no `min_releasable_bytes`."),
    FieldPair(None, "pinned_since_previous", "No answer: DDO does not keep the previous boundary's counters."),
    FieldPair(None, "pinned_allocation", "No answer: DDO does not read `PYTORCH_CUDA_ALLOC_CONF`."),
)
"""Every field of DDO's release report and of ddo_hooks', paired; ``None`` where one side has no counterpart."""

_PHASE = re.compile(PHASE_PATTERN)
_NOOP_DETAIL: Mapping[str, str] = {
    "disabled": "release disabled (enabled=False), as DDO reported it",
    "cuda_not_initialized": "DDO found CUDA not initialized in this process (torch.cuda.is_initialized() is false)",
    "unsupported": "DDO found no torch._C._accelerator_emptyHostCache in this torch",
}


def from_ddo_allocator_snapshot(snapshot: DDOAllocatorSnapshot) -> AllocatorSnapshot:
    """DDO's allocator snapshot as ddo_hooks' (same counters, same rule; the totals ddo_hooks adds are unknown).

    Examples:
        >>> from_ddo_allocator_snapshot(DDOAllocatorSnapshot(status="unavailable")).unavailable_reason
        'torch.cuda.host_memory_stats is missing (as DDO reported it)'
    """
    if snapshot.status == "available":
        return AllocatorSnapshot(
            status="available",
            allocated_bytes=snapshot.allocated_bytes,
            reported_active_bytes=snapshot.reported_active_bytes,
            active_bytes=snapshot.active_bytes,
            active_counter_consistent=bool(snapshot.active_counter_consistent),
        )
    if snapshot.error is not None:
        reason = snapshot.error or "reading torch.cuda.host_memory_stats raised (as DDO reported it)"
    elif snapshot.given("allocated_bytes"):
        reason = "allocated_bytes.current was not a non-negative integer (as DDO reported it)"
    else:
        reason = "torch.cuda.host_memory_stats is missing (as DDO reported it)"
    return unavailable_snapshot(reason)


def from_ddo_host_snapshot(
    snapshot: DDOHostSnapshot, *, platform: Literal["linux", "windows", "darwin", "other"] | None = None
) -> HostObservation | None:
    """DDO's host snapshot as ddo_hooks' :class:`~ddo_hooks.reports.base.HostObservation`.

    Args:
        snapshot: DDO's snapshot.
        platform: The operating system it was made on, when the caller knows it; a snapshot with a
            Windows-only key is Windows whatever is passed.

    Returns:
        The observation; ``None`` when the platform is neither shown by the snapshot nor given.

    Examples:
        >>> from_ddo_host_snapshot(DDOHostSnapshot(process_rss_bytes=1 << 30)) is None
        True
        >>> from_ddo_host_snapshot(DDOHostSnapshot(process_rss_bytes=1 << 30), platform="linux").rss_bytes
        1073741824
    """
    platform = snapshot.platform or platform
    if platform is None:
        return None
    unavailable: dict[str, str] = {}
    if snapshot.process_observation_error is not None:
        missing = "private_bytes" if snapshot.process_rss_bytes is not None else "rss_bytes"
        unavailable[missing] = snapshot.process_observation_error
    if snapshot.system_observation_error is not None:
        unavailable["physical_available_bytes"] = unavailable["commit_available_bytes"] = (
            snapshot.system_observation_error
        )
    return HostObservation(
        platform=platform,
        rss_bytes=snapshot.process_rss_bytes,
        private_bytes=snapshot.process_private_bytes,
        physical_available_bytes=snapshot.available_physical_bytes,
        commit_available_bytes=snapshot.available_process_commit_bytes,
        unavailable=unavailable,
    )


def from_ddo_release(report: Any, *, torch_version: str) -> HostCacheReleaseReport | None:
    """DDO's release report as ddo_hooks' report of the same route, where DDO's says all that ddo_hooks' states.

    Args:
        report: DDO's release report: a :class:`~ddo_hooks.reports.ddo.host.DDOHostCacheReleaseReport`,
            its payload (a mapping or JSON text), or DDO's ``DynamicOffloadMetrics`` itself.
        torch_version: ``torch.__version__`` of the process that made it (DDO does not record it).

    Returns:
        ddo_hooks' no-op report (status from :data:`DDO_RELEASE_STATUSES`; nothing timed, nothing
        synchronized, no snapshots, as DDO did none of these) for ``disabled``,
        ``cuda_not_initialized`` and ``unsupported``. ``None`` for ``released`` (ddo_hooks'
        executed report needs the split of the elapsed time, the device, the entry point and the
        garbage collected, which DDO does not record), and for a phase that is not a ddo_hooks
        phase label (DDO's default ``""``).

    Raises:
        ReportError: ``report`` is not a valid report.
        InvalidArgumentError: It is another route, or ddo_hooks' own shape.
    """
    if not isinstance(report, DDOHostCacheReleaseReport):
        from ddo_hooks.reports.parse import parse_report  # the parser imports this family, not this module

        parsed = parse_report(report)
        if not isinstance(parsed, DDOHostCacheReleaseReport):
            raise InvalidArgumentError(
                f"from_ddo_release reads DDO's release report (route pytorch_host_cache_release, DDO's shape), "
                f"got {type(parsed).__name__}"
            )
        report = parsed
    ddo = report.release
    status, reason, _ = DDO_RELEASE_STATUSES[ddo.status]
    if status == "executed" or reason is None or not _PHASE.fullmatch(ddo.phase):
        return None
    detail, elapsed = _NOOP_DETAIL[ddo.status], ddo.elapsed_seconds
    return noop_release(ddo.phase, reason, detail, device=None, torch_version=torch_version, elapsed_seconds=elapsed)
