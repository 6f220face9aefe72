"""Totals per boundary across calls: counts by outcome, bytes released, elapsed time and re-pinning.

``ddo-hooks summarize`` prints them per run, per rank and for all runs. Each run's rows are
tallied once (:func:`tally_rows`); the totals of several runs add up their tallies
(:func:`merged_tallies`) instead of walking every row again, and come out exactly as a tally of
all their rows would (:func:`total_rows`): a run's calls are its own, so the distinct calls add
up, and the times are kept in row order and summed once, since a sum of floats depends on its
order.

Examples:
    >>> row = BoundaryRow(1, "after_call", "host_cache_release", "executed", None, "", delta=2048)
    >>> runs = [tally_rows([(0, row)]), tally_rows([(0, row)])]
    >>> totals = merged_tallies(runs)["after_call"]
    >>> totals.calls, totals.counts["executed"], totals.released
    (2, 2, 4096)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ddo_hooks.cli.cells import ATTACH_CALL, BOUNDARY_WIDTH, label_cell, ms_cell, size_cell
from ddo_hooks.cli.layout import TABLE_WIDTH, Cell, Column, render_table
from ddo_hooks.cli.rows import BoundaryRow

__all__ = ["Tally", "format_totals", "merged_tallies", "tally_rows", "total_rows", "totals_table"]

KINDS = ("executed", "noop", "refused")
"""The outcomes the totals count, in their columns' order."""


@dataclass
class Tally:
    """What the totals add up for one boundary (a row's label), over the rows of one run or more.

    Attributes:
        calls: The distinct calls (a call is a run's call: the calls of two runs are distinct); what
            attach did before the first call is none.
        counts: The rows of each outcome (``executed``, ``noop``, ``refused``).
        released: The sum of the positive ``allocator_bytes_delta`` values; ``None`` while no
            delta is known.
        elapsed: Each row's elapsed seconds, when known, in row order.
        repinned: Each row's bytes pinned since the previous boundary, when counted.
        repin_seconds: Each row's seconds spent pinning them, when counted, in row order.
    """

    calls: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    released: int | None = None
    elapsed: list[float] = field(default_factory=list)
    repinned: list[int] = field(default_factory=list)
    repin_seconds: list[float] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        """Add the tally of other runs' rows (which come after this one's)."""
        self.calls += other.calls
        for kind, count in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + count
        if other.released is not None:
            self.released = (self.released or 0) + other.released
        self.elapsed += other.elapsed
        self.repinned += other.repinned
        self.repin_seconds += other.repin_seconds


def tally_rows(rows: Iterable[tuple[object, BoundaryRow]]) -> dict[str, Tally]:
    """The tally of each boundary label, in the order the labels first appear, from ``(run, row)`` pairs.

    A call is ``(run, row.call)``: the rows of one run may all give the same ``run``.
    """
    tallies: dict[str, tuple[Tally, set[tuple[object, int]]]] = {}
    for run, row in rows:  # one pass: 100,000 rows
        label = row.label
        found = tallies.get(label)
        if found is None:
            found = tallies[label] = (Tally(), set())
        tally, calls = found
        if row.call != ATTACH_CALL:  # what attach did is no call
            calls.add((run, row.call))
        tally.counts[row.kind] = tally.counts.get(row.kind, 0) + 1
        if row.delta is not None:
            tally.released = (tally.released or 0) + max(row.delta, 0)
        if row.elapsed_seconds is not None:
            tally.elapsed.append(row.elapsed_seconds)
        if row.repinned_bytes is not None:
            tally.repinned.append(row.repinned_bytes)
        if row.repin_seconds is not None:
            tally.repin_seconds.append(row.repin_seconds)
    for tally, calls in tallies.values():
        tally.calls = len(calls)
    return {label: tally for label, (tally, _) in tallies.items()}


def merged_tallies(parts: Iterable[dict[str, Tally]]) -> dict[str, Tally]:
    """The tallies of several runs' rows, from each run's :func:`tally_rows` in the runs' order.

    The same as the tally of their rows one run after another: the labels in the order they first
    appear, the times in row order. The parts are left as they were.
    """
    merged: dict[str, Tally] = {}
    for part in parts:
        for label, tally in part.items():
            total = merged.get(label)
            if total is None:
                total = merged[label] = Tally(counts={})
            total.add(tally)
    return merged


def totals_table(tallies: dict[str, Tally], *, width: int = TABLE_WIDTH) -> str:
    """The totals table of :func:`tally_rows` or :func:`merged_tallies`; ``(no reports)`` when empty."""
    columns = [Column("boundary", wrap=1, cut=1, floor=BOUNDARY_WIDTH)]
    columns += map(Column, ("calls", "executed", "no-op", "refused"))
    columns += [Column("released"), Column("elapsed")]
    columns += [Column(("pinned since ", "the previous")), Column(("pinning ", "time"))]
    body: list[list[Cell]] = []
    previous = None
    for label, tally in tallies.items():
        body.append(
            [
                label_cell(label, previous),
                str(tally.calls) if tally.calls else "-",  # "-": rows at attach, before any call
                *(str(tally.counts.get(kind, 0)) for kind in KINDS),
                size_cell(tally.released),
                ms_cell(sum(tally.elapsed)) if tally.elapsed else "-",
                size_cell(sum(tally.repinned)) if tally.repinned else "-",
                ms_cell(sum(tally.repin_seconds)) if tally.repin_seconds else "-",
            ]
        )
        previous = label
    return "\n".join(render_table(columns, body, width=width)) if body else "(no reports)"


def format_totals(rows: Sequence[BoundaryRow], *, width: int = TABLE_WIDTH) -> str:
    """Totals per boundary across calls: counts by outcome, bytes released, elapsed, re-pinning.

    ``calls`` counts the distinct calls (of every run given); ``refused`` includes the boundaries
    a call did not reach (``not_reached``); ``released`` is the sum of the positive
    ``allocator_bytes_delta`` values (the bytes the allocator gave back); the last two columns
    sum ``pinned_since_previous``: the bytes pinned since the previous boundary and the time it took.

    Args:
        rows: The rows to total (see :func:`~ddo_hooks.cli.rows.boundary_rows`).
        width: The widest a line may be.

    Examples:
        >>> import dataclasses
        >>> row = BoundaryRow(1, "after_call", "host_cache_release", "executed", None, "", delta=2048,
        ...                   elapsed_seconds=0.001, repinned_bytes=4096, repin_seconds=0.25)
        >>> rows = [row, dataclasses.replace(row, call=2, delta=-1024)]
        >>> print(format_totals(rows))  # doctest: +NORMALIZE_WHITESPACE
        boundary    calls  executed  no-op  refused  released  elapsed  pinned since  pinning
                                                                        the previous  time
        ----------  -----  --------  -----  -------  --------  -------  ------------  ---------
        after_call  2      2         0      0        2.0 KiB   2.00 ms  8.0 KiB       500.00 ms
    """
    return total_rows([(0, row) for row in rows], width=width)


def total_rows(rows: Sequence[tuple[object, BoundaryRow]], *, width: int = TABLE_WIDTH) -> str:
    """:func:`format_totals` of rows from several runs: ``(run, row)`` pairs (a call is a run's call)."""
    return totals_table(tally_rows(rows), width=width)
