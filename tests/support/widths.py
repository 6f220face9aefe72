"""How wide a docs page's tables and code blocks are, in characters of the content column at 1280 px.

The numbers are those of the Material theme's CSS (``site/assets/stylesheets/main.*.css``) and of
``docs/stylesheets/extra.css``, at a browser window 1280 px wide:

* the root font is 20 px (``html { font-size: 125% }``; 137.5% only from 1600 px on);
* the content column: the grid's ``max-width: 61rem`` (1220 px), less the two sidebars of
  ``12.1rem`` (242 px each) and the content's side margins of ``1.2rem`` (24 px each):
  1220 - 484 - 48 = 688 px (688 px measured in headless Chromium);
* a table's text is ``.64rem`` (12.8 px): Roboto's letters and figures average about 0.55em,
  7 px, and code in a cell is ``0.85em`` of it in Roboto Mono (0.6em: 6.5 px), so a row holds
  688 / 7 = 98 characters (:data:`ROW_CHARACTERS`); each cell's side padding, ``1em`` a side in
  extra.css (the theme's 1.25em), 25.6 px, takes 4 of them (:data:`CELL_PADDING`). extra.css also
  lifts the theme's ``min-width: 5rem`` of a header cell, so a column is as wide as its longest
  unbreakable piece;
* a code block is ``0.54rem`` (10.8 px, extra.css) of Roboto Mono, 6.48 px a character, inside a
  padding of ``1.1765em`` (12.7 px) a side: (688 - 25.4) / 6.48 = 102 characters. Lines are held
  to 100 (:data:`CODE_LINE_CHARACTERS`), the CLI's width, which leaves room for a fallback font
  a little wider than 0.6em (DejaVu Sans Mono: 0.602em).

A cell breaks only at spaces and where ``docs/hooks.py`` lets a long name break (its
``name_pieces``): its narrowest width is that of its longest unbreakable piece. A table fits when
the sum over its columns of the longest piece and the padding fits :data:`ROW_CHARACTERS`.

Checked against the built site in headless Chromium at 1280 px with Roboto and Roboto Mono
(2026-12-03): each table's narrowest width (``width: 1px``) came to 6.1-6.9 px per character
counted here, so 7 px is an upper bound, and no table or code block of a page outside the API
reference was wider than 688 px.

The API reference's code blocks come from the docstrings (:func:`docstring_code_lines`): griffe
dedents a docstring and each of its sections, so a line is measured as the page shows it, less
the indent of the docstring and of its Examples section. Values of module constants are not
measured: mkdocstrings writes a string's ``repr`` on one line whatever the source looks like.
"""

from __future__ import annotations

import ast
import functools
import html
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from support.file_modules import load_file

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"

ROW_CHARACTERS = 98
CELL_PADDING = 4
CODE_LINE_CHARACTERS = 100

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})")
DELIMITER_ROW = re.compile(r"\s*:?-+:?\s*")
LINK_TARGET = re.compile(r"\](?:\([^)]*\)|\[[^\]]*\])")
EXAMPLES_HEADER = re.compile(r"(?P<indent>[ ]*)Examples?:[ ]*")


@functools.cache
def docs_hooks() -> ModuleType:
    """``docs/hooks.py``, the build hooks: the generated sections and the break rule of table cells."""
    return load_file(DOCS / "hooks.py", "ddo_docs_hooks")


def rendered_markdown(text: str) -> str:
    """A page's Markdown with its ``<!-- generated: NAME ... -->`` sections in place, as the site renders it."""
    hooks = docs_hooks()
    return hooks.MARKER.sub(hooks.generated, text)


@dataclass(frozen=True)
class Table:
    line: int  # 1-based, of the header row
    rows: list[list[str]]  # the header row first; the delimiter row left out

    @property
    def header(self) -> str:
        return "| " + " | ".join(self.rows[0]) + " |"


def split_row(line: str) -> list[str]:
    """A table row's cells as Python-Markdown splits them: not at ``\\|``, nor at a ``|`` in code."""
    text = line.strip()
    text = text.removeprefix("|")
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    cells, cell, in_code, i = [], "", False, 0
    while i < len(text):
        char = text[i]
        if char == "\\" and text[i + 1 : i + 2] == "|" and not in_code:
            cell += "\\|"
            i += 2
            continue
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
        i += 1
    cells.append(cell.strip())
    return cells


def _outside_fences(text: str) -> Iterator[tuple[int, str, bool]]:
    """Each line with its 1-based number and whether it is in a fenced code block (fences included)."""
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group("fence")
            yield number, line, fence is not None
        else:
            closing = re.fullmatch(rf"[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*", line)
            yield number, line, True
            if closing:
                fence = None


def tables(text: str) -> list[Table]:
    """The Markdown tables of a page (a header row, a delimiter row, then rows), outside code blocks."""
    found: list[Table] = []
    rows: list[list[str]] = []
    start = 0
    for number, line, in_code in [*_outside_fences(text), (0, "", False)]:
        if not in_code and line.strip().startswith("|"):
            cells = split_row(line)
            if not rows:
                start = number
            if not all(DELIMITER_ROW.fullmatch(cell) for cell in cells):
                rows.append(cells)
            continue
        if rows:
            found.append(Table(start, rows))
            rows = []
    return found


def code_blocks(text: str) -> list[tuple[int, list[str]]]:
    """Each fenced code block as (line of its opening fence, its lines without the fence's indent)."""
    blocks: list[tuple[int, list[str]]] = []
    fence, indent, start, lines = None, "", 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence, indent, start, lines = match.group("fence"), match.group("indent"), number, []
            continue
        if re.fullmatch(rf"[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*", line):
            blocks.append((start, lines))
            fence = None
        else:
            lines.append(line.removeprefix(indent))
    return blocks


def cell_pieces(cell: str, name_pieces: Callable[[str], list[str]]) -> list[str]:
    """The pieces of a cell no line break splits: its text split at spaces, its code also by ``name_pieces``.

    Code and the text next to it without a space make one piece (``(`default`),`` is one), as in
    the browser; a word with a hyphen is one piece (the hook keeps it whole).
    """
    visible = ""
    for i, part in enumerate(re.split(r"`+", cell)):
        if i % 2:  # code: its words as the hook breaks them, \0 where it may break
            visible += "".join(
                word if word.isspace() else "\0".join(name_pieces(word)) for word in re.split(r"(\s+)", part) if word
            )
        else:
            part = LINK_TARGET.sub("", part).replace("![", "").replace("[", "")  # a link shows its text
            part = re.sub(r"<br\s*/?>", " ", part)
            part = re.sub(r"<[^>]+>", "", part)
            part = re.sub(r"\\([\\`*_{}\[\]()#+\-.!|])", r"\1", part)
            part = re.sub(r"\*\*|(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])", "", part)
            visible += html.unescape(part)
    return [piece for piece in re.split(r"[\s\0]+", visible) if piece]


def table_width(table: Table, name_pieces: Callable[[str], list[str]]) -> tuple[int, list[str]]:
    """A table's narrowest row in characters, and each column's longest piece."""
    longest = []
    for column in range(len(table.rows[0])):
        pieces = [p for row in table.rows if column < len(row) for p in cell_pieces(row[column], name_pieces)]
        longest.append(max(pieces, key=len, default=""))
    return sum(len(piece) + CELL_PADDING for piece in longest), longest


def problems(text: str, where: str, name_pieces: Callable[[str], list[str]] | None = None) -> list[str]:
    """What of a page (its rendered Markdown) is wider than the content column, one line each."""
    name_pieces = name_pieces or docs_hooks().name_pieces
    found = []
    for table in tables(text):
        width, longest = table_width(table, name_pieces)
        if width > ROW_CHARACTERS:
            pieces = ", ".join(f"{len(p)} {p!r}" for p in longest)
            found.append(
                f"{where}:{table.line}: the table {table.header[:60]} needs {width} characters a row "
                f"(> {ROW_CHARACTERS}); its columns' longest pieces: {pieces}"
            )
    for start, lines in code_blocks(text):
        longest = max(lines, key=len, default="")
        if len(longest) > CODE_LINE_CHARACTERS:
            found.append(
                f"{where}:{start}: a code block's line of {len(longest)} characters (> {CODE_LINE_CHARACTERS}): "
                f"{longest[:50]}..."
            )
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def docstring_lines(docstring: str) -> list[str]:
    """A docstring's lines dedented as ``inspect.cleandoc`` does, none dropped (line n stays line n)."""
    lines = docstring.expandtabs().split("\n")
    margin = min((_indent(line) for line in lines[1:] if line.strip()), default=0)
    return [lines[0].lstrip(), *(line[margin:] for line in lines[1:])]


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The index after the lines from ``start`` on that are blank or indented deeper than ``indent``."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    return end


def docstring_code_lines(docstring: str) -> list[tuple[int, str]]:
    """The lines of a docstring that the API reference shows in code blocks, as it shows them.

    Each comes as (its 0-based line in the docstring, its text less the indent the page drops):

    * a doctest (a line starting with ``>>>`` and the lines after it up to a blank one: its
      continuations and expected output), less its Examples section's indent, which griffe removes
      (elsewhere, less the ``>>>`` line's indent); a ``# doctest:`` directive counts, though the page
      leaves it out, since ``help()`` shows it;
    * a literal block after a paragraph ending in ``::`` (``docs/griffe_docstrings.py`` makes it an
      indented Markdown code block), less the block's indent;
    * a fenced code block, less its fence's indent.
    """
    lines = docstring_lines(docstring)
    found: dict[int, str] = {}
    section: tuple[int, int] | None = None  # the Examples section's (end, indent of its content)
    i = 0
    while i < len(lines):
        line = lines[i]
        if section is not None and i >= section[0]:
            section = None
        header = EXAMPLES_HEADER.fullmatch(line)
        if header:
            end = _block_end(lines, i + 1, len(header.group("indent")))
            body = [lines[k] for k in range(i + 1, end) if lines[k].strip()]
            section = (end, min((_indent(text) for text in body), default=0))
        elif line.lstrip().startswith(">>>"):
            cut = section[1] if section is not None else _indent(line)
            while i < len(lines) and lines[i].strip():
                found[i] = lines[i][cut:]
                i += 1
            continue
        elif line.rstrip().endswith("::") and not FENCE.match(line):
            end = _block_end(lines, i + 1, _indent(line))
            block = [k for k in range(i + 1, end) if lines[k].strip()]
            cut = min((_indent(lines[k]) for k in block), default=0)
            found.update((k, lines[k][cut:]) for k in block)
            i = end
            continue
        i += 1
    for start, block in code_blocks("\n".join(lines)):  # start: the fence's 1-based line, the first line's 0-based
        found.update((start + n, text) for n, text in enumerate(block))
    return sorted(found.items())


def docstrings(source: str) -> list[tuple[int, int, str]]:
    """Every docstring of a module's source: (the 1-based line of its first line, its last line, its text).

    The docstrings of the module, of its classes and functions at any depth, and the string under
    an assignment that documents the attribute (as griffe reads it).
    """
    found = []

    def add(node: ast.stmt) -> None:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.append((node.value.lineno, node.value.end_lineno or node.value.lineno, node.value.value))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            add(node.body[0])
        if isinstance(node, (ast.Module, ast.ClassDef)):
            for before, after in itertools.pairwise(node.body):
                if isinstance(before, (ast.Assign, ast.AnnAssign)):
                    add(after)
    return sorted(found)


def docstring_problems(source: str, where: str) -> list[str]:
    """The code lines of a module's docstrings wider than the content column, one ``where:line:`` line each.

    A docstring's line n is the source's line n after its first, unless a backslash escape made
    the two counts differ; then its lines are given as the docstring's first line.
    """
    found = []
    for first, last, text in docstrings(source):
        exact = last - first == text.count("\n")
        for index, line in docstring_code_lines(text):
            if len(line) > CODE_LINE_CHARACTERS:
                number = first + index if exact else first
                found.append(
                    f"{where}:{number}: a docstring's code line of {len(line)} characters "
                    f"(> {CODE_LINE_CHARACTERS}): {line[:50]}..."
                )
    return found
