"""What a report shows in a table: one :class:`BoundaryRow` per report, and the calls of records without envelopes.

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache as release
    >>> (row,) = boundary_rows([("host_cache_after_call", release(phase="after_call"))])
    >>> row.call, row.boundary, row.status
    (1, 'after_call', 'no-op: disabled')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ddo_hooks.actions.host_cache_release import NAME as HOST_CACHE_RELEASE
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.cli.cells import ATTACH_CALL

__all__ = ["BoundaryRow", "boundary_rows", "infer_calls", "numbered", "row_of"]


@dataclass(slots=True)
class BoundaryRow:
    """One report, as a table row (what ``summarize`` keeps of each record: a few hundred bytes).

    Read-only by convention, not frozen: ``summarize`` makes one per record, and a frozen
    dataclass sets each of its 15 fields through ``object.__setattr__``, which makes a row six times
    as costly to make.

    Attributes:
        call: The pipeline call it belongs to, from 1; :data:`~ddo_hooks.cli.cells.ATTACH_CALL` (0) for
            what attach did before the first call.
        boundary: ``before_transformer``, ``before_vae``, ``after_call`` (or another phase label).
        action: The action that produced it (``host_cache_release``, ...).
        kind: ``executed``, ``noop`` or ``refused``.
        reason: The no-op or refusal reason code; ``None`` when executed (or for a user action).
        detail: The report's sentence for people.
        owned_before: Pinned bytes the allocator owned before, when read.
        owned_after: Pinned bytes the allocator owned after, when read.
        delta: ``allocator_bytes_delta`` (before minus after), when known.
        rss_before: Process RSS before, when observed.
        rss_after: Process RSS after, when observed.
        elapsed_seconds: Time the boundary took; ``None`` for refusals and user actions.
        repinned_bytes: Bytes pinned since the previous boundary (``pinned_since_previous``), when counted.
        repin_seconds: Seconds spent pinning them, when counted.
        memory_after: Which memory the process held after it (Linux): ``rss``, ``anon``, ``file``,
            ``shmem`` (where pinned memory shows) and ``cgroup`` bytes, those observed.
    """

    call: int
    boundary: str
    action: str
    kind: str
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
    memory_after: dict[str, int] | None = None

    @property
    def label(self) -> str:
        """The boundary, with the action's name when it is not ``host_cache_release``."""
        return self.boundary if self.action == HOST_CACHE_RELEASE else f"{self.boundary}/{self.action}"

    @property
    def status(self) -> str:
        """``executed``, ``no-op: <reason>`` or ``refused: <reason>``."""
        if self.kind == "executed":
            return "executed"
        word = "no-op" if self.kind == "noop" else "refused"
        return f"{word}: {self.reason}" if self.reason else word


def _where(component: str | None, report: Any, summary: Any) -> tuple[str, str]:
    """The boundary (or phase) a report belongs to, and the action that produced it."""
    return summary.boundary or component or report.route, summary.action


def infer_calls(records: Sequence[tuple[str | None, Any]]) -> list[int]:
    """Number the pipeline calls of saved records (reports do not carry their call).

    A new call starts when a boundary comes earlier in the call than the one before it, or
    when the same action reports at the same boundary again. What attach recorded before the
    first call (its boundary is ``attach``) is on no call: :data:`~ddo_hooks.cli.cells.ATTACH_CALL`.

    Examples:
        >>> from ddo_hooks import release_pytorch_host_cache
        >>> phases = ("before_vae", "after_call", "before_vae")
        >>> reports = [release_pytorch_host_cache(phase=p) for p in phases]
        >>> infer_calls([("c", r) for r in reports])
        [1, 1, 2]
    """
    return _number_calls([_where(component, report, report.summary()) for component, report in records])


def _number_calls(keys: Sequence[tuple[str, str]]) -> list[int]:
    calls: list[int] = []
    seen: set[tuple[str, str]] = set()
    call, last = 1, -1
    started = False  # a call's record came
    for key in keys:
        if key[0] == "attach" and not started:  # what attach did, before the first call
            calls.append(ATTACH_CALL)
            continue
        order = BOUNDARIES.index(key[0]) if key[0] in BOUNDARIES else last
        if started and (order < last or key in seen):
            call, seen = call + 1, set()
        seen.add(key)
        last, started = order, True
        calls.append(call)
    return calls


def _memory(observation: Any) -> dict[str, int] | None:
    """Which memory an observation says the RSS is (and the cgroup's charge), or ``None`` when it does not split it."""
    if observation is None:
        return None
    anon, file = observation.rss_anon_bytes, observation.rss_file_bytes
    if anon is None and file is None:
        return None
    values = {
        "rss": observation.rss_bytes,
        "anon": anon,
        "file": file,
        "shmem": observation.rss_shmem_bytes,
        "cgroup": observation.cgroup_memory_bytes,
    }
    if None not in values.values():  # usually all observed
        return values
    return {name: value for name, value in values.items() if value is not None}


def row_of(component: str | None, report: Any, call: int, strings: dict[str, str] | None = None) -> BoundaryRow:
    """The :class:`BoundaryRow` of one record: the report's typed summary, on ``call``.

    Every route says what it shows (:meth:`~ddo_hooks.reports.base.RouteReport.summary`), so a new
    route cannot be shown as guesses. A user action's ``data`` says what it observed under the
    names of :data:`~ddo_hooks.reports.boundary.OBSERVED`.

    Args:
        component: The record's component (``None`` for a bare report).
        report: The report.
        call: The pipeline call it belongs to.
        strings: Where equal texts (boundary, action, reason, detail) are shared from, so that
            100,000 rows hold each once; ``None`` shares nothing.
    """
    s = report.summary()
    boundary, action = _where(component, report, s)
    kind, reason, detail = s.kind, s.reason, s.detail
    if strings is not None:
        boundary, action = strings.setdefault(boundary, boundary), strings.setdefault(action, action)
        kind, detail = strings.setdefault(kind, kind), strings.setdefault(detail, detail)
        reason = None if reason is None else strings.setdefault(reason, reason)
    return BoundaryRow(  # each field in its place: 100,000 rows are made
        call, boundary, action, kind, reason, detail, s.owned_before, s.owned_after, s.delta, s.rss_before,
        s.rss_after, s.elapsed_seconds, s.repinned_bytes, s.repin_seconds, _memory(s.memory_after),
    )  # fmt: skip


def boundary_rows(records: Sequence[tuple[str | None, Any]], calls: Sequence[int] | None = None) -> list[BoundaryRow]:
    """One :class:`BoundaryRow` per ``(component, report)`` record, in order (see :func:`row_of`).

    Args:
        records: ``MetricsTracker.records()`` or records loaded from a file.
        calls: The call of each record; inferred with :func:`infer_calls` when ``None``.

    Returns:
        The rows.
    """
    if calls is not None and len(calls) != len(records):
        raise ValueError(f"calls has {len(calls)} entries for {len(records)} records")
    rows = [
        row_of(component, report, 0 if calls is None else calls[n]) for n, (component, report) in enumerate(records)
    ]
    return rows if calls is not None else numbered(rows)


def numbered(rows: Sequence[BoundaryRow]) -> list[BoundaryRow]:
    """``rows`` with their calls inferred from the boundary order (see :func:`infer_calls`)."""
    calls = _number_calls([(row.boundary, row.action) for row in rows])
    return [dataclasses.replace(row, call=call) for row, call in zip(rows, calls, strict=True)]
