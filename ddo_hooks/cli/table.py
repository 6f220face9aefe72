"""Reports for people: one table row per boundary report, and totals per boundary across calls.

``ddo-hooks demo`` prints :func:`format_table` for the run it just made; ``ddo-hooks summarize``
prints it for a saved run (read with :func:`ddo_hooks.reports.files.load_report_file`), followed by
:func:`format_totals`. A row shows the call, the boundary, what happened (``executed``,
``no-op: <reason>`` or ``refused: <reason>``), the pinned bytes the allocator owned before and
after, the signed ``allocator_bytes_delta`` (before minus after: positive is what the allocator
gave back), the process RSS before and after, and the elapsed time. Each distinct no-op or
refusal reason seen is explained once, below the table, with the report's own ``detail``.

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> report = release_pytorch_host_cache(phase="after_call")
    >>> rows = boundary_rows([("host_cache_after_call", report)])
    >>> rows[0].call, rows[0].boundary, rows[0].status
    (1, 'after_call', 'no-op: disabled')
    >>> print(format_table(rows))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    call  boundary    status           owned pinned before → after  delta  RSS before → after  elapsed
    ----  ----------  ---------------  ---------------------------  -----  ------------------  -------
    1     after_call  no-op: disabled  -                            -      -                   0... ms
    <BLANKLINE>
    no-op disabled: release disabled (enabled=False)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ddo_hooks.boundaries import BOUNDARIES, HOST_CACHE_RELEASE
from ddo_hooks.sizes import format_size

__all__ = [
    "BoundaryRow",
    "arrow_for",
    "boundary_rows",
    "format_table",
    "format_totals",
    "infer_calls",
]


@dataclass(frozen=True)
class BoundaryRow:
    """One report, as a table row.

    Attributes:
        call: The pipeline call it belongs to, from 1.
        boundary: ``before_transformer``, ``before_vae``, ``after_call`` (or another phase label).
        action: The action that produced it (``host_cache_release`` for the built-in release).
        kind: ``executed``, ``noop`` or ``refused``.
        reason: The no-op or refusal reason code; ``None`` when executed (or for a user action).
        detail: The report's sentence for people.
        owned_before: Pinned bytes the allocator owned before, when read.
        owned_after: Pinned bytes the allocator owned after, when read.
        delta: ``allocator_bytes_delta`` (before minus after), when known.
        rss_before: Process RSS before, when observed.
        rss_after: Process RSS after, when observed.
        elapsed_seconds: Time the boundary took; ``None`` for refusals and user actions.
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

    @property
    def label(self) -> str:
        """The boundary, with the action's name when it is not the built-in release."""
        return self.boundary if self.action == HOST_CACHE_RELEASE else f"{self.boundary}/{self.action}"

    @property
    def status(self) -> str:
        """``executed``, ``no-op: <reason>`` or ``refused: <reason>``."""
        if self.kind == "executed":
            return "executed"
        word = "no-op" if self.kind == "noop" else "refused"
        return f"{word}: {self.reason}" if self.reason else word


def _body(report: Any) -> tuple[str, dict[str, Any]]:
    """The report's route and the one section under ``setup`` (every route has exactly one)."""
    data = report.model_dump(mode="json")
    sections = list(data["setup"].values())
    return data["route"], sections[0] if len(sections) == 1 and isinstance(sections[0], dict) else {}


def _where(component: str | None, route: str, body: dict[str, Any]) -> tuple[str, str]:
    """The boundary (or phase) a report belongs to, and the action that produced it."""
    boundary = body.get("boundary") or body.get("phase") or component or route
    action = body.get("action") or (HOST_CACHE_RELEASE if route == "pytorch_host_cache_release" else route)
    return str(boundary), str(action)


def infer_calls(records: Sequence[tuple[str | None, Any]]) -> list[int]:
    """Number the pipeline calls of saved records (reports do not carry their call).

    A new call starts when a boundary comes earlier in the call than the one before it, or
    when the same action reports at the same boundary again.

    Examples:
        >>> from ddo_hooks import release_pytorch_host_cache
        >>> reports = [release_pytorch_host_cache(phase=p) for p in ("before_vae", "after_call", "before_vae")]
        >>> infer_calls([("c", r) for r in reports])
        [1, 1, 2]
    """
    calls, call, last, seen = [], 1, -1, set()
    for component, report in records:
        route, body = _body(report)
        key = _where(component, route, body)
        order = BOUNDARIES.index(key[0]) if key[0] in BOUNDARIES else last
        if calls and (order < last or key in seen):
            call, seen = call + 1, set()
        seen.add(key)
        last = order
        calls.append(call)
    return calls


def _bytes(section: Any, key: str) -> int | None:
    return section.get(key) if isinstance(section, dict) else None


def boundary_rows(records: Sequence[tuple[str | None, Any]], calls: Sequence[int] | None = None) -> list[BoundaryRow]:
    """One :class:`BoundaryRow` per ``(component, report)`` record, in order.

    Works for every route: the fields are read from the report's ``setup`` section by name
    (``status``, ``noop_reason``/``refusal_reason``/``reason``, ``detail``, ``before``/``after``,
    ``allocator_bytes_delta``, ``host_before``/``host_after``, ``elapsed_seconds``).

    Args:
        records: ``MetricsTracker.records()`` or records loaded from a file.
        calls: The call of each record; inferred with :func:`infer_calls` when ``None``.

    Returns:
        The rows.
    """
    numbers = list(calls) if calls is not None else infer_calls(records)
    if len(numbers) != len(records):
        raise ValueError(f"calls has {len(numbers)} entries for {len(records)} records")
    rows = []
    for call, (component, report) in zip(numbers, records, strict=True):
        route, body = _body(report)
        boundary, action = _where(component, route, body)
        kind = "refused" if route == "phase_boundary_refusal" else str(body.get("status", "?"))
        rows.append(
            BoundaryRow(
                call,
                boundary,
                action,
                kind,
                body.get("noop_reason") or body.get("refusal_reason") or body.get("reason"),
                body.get("detail") or "",
                owned_before=_bytes(body.get("before"), "allocated_bytes"),
                owned_after=_bytes(body.get("after"), "allocated_bytes"),
                delta=body.get("allocator_bytes_delta"),
                rss_before=_bytes(body.get("host_before"), "rss_bytes"),
                rss_after=_bytes(body.get("host_after"), "rss_bytes"),
                elapsed_seconds=body.get("elapsed_seconds"),
            )
        )
    return rows


def _size(n: int | None) -> str:
    return "-" if n is None else format_size(n)


def _pair(before: int | None, after: int | None, arrow: str) -> str:
    if before is None and after is None:
        return "-"
    return f"{_size(before)} {arrow} {_size(after)}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def _render(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths], *body]
    return ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]


def arrow_for(stream: TextIO) -> str:
    """``"→"`` when ``stream`` can print it, else ``"->"`` (e.g. a cp1252 Windows console)."""
    try:
        "→".encode(stream.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "->"
    return "→"


def format_table(rows: Sequence[BoundaryRow], *, arrow: str = "→") -> str:
    """The boundary table, then one line per distinct no-op or refusal reason seen.

    Args:
        rows: From :func:`boundary_rows`.
        arrow: Between before and after (``"->"`` where the terminal cannot print ``→``).

    Returns:
        The text, without a trailing newline.
    """
    header = [
        "call",
        "boundary",
        "status",
        f"owned pinned before {arrow} after",
        "delta",
        f"RSS before {arrow} after",
        "elapsed",
    ]
    body = [
        [
            str(row.call),
            row.label,
            row.status,
            _pair(row.owned_before, row.owned_after, arrow),
            _size(row.delta),
            _pair(row.rss_before, row.rss_after, arrow),
            _ms(row.elapsed_seconds),
        ]
        for row in rows
    ]
    lines = _render(header, body) if rows else ["(no reports)"]
    if any(row.delta is not None for row in rows):
        lines.append("delta: allocator_bytes_delta = owned before - owned after (positive: bytes given back)")
    reasons: dict[str, str] = {}
    for row in rows:
        if row.kind != "executed":
            reasons.setdefault(row.status.replace(":", "", 1), row.detail or "(no detail)")
    if reasons:
        lines.append("")
        lines.extend(f"{status}: {detail}" for status, detail in reasons.items())
    return "\n".join(lines)


def format_totals(rows: Sequence[BoundaryRow]) -> str:
    """Totals per boundary across calls: counts by outcome, total delta and total elapsed.

    Examples:
        >>> import dataclasses
        >>> row = BoundaryRow(1, "after_call", "host_cache_release", "executed", None, "", delta=2048,
        ...                   elapsed_seconds=0.001)
        >>> print(format_totals([row, dataclasses.replace(row, call=2)]))  # doctest: +NORMALIZE_WHITESPACE
        boundary    calls  executed  no-op  refused  total delta  total elapsed
        ----------  -----  --------  -----  -------  -----------  -------------
        after_call  2      2         0      0        4.0 KiB      2.00 ms
    """
    groups: dict[str, list[BoundaryRow]] = {}
    for row in rows:
        groups.setdefault(row.label, []).append(row)
    header = ["boundary", "calls", "executed", "no-op", "refused", "total delta", "total elapsed"]
    body = []
    for label, group in groups.items():
        deltas = [row.delta for row in group if row.delta is not None]
        elapsed = [row.elapsed_seconds for row in group if row.elapsed_seconds is not None]
        counts = [sum(row.kind == kind for row in group) for kind in ("executed", "noop", "refused")]
        body.append(
            [
                label,
                str(len({row.call for row in group})),
                *map(str, counts),
                _size(sum(deltas)) if deltas else "-",
                _ms(sum(elapsed)) if elapsed else "-",
            ]
        )
    return "\n".join(_render(header, body)) if body else "(no reports)"
