"""The text of a table's cells: numbers, sizes, before → after pairs, times, boundaries and statuses.

A cell is a string or the pieces a wrapped cell may break between (see :mod:`ddo_hooks.cli.layout`).
A report may hold any integer and any finite number (a call index of 10**30, an elapsed time of
1e300 seconds): beyond 12 characters, a number is written as ``1.00e30``, so that no cell is wider
than its table may be.

Examples:
    >>> pair_cell(3 << 30, 1 << 20, "→"), ms_cell(0.0015), status_cell("no-op: disabled")
    (('3.0 GiB → ', '1.0 MiB'), '1.50 ms', ('no-op: ', 'disabled'))
    >>> number_cell(10**30), size_cell(10**400), ms_cell(1e300), ms_cell(1e308 * 10)
    ('1.00e30', '1.00e400 B', '1.00e+303 ms', 'inf ms')
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TextIO

from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.cli.layout import Cell
from ddo_hooks.sizes import format_size

__all__ = [
    "BOUNDARY_WIDTH",
    "ATTACH_CALL",
    "arrow_for",
    "call_cell",
    "label_cell",
    "label_cells",
    "ms_cell",
    "number_cell",
    "pair_cell",
    "pair_of",
    "size_cell",
    "status_cell",
]

BOUNDARY_WIDTH = max(map(len, BOUNDARIES))
"""A table's boundary column is never cut narrower than the boundary names."""

_LONGEST = 12
"""The most characters a number is written with as it is (``999999999999``); a longer one is ``1.00e12``."""

_HUGE_SIZE = 1024**5
"""From here (1 PiB), a size is written in bytes as ``1.13e15 B`` (format_size stops at TiB)."""

_HUGE_MS = 1e9
"""From here (about 11.6 days), milliseconds are written as ``1.00e+09 ms``."""


def number_cell(n: int) -> str:
    """An integer (a call, a pid, a rank) as it is, or ``1.00e30`` when longer than 12 characters."""
    text = str(n)
    return text if len(text) <= _LONGEST else _scientific(n)


ATTACH_CALL = 0
"""The call of what an attachment recorded at attach, before its first call (the repack, the pinning from files):
its envelope's ``call_index`` is 0. It is no call: a table says ``attach`` where a call's number goes."""


def call_cell(call: int) -> str:
    """A row's call: its number, or ``attach`` for what attach did before the first call.

    Examples:
        >>> call_cell(2), call_cell(ATTACH_CALL)
        ('2', 'attach')
    """
    return "attach" if call == ATTACH_CALL else number_cell(call)


def _scientific(n: int) -> str:
    """``n`` as ``-1.23e45``, rounded half up from its digits (a float holds no integer beyond 1.8e308)."""
    magnitude = abs(n)
    exponent = len(str(magnitude)) - 1
    scale = 10 ** max(exponent - 2, 0)
    kept, rest = divmod(magnitude, scale)
    kept += 2 * rest >= scale
    if kept >= 1000:  # 9.995e20 is 1.00e21
        kept, exponent = kept // 10, exponent + 1
    digits = str(kept).ljust(3, "0")
    return f"{'-' if n < 0 else ''}{digits[0]}.{digits[1:]}e{exponent}"


def size_cell(n: int | None) -> str:
    """A byte count for people, ``-`` when unknown (``1.13e15 B`` from 1 PiB)."""
    if n is None:
        return "-"
    return format_size(n) if abs(n) < _HUGE_SIZE else f"{_scientific(n)} B"


def pair_cell(before: int | None, after: int | None, arrow: str) -> Cell:
    """``before → after`` (breakable after the arrow); one value alone is an observation at that point."""
    return pair_of(before, size_cell(after), arrow)


def pair_of(before: int | None, after: str, arrow: str) -> Cell:
    """:func:`pair_cell` of ``before`` and the :func:`size_cell` of the value after (``-`` when unknown)."""
    return after if before is None else (f"{size_cell(before)} {arrow} ", after)


def ms_cell(seconds: float | None) -> str:
    """Seconds as milliseconds, ``-`` when unknown (``1.00e+09 ms`` from 11.6 days; a sum too large is ``inf``)."""
    if seconds is None:
        return "-"
    ms = seconds * 1000
    return f"{ms:.2f} ms" if abs(ms) < _HUGE_MS else f"{ms:.2e} ms"


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
