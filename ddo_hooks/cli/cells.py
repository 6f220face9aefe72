"""The text of a table's cells: sizes, before → after pairs, times, boundaries and statuses.

A cell is a string or the pieces a wrapped cell may break between (see :mod:`ddo_hooks.cli.layout`).

Examples:
    >>> pair_cell(3 << 30, 1 << 20, "→"), ms_cell(0.0015), status_cell("no-op: disabled")
    (('3.0 GiB → ', '1.0 MiB'), '1.50 ms', ('no-op: ', 'disabled'))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TextIO

from ddo_hooks.cli.layout import Cell
from ddo_hooks.sizes import format_size

__all__ = ["arrow_for", "label_cell", "label_cells", "ms_cell", "pair_cell", "size_cell", "status_cell"]


def size_cell(n: int | None) -> str:
    """A byte count for people, ``-`` when unknown."""
    return "-" if n is None else format_size(n)


def pair_cell(before: int | None, after: int | None, arrow: str) -> Cell:
    """``before → after`` (breakable after the arrow); one value alone is an observation at that point."""
    if before is None and after is None:
        return "-"
    if before is None:
        return size_cell(after)
    return (f"{size_cell(before)} {arrow} ", size_cell(after))


def ms_cell(seconds: float | None) -> str:
    """Seconds as milliseconds, ``-`` when unknown."""
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def label_cell(label: str, previous: str | None = None) -> Cell:
    """A row's boundary cell; an action right after a row of its boundary shows as ``+ action``."""
    boundary, _, action = label.partition("/")
    if action and previous is not None and previous.partition("/")[0] == boundary:
        return ("+ ", action)
    return (f"{boundary}/", action) if action else boundary


def label_cells(rows: Iterable[tuple[int, str]]) -> list[Cell]:
    """The boundary cells of ``(call, label)`` rows: an action right after its boundary in a call is ``+ action``."""
    cells: list[Cell] = []
    previous: tuple[int, str] | None = None
    for call, label in rows:
        cells.append(label_cell(label, previous[1] if previous and previous[0] == call else None))
        previous = (call, label)
    return cells


def status_cell(status: str) -> Cell:
    """``executed``, or ``no-op: reason`` / ``refused: reason`` (breakable after the colon)."""
    word, _, reason = status.partition(": ")
    return (f"{word}: ", reason) if reason else word


def arrow_for(stream: TextIO) -> str:
    """``"→"`` when ``stream`` can print it, else ``"->"`` (e.g. a cp1252 Windows console)."""
    try:
        "→".encode(stream.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "->"
    return "→"
