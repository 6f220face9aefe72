"""Reports for people: one table row per boundary report, and totals per boundary across calls.

``ddo-hooks demo`` prints :func:`format_table` for the run it just made on CUDA (on a CPU,
:func:`format_rss_table`); ``ddo-hooks summarize`` prints it for each run of saved files, followed
by :func:`format_totals`. A row shows the call, the boundary, what happened (``executed``,
``no-op: <reason>`` or ``refused: <reason>``), the pinned bytes the allocator owned before and
after, the signed ``allocator_bytes_delta`` (before minus after: positive is what the allocator
gave back), the process RSS before and after, and the elapsed time. Each distinct no-op or
refusal reason seen is explained once, below the table, with the report's own ``detail``, and so is
what each other action did (its last row's ``detail``). Every
line fits :data:`~ddo_hooks.cli.layout.TABLE_WIDTH` (100) columns: a table too wide wraps its
cells (see :mod:`ddo_hooks.cli.layout`). The rows come from :mod:`ddo_hooks.cli.rows` and the
totals from :mod:`ddo_hooks.cli.totals` (both re-exported here), the text of their cells from
:mod:`ddo_hooks.cli.cells`.

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> report = release_pytorch_host_cache(phase="after_call")
    >>> rows = boundary_rows([("host_cache_after_call", report)])
    >>> rows[0].call, rows[0].boundary, rows[0].status
    (1, 'after_call', 'no-op: disabled')
    >>> print(format_table(rows))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    call  boundary    status           owned pinned    delta  process RSS     elapsed
                                       before → after         before → after
    ----  ----------  ---------------  --------------  -----  --------------  -------
    1     after_call  no-op: disabled  -               -      ... MiB         ... ms
    RSS: one value is the process RSS observed at the boundary (by a no-op, or by an action)
    <BLANKLINE>
    no-op disabled: release disabled (enabled=False)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from ddo_hooks.actions.host_cache_release import NAME as HOST_CACHE_RELEASE
from ddo_hooks.cli.cells import (
    BOUNDARY_WIDTH,
    arrow_for,
    call_cell,
    label_cells,
    ms_cell,
    pair_of,
    size_cell,
    status_cell,
)
from ddo_hooks.cli.layout import TABLE_WIDTH, Cell, Column, render_columns, render_table, wrap_text
from ddo_hooks.cli.rows import BoundaryRow, boundary_rows, infer_calls
from ddo_hooks.cli.totals import format_totals, total_rows

__all__ = [
    "BoundaryRow",
    "arrow_for",
    "boundary_rows",
    "MEMORY_NOTE",
    "format_memory_table",
    "format_rss_table",
    "format_run_tables",
    "format_table",
    "format_totals",
    "infer_calls",
    "total_rows",
]


def _notes(rows: Sequence[BoundaryRow], width: int) -> list[str]:
    """One line per distinct no-op or refusal reason seen, in the report's own words."""
    reasons: dict[str, str] = {}
    for row in rows:
        if row.kind != "executed":
            reasons.setdefault(row.status.replace(":", "", 1), row.detail or "(no detail)")
    if not reasons:
        return []
    return ["", *(wrap_text(f"{status}: {detail}", width=width) for status, detail in reasons.items())]


def _action_details(rows: Sequence[BoundaryRow], width: int) -> list[str]:
    """What each action other than ``host_cache_release`` said it did, in its own words: its last executed row's detail.

    Examples:
        >>> rows = [BoundaryRow(1, "after_call", "my_pkg.log", "executed", None, "RSS 1 GiB"),
        ...         BoundaryRow(2, "after_call", "my_pkg.log", "executed", None, "RSS 2 GiB")]
        >>> _action_details(rows, 100)
        ['', 'my_pkg.log (call 2, after_call): RSS 2 GiB']
    """
    last: dict[str, BoundaryRow] = {}
    for row in rows:
        if row.action != HOST_CACHE_RELEASE and row.kind == "executed" and row.detail and row.call:
            last[row.action] = row
    lines = [wrap_text(f"{name} (call {row.call}, {row.boundary}): {row.detail}", width=width)
             for name, row in last.items()]  # fmt: skip
    return ["", *lines] if lines else []


def format_table(rows: Sequence[BoundaryRow], *, arrow: str = "→", width: int = TABLE_WIDTH) -> str:
    """The boundary table, then one line per distinct no-op or refusal reason seen.

    The table fits ``width`` columns: when it would not, the headers wrap, then the before and
    after pairs (after the arrow), then the status and the boundary (never inside a word).

    Args:
        rows: From :func:`boundary_rows`.
        arrow: Between before and after (``"->"`` where the terminal cannot print ``→``).
        width: The widest a line may be.

    Returns:
        The text, without a trailing newline.
    """
    return _boundary_table(rows, _row_texts(rows), arrow, width)


def _boundary_table(rows: Sequence[BoundaryRow], texts: _RowTexts, arrow: str, width: int) -> str:
    columns = [
        Column("call"),
        Column("boundary", wrap=3, cut=1, floor=BOUNDARY_WIDTH),
        Column("status", wrap=4, cut=2, floor=len("refused: ")),
        Column(("owned pinned ", "before ", f"{arrow} after"), wrap=1),
        Column("delta"),
        Column(("process RSS ", "before ", f"{arrow} after"), wrap=2),
        Column("elapsed"),
    ]
    cells: list[list[Cell]] = [  # a column at a time
        texts.calls,
        label_cells((row.call, row.label) for row in rows),
        [status_cell(row.status) for row in rows],
        [pair_of(row.owned_before, after, arrow) for row, after in zip(rows, texts.owned_after, strict=True)],
        [size_cell(row.delta) for row in rows],
        [pair_of(row.rss_before, after, arrow) for row, after in zip(rows, texts.rss_after, strict=True)],
        [ms_cell(row.elapsed_seconds) for row in rows],
    ]
    lines = render_columns(columns, cells, width=width) if rows else ["(no reports)"]
    if any(row.delta is not None for row in rows):
        lines.append("delta: allocator_bytes_delta = owned before - owned after (positive: bytes given back)")
    if any(row.rss_before is None and row.rss_after is not None for row in rows):
        lines.append("RSS: one value is the process RSS observed at the boundary (by a no-op, or by an action)")
    return "\n".join(lines + _notes(rows, width) + _action_details(rows, width))


def format_rss_table(rows: Sequence[BoundaryRow], *, observer: str, arrow: str = "→", width: int = TABLE_WIDTH) -> str:
    """What a run without pinned memory can show: each boundary's status and the process RSS there.

    ``observer`` is the action that observed the RSS at each boundary (its report's
    ``data.rss_bytes``); its rows are folded into the rows of the other actions at the same call
    and boundary. The change is against the previous boundary observed.

    Examples:
        >>> rows = [BoundaryRow(1, "before_vae", "host_cache_release", "noop", "disabled", "off"),
        ...         BoundaryRow(1, "before_vae", "watch", "executed", None, "", rss_after=3 << 20),
        ...         BoundaryRow(1, "after_call", "host_cache_release", "noop", "disabled", "off"),
        ...         BoundaryRow(1, "after_call", "watch", "executed", None, "", rss_after=2 << 20)]
        >>> print(format_rss_table(rows, observer="watch"))  # doctest: +NORMALIZE_WHITESPACE
        call  boundary    status           RSS at the boundary  change since the previous boundary  elapsed
        ----  ----------  ---------------  -------------------  ----------------------------------  -------
        1     before_vae  no-op: disabled  3.0 MiB              -                                   -
        1     after_call  no-op: disabled  2.0 MiB              -1.0 MiB                            -
        <BLANKLINE>
        no-op disabled: off
    """
    seen = {(row.call, row.boundary): row.rss_after for row in rows if row.action == observer}
    shown = [row for row in rows if row.action != observer]
    columns = [
        Column("call"),
        Column("boundary", wrap=1, cut=1, floor=BOUNDARY_WIDTH),
        Column("status", wrap=2, cut=2, floor=len("refused: ")),
        Column(("RSS at ", "the boundary")),
        Column(("change since the ", "previous boundary")),
        Column("elapsed"),
    ]
    body: list[list[Cell]] = []
    previous: int | None = None
    last_key: tuple[int, str] | None = None
    for row, label in zip(shown, label_cells((row.call, row.label) for row in shown), strict=True):
        key = (row.call, row.boundary)
        rss = seen.get(key)
        change = "-"
        if rss is not None and previous is not None and key != last_key:
            change = ("+" if rss > previous else "") + size_cell(rss - previous)
        body.append(
            [
                call_cell(row.call),
                label,
                status_cell(row.status),
                size_cell(rss),
                change,
                ms_cell(row.elapsed_seconds),
            ]
        )
        if rss is not None and key != last_key:
            previous, last_key = rss, key
    lines = render_table(columns, body, width=width) if shown else ["(no reports)"]
    return "\n".join(lines + _notes(shown, width))


def format_memory_table(rows: Sequence[BoundaryRow], *, width: int = TABLE_WIDTH) -> str | None:
    """Which memory the process held after each boundary that observed it (Linux), or ``None`` when none did.

    ``anon``, ``file`` and ``shmem`` split the RSS as ``/proc/self/status`` does (``RssAnon``,
    ``RssFile``, ``RssShmem``): the heap and copies of weights; mmap'd file pages such as safetensors
    weights, which the kernel can drop and read again; shared memory, where CUDA's pinned host memory
    shows. ``pinned`` is what the pinned host allocator owned after it, ``cgroup`` what the process's
    cgroup was charged (page cache included).

    Examples:
        >>> memory = {"rss": 8 << 30, "anon": 1 << 30, "file": 3 << 29, "shmem": 5 << 29}
        >>> row = BoundaryRow(1, "after_call", "host_cache_release", "executed", None, "",
        ...                   owned_after=4 << 30, memory_after=memory)
        >>> print(format_memory_table([row]))  # doctest: +NORMALIZE_WHITESPACE
        call  boundary    RSS      anon     file     shmem    pinned owned  cgroup
        ----  ----------  -------  -------  -------  -------  ------------  ------
        1     after_call  8.0 GiB  1.0 GiB  1.5 GiB  2.5 GiB  4.0 GiB       -
    """
    return _memory_table(rows, _row_texts(rows), width)


def _memory_table(rows: Sequence[BoundaryRow], texts: _RowTexts, width: int) -> str | None:
    shown = [n for n, row in enumerate(rows) if row.memory_after is not None]
    if not shown:
        return None
    columns = [Column("call"), Column("boundary", wrap=1, cut=1, floor=BOUNDARY_WIDTH)]
    columns += [Column(name) for name in ("RSS", "anon", "file", "shmem", "pinned owned", "cgroup")]
    memory: list[dict[str, int]] = [rows[n].memory_after for n in shown]  # type: ignore[misc]  # the rows shown are those with memory_after
    rss: list[Cell] = [  # the RSS after it, as the boundary table shows it, unless an action observed another
        texts.rss_after[n] if observed.get("rss") == rows[n].rss_after else size_cell(observed.get("rss"))
        for n, observed in zip(shown, memory, strict=True)
    ]
    twice = Counter((rows[n].call, rows[n].boundary) for n in shown)  # two observations at one boundary: the
    labels = label_cells(  # first names its action, the next is "+ action" (as in the boundary table)
        (rows[n].call, rows[n].label if twice[(rows[n].call, rows[n].boundary)] > 1 else rows[n].boundary)
        for n in shown
    )
    cells: list[list[Cell]] = [[texts.calls[n] for n in shown], labels, rss]
    cells += [[size_cell(observed.get(name)) for observed in memory] for name in ("anon", "file", "shmem")]
    cells += [[texts.owned_after[n] for n in shown], [size_cell(observed.get("cgroup")) for observed in memory]]
    return "\n".join(render_columns(columns, cells, width=width))


def format_run_tables(
    rows: Sequence[BoundaryRow], *, arrow: str = "→", width: int = TABLE_WIDTH
) -> tuple[str, str | None]:
    """:func:`format_table` and :func:`format_memory_table` of the same rows, each text they share made once.

    Both show each row's call, the pinned bytes owned after it and the process RSS after it.
    """
    texts = _row_texts(rows)
    return _boundary_table(rows, texts, arrow, width), _memory_table(rows, texts, width)


class _RowTexts(NamedTuple):
    """The texts both tables show of each row: its call, and the owned pinned bytes and RSS after it."""

    calls: list[Cell]
    owned_after: list[str]
    rss_after: list[str]


def _row_texts(rows: Sequence[BoundaryRow]) -> _RowTexts:
    return _RowTexts(
        [call_cell(row.call) for row in rows],
        [size_cell(row.owned_after) for row in rows],
        [size_cell(row.rss_after) for row in rows],
    )


MEMORY_NOTE = (
    "which memory, after each boundary (Linux, /proc/self/status): anon = RssAnon (heap, copies of weights), "
    "file = RssFile (mmap'd weight files the kernel can drop and read again), shmem = RssShmem (where pinned "
    "host memory shows); pinned owned = the pinned host allocator's bytes; cgroup = the memory charged to the "
    "process's cgroup"
)
"""The sentence that introduces :func:`format_memory_table`."""
