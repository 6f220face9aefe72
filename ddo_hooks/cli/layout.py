r"""Text tables that fit a terminal: cells wrap at chosen places, never mid-word, before anything is cut.

A cell is a string or a tuple of *pieces*: the text is the pieces joined, and a wrapped cell
breaks only between pieces (the pair ``("3.6 GiB → ", "16.0 MiB")`` breaks after the arrow, never
inside a size). When the natural table is wider than ``width``, the headers wrap first (each to
at most two lines), then the columns marked wrappable, in their order, then, as a last resort,
the columns marked cuttable lose their ends (``…``), down to their floor. A header may take a
third line once its column's cells wrap. :func:`wrap_text` wraps prose the same way.

Examples:
    >>> columns = [Column("boundary"), Column(("owned pinned ", "before ", "→ after"), wrap=1)]
    >>> rows = [["before_transformer", ("3.6 GiB → ", "16.0 MiB")]]
    >>> print("\n".join(render_table(columns, rows)))
    boundary            owned pinned before → after
    ------------------  ---------------------------
    before_transformer  3.6 GiB → 16.0 MiB
    >>> print("\n".join(render_table(columns, rows, width=34)))
    boundary            owned pinned
                        before → after
    ------------------  --------------
    before_transformer  3.6 GiB →
                        16.0 MiB
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TABLE_WIDTH", "Cell", "Column", "render_columns", "render_table", "wrap_text"]

TABLE_WIDTH = 100
"""The widest line the command line prints in a table or a note (columns)."""

Cell = str | tuple[str, ...]
"""A cell: a string (never broken) or the pieces it may break between."""

_GAP = "  "
_ELLIPSIS = "…"


@dataclass(frozen=True)
class Column:
    """A column of a text table.

    Attributes:
        title: The header; it wraps at spaces (a string) or between its pieces (a tuple), to two
            lines, or three once the column's cells wrap.
        wrap: When the table is too wide, wrappable columns wrap in increasing order of this
            number; ``None`` never wraps.
        cut: When wrapping is not enough, cuttable columns lose the ends of their cells (with
            ``…``) in increasing order of this number; ``None`` is never cut.
        floor: The narrowest a cut may make the column.
    """

    title: Cell
    wrap: int | None = None
    cut: int | None = None
    floor: int = 2


def _pieces(cell: Cell) -> tuple[str, ...]:
    return (cell,) if isinstance(cell, str) else tuple(cell)


def _pack(pieces: Sequence[str], width: int) -> list[str]:
    """Greedily put pieces on lines of at most ``width`` (a piece longer than that gets a line of its own)."""
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and len((line + piece).rstrip()) > width:
            lines.append(line.rstrip())
            line = piece.lstrip()
        else:
            line += piece
    lines.append(line.rstrip())
    return lines


def _words(title: Cell) -> tuple[str, ...]:
    if not isinstance(title, str):
        return tuple(title)
    words = title.split(" ")
    return (*(f"{word} " for word in words[:-1]), words[-1])


def _header_min(title: Cell, most: int = 2) -> int:
    """The narrowest width at which the title takes at most ``most`` lines."""
    width = len("".join(_words(title)))
    while width > 1:
        lines = _pack(_words(title), width - 1)
        if len(lines) > most or max(map(len, lines)) > width - 1:
            break
        width -= 1
    return width


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + _ELLIPSIS


def render_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *, width: int = TABLE_WIDTH) -> list[str]:
    """The lines of a left-aligned table: the header, a rule, the rows.

    The widths are worked out from each column's distinct cells, and each distinct cell is laid
    out once, so that a table of 100,000 rows costs little more than writing its lines.

    Args:
        columns: The columns.
        rows: The cells of each row, one per column.
        width: The widest the lines may be (wrapping and cutting as the columns allow).

    Returns:
        The lines, without trailing spaces. Every line fits ``width`` unless a column that may
        neither wrap nor be cut is wider on its own.
    """
    by_column = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
    return render_columns(columns, by_column, width=width)


def render_columns(
    columns: Sequence[Column], cells: Sequence[Sequence[Cell]], *, width: int = TABLE_WIDTH
) -> list[str]:
    """:func:`render_table` of cells given column by column: ``cells[i]`` holds column ``i``'s cell of each row.

    What a table of many rows is made from most cheaply (its cells made a column at a time).

    Raises:
        ValueError: Not one sequence of cells per column, or columns of different lengths.
    """
    if len(cells) != len(columns) or len({len(column_cells) for column_cells in cells}) > 1:
        raise ValueError(f"{len(columns)} columns, but cells for {len(cells)} of lengths {[len(c) for c in cells]}")
    texts = [  # each distinct cell's text, in the order first seen
        {cell: cell if isinstance(cell, str) else "".join(cell) for cell in dict.fromkeys(column_cells)}
        for column_cells in cells
    ]
    body_natural = [max(map(len, column_texts.values()), default=0) for column_texts in texts]
    widths = [max(n, len("".join(_words(c.title)))) for n, c in zip(body_natural, columns, strict=True)]

    def total() -> int:
        return sum(widths) + len(_GAP) * (len(widths) - 1)

    if total() > width:  # every header wider than its cells wraps first: they cost one line in all
        widths = [max(n, _header_min(c.title)) for n, c in zip(body_natural, columns, strict=True)]
    order = sorted((c.wrap, i) for i, c in enumerate(columns) if c.wrap is not None)
    for _, i in order:
        floor = _header_min(columns[i].title, 3)
        while total() > width and widths[i] > floor:
            packed = max((len(line) for c in texts[i] for line in _pack(_pieces(c), widths[i] - 1)), default=0)
            if max(packed, floor) >= widths[i]:
                break
            widths[i] = max(packed, floor)
        two_lines = _header_min(columns[i].title)
        if widths[i] < two_lines and total() + two_lines - widths[i] <= width:  # room for a shorter header
            widths[i] = two_lines
    for _, i in sorted((c.cut, i) for i, c in enumerate(columns) if c.cut is not None):
        floor = max(_header_min(columns[i].title, 3), columns[i].floor)
        if total() > width and widths[i] > floor:
            widths[i] = max(floor, widths[i] - (total() - width))

    lines: list[str] = []
    header = [_pack(_words(c.title), w) for c, w in zip(columns, widths, strict=True)]
    header = [[_cut(line, w) for line in lines] for lines, w in zip(header, widths, strict=True)]
    lines += _join_lines(header, widths)
    lines.append(_GAP.join("-" * w for w in widths))
    laid_out = [_lay_out_column(*args) for args in zip(texts, columns, widths, strict=True)]
    padded = [  # each cell padded to its column's width, column by column; None for a cell of several lines
        list(map(one_line.__getitem__, column_cells))
        for (one_line, _), column_cells in zip(laid_out, cells, strict=True)
    ]
    if not any(several for _, several in laid_out):
        lines += [_GAP.join(parts).rstrip() for parts in zip(*padded, strict=True)]
        return lines
    for n, parts in enumerate(zip(*padded, strict=True)):
        if None in parts:
            cell_lines = [
                several.get(column_cells[n]) or [text]
                for (_, several), column_cells, text in zip(laid_out, cells, parts, strict=True)
            ]
            lines += _join_lines(cell_lines, widths)
        else:
            lines.append(_GAP.join(parts).rstrip())
    return lines


def _lay_out_column(
    texts: dict[Cell, str], column: Column, width: int
) -> tuple[dict[Cell, str | None], dict[Cell, list[str]]]:
    """Lay out each distinct cell of a column ``width`` wide (see :func:`_lay_out`).

    Returns:
        Each cell's one line padded to the width (``None`` for a cell of several lines), and the
        lines of each cell of several.
    """
    one_line: dict[Cell, str | None] = {}
    several: dict[Cell, list[str]] = {}
    wraps = column.wrap is not None
    for cell, text in texts.items():
        if len(text) <= width:  # as _lay_out has it: no break, no cut (a wrappable column drops trailing spaces)
            one_line[cell] = (text.rstrip() if wraps else text).ljust(width)
            continue
        cell_lines = _lay_out(_pieces(cell), column, width)
        if len(cell_lines) == 1:
            one_line[cell] = cell_lines[0].ljust(width)
        else:
            one_line[cell] = None
            several[cell] = cell_lines
    return one_line, several


def _lay_out(pieces: tuple[str, ...], column: Column, width: int) -> list[str]:
    """A cell's lines in a column ``width`` wide: wrapped between pieces (a wrappable or cut column), then cut."""
    packed = _pack(pieces, width) if column.wrap is not None else ["".join(pieces)]
    if column.wrap is None and column.cut is not None and len(packed[0]) > width:
        packed = _pack(pieces, width)  # a cut column breaks between pieces before it cuts
    return [_cut(line, width) for line in packed]


def _join_lines(cells: Sequence[Sequence[str]], widths: Sequence[int]) -> list[str]:
    height = max(len(lines) for lines in cells)
    out = []
    for n in range(height):
        parts = [(lines[n] if n < len(lines) else "").ljust(w) for lines, w in zip(cells, widths, strict=True)]
        out.append(_GAP.join(parts).rstrip())
    return out


def wrap_text(text: str, *, width: int = TABLE_WIDTH, indent: str = "  ") -> str:
    """Wrap a note to ``width`` columns; the lines after the first are indented.

    Words are never broken (a single word longer than the line keeps its own line).

    Examples:
        >>> print(wrap_text("no-op unsupported_build: torch is built without CUDA", width=30))
        no-op unsupported_build: torch
          is built without CUDA
    """
    return textwrap.fill(text, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
