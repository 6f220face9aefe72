"""Every docs page fits the content column at 1280 px: its tables without breaking a word, its code blocks.

The measure and its constants are in ``tests/support/widths.py``; the break rule of table cells is
``docs/hooks.py``'s (``name_pieces``, ``on_page_content``) and ``docs/stylesheets/extra.css``'s.
The API reference's code blocks are its modules' docstring examples, measured in the source.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.api_modules import module_file, public_modules
from support.widths import (
    CELL_PADDING,
    CODE_LINE_CHARACTERS,
    DOCS,
    ROOT,
    ROW_CHARACTERS,
    cell_pieces,
    docs_hooks,
    docstring_code_lines,
    docstring_problems,
    problems,
    rendered_markdown,
    split_row,
    tables,
)

PAGES = sorted(DOCS.rglob("*.md"))
MODULES = [(name, module_file(name, is_package)) for name, is_package in public_modules().items()]
HOOKS = docs_hooks()
CSS = (DOCS / "stylesheets" / "extra.css").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_the_tables_and_code_blocks_of_the_page_fit_the_content_column(page: Path):
    where = page.relative_to(DOCS).as_posix()
    found = problems(rendered_markdown(page.read_text(encoding="utf-8")), where)
    assert not found, "\n".join(found)


def test_every_page_is_measured_with_its_generated_sections():
    assert len(PAGES) > 20
    fields = sorted(DOCS.glob("reports-*.md"))  # the report reference's pages of fields, one per family of routes
    assert len(fields) >= 7
    rendered = "\n".join(rendered_markdown(page.read_text(encoding="utf-8")) for page in fields)
    assert "<!-- generated:" not in rendered
    assert len(tables(rendered)) > 20  # the report reference's tables


def test_a_table_too_wide_for_the_column_is_flagged():
    cell = "`" + "_".join(["before", "transformer"]) + "`"  # 18 characters: one piece
    row = "| " + " | ".join([cell] * 5) + " |"
    text = f"# A page\n\n| a | b | c | d | e |\n|---|---|---|---|---|\n{row}\n"
    found = problems(text, "page.md", HOOKS.name_pieces)
    needed = 5 * (18 + CELL_PADDING)
    assert needed > ROW_CHARACTERS
    assert found == [
        f"page.md:3: the table | a | b | c | d | e | needs {needed} characters a row (> {ROW_CHARACTERS}); its "
        "columns' longest pieces: " + ", ".join(["18 'before_transformer'"] * 5)
    ]
    four = "| a | b | c | d |\n|---|---|---|---|\n| " + " | ".join([cell] * 4) + " |\n"
    assert problems(four, "page.md", HOOKS.name_pieces) == []  # 92 characters


def test_a_long_name_breaks_between_its_words_and_a_short_one_or_a_dashed_word_not():
    long_name = "dynamic_offload_vmm_native_source_cache_slot_mb"
    assert HOOKS.name_pieces(long_name) == [
        "dynamic_",
        "offload_",
        "vmm_",
        "native_",
        "source_",
        "cache_",
        "slot_",
        "mb",
    ]
    assert HOOKS.name_pieces("low_cpu_mem_usage=True") == ["low_cpu_mem_usage=True"]
    assert HOOKS.name_pieces("host_before/host_after.available_physical_bytes")[:3] == [
        "host_", "before/", "host_"
    ]  # fmt: skip
    assert HOOKS.name_pieces("x" * 30 + "--y") == ["x" * 30 + "--y"]  # no word before the second dash
    assert HOOKS.name_pieces("^[a-z][a-z0-9_.\\-]{0,63}$") == ["^[a-z][a-z0-9_.\\-]{0,63}$"]  # a pattern
    cell = "`pinned_copies.from_files: register` (`lowest-peak`), a per-call `before_transformer`"
    assert cell_pieces(cell, HOOKS.name_pieces) == [
        "pinned_", "copies.", "from_", "files:", "register", "(lowest-peak),", "a", "per-call", "before_transformer",
    ]  # fmt: skip


def test_the_hook_writes_the_breaks_the_measure_counts():
    cell = (
        "<td><code>dynamic_offload_vmm_host_cache_gb</code>, <code>before_transformer</code> "
        '(<a href="#x">lowest-peak</a>, <code>a &amp;&amp; b_c</code>, 2.40\u20132.98)</td>'
    )
    out = HOOKS.on_page_content(
        f"<table><thead><tr><th>A-b</th></tr></thead><tbody><tr>{cell}</tr></tbody></table>", None, None, None
    )
    assert out == (
        '<table><thead><tr><th><span class="ddo-whole">A-b</span></th></tr></thead><tbody><tr>'
        "<td><code>dynamic_<wbr>offload_<wbr>vmm_<wbr>host_<wbr>cache_<wbr>gb</code>, "
        '<code>before_transformer</code> (<a href="#x"><span class="ddo-whole">lowest-peak</span></a>, '
        '<code>a <span class="ddo-whole">&amp;&amp;</span> b_c</code>, <span class="ddo-whole">2.40\u20132.98)</span>'
        "</td></tr></tbody></table>"
    )
    dashed = HOOKS.on_page_content("<td><code>flux-group-block-low-cpu-mem</code> <code>^[a-z]</code></td>", 0, 0, 0)
    assert dashed == (
        '<td><code><span class="ddo-whole">flux-</span><wbr><span class="ddo-whole">group-</span><wbr>'
        '<span class="ddo-whole">block-</span><wbr><span class="ddo-whole">low-</span><wbr>'
        '<span class="ddo-whole">cpu-</span><wbr>mem</code> <code><span class="ddo-whole">^[a-z]</span></code></td>'
    )
    text = "<p><code>outside_a_table_is_left_as_it_is_whatever_its_length</code></p>"
    assert HOOKS.on_page_content(text, None, None, None) == text
    visible = re.sub(r"<(?!wbr)[^>]+>", "", out.split("<td>")[1]).replace("&amp;", "&")
    markdown = (
        "`dynamic_offload_vmm_host_cache_gb`, `before_transformer` ([lowest-peak](#x), `a && b_c`, 2.40\u20132.98)"
    )
    assert re.split(r"\s+|<wbr>", visible) == cell_pieces(markdown, HOOKS.name_pieces)


def test_a_code_line_too_long_for_the_column_is_flagged_and_tables_in_code_blocks_are_not_tables():
    long_line = "x = " + "1" * (CODE_LINE_CHARACTERS - 3)
    wide = "| " + " | ".join(["a" * 15] * 5) + " |\n|---|---|---|---|---|\n"  # 100 characters as a table
    assert len(tables(wide)) == 1
    text = f"# A page\n\n```python\n{long_line}\n```\n\n```text\n{wide}```\n"
    assert tables(text) == []
    assert problems(text, "page.md", HOOKS.name_pieces) == [
        f"page.md:3: a code block's line of {CODE_LINE_CHARACTERS + 1} characters (> {CODE_LINE_CHARACTERS}): "
        f"{long_line[:50]}..."
    ]
    fits = f"- a list\n\n    ```python\n    {long_line[:-1]}\n    ```\n"
    assert problems(fits, "page.md", HOOKS.name_pieces) == []


def test_cells_split_as_python_markdown_splits_them():
    assert split_row("| `a|b` | c \\| d | e |") == ["`a|b`", "c \\| d", "e"]
    assert cell_pieces("c \\| d **bold** [a link](https://example.org/a_very_long_address)", HOOKS.name_pieces) == [
        "c", "|", "d", "bold", "a", "link",
    ]  # fmt: skip


def test_the_stylesheet_lays_out_tables_and_code_blocks_as_the_measure_counts():
    css = re.sub(r"/\*.*?\*/", "", CSS, flags=re.DOTALL)
    rules = {
        " ".join(selectors.split()): " ".join(body.split())
        for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", css)
    }
    table = ".md-typeset table:not([class])"
    assert rules[f"{table} th"] == "min-width: 0;"  # the theme's 5rem would widen short columns
    cells = rules[f"{table} td, {table} th"]
    assert "padding-right: 1em; padding-left: 1em;" in cells  # CELL_PADDING
    assert "overflow-wrap: normal;" in cells
    assert rules[f"{table} code"] == "word-break: normal; overflow-wrap: normal;"  # not the theme's break-word
    assert rules[f"{table} .ddo-whole"] == "white-space: nowrap;"
    assert rules[".md-typeset pre > code"] == "font-size: 0.54rem;"  # CODE_LINE_CHARACTERS' font
    assert rules[".md-typeset .doc-signature pre > code"] == "white-space: pre-wrap;"  # constants' values wrap


@pytest.mark.parametrize("path", [path for _, path in MODULES], ids=[name for name, _ in MODULES])
def test_the_code_lines_of_the_module_docstrings_fit_the_content_column(path: Path):
    where = path.relative_to(ROOT).as_posix()
    found = docstring_problems(path.read_text(encoding="utf-8"), where)
    assert not found, "\n".join(found)


def test_every_public_module_is_measured_and_no_private_one():
    names = [name for name, _ in MODULES]
    assert len(names) > 60
    assert {"ddo_hooks", "ddo_hooks.cli.totals", "ddo_hooks.reports.ddo.mapping"} <= set(names)
    assert not [name for name in names if any(part.startswith("_") for part in name.split("."))]
    pages = "".join(page.read_text(encoding="utf-8") for page in (DOCS / "api").glob("*.md"))
    documented = set(re.findall(r"^::: (\S+)", pages, flags=re.MULTILINE))
    assert documented <= set(names)  # every module of the API reference is measured


def test_a_docstring_code_line_too_long_for_the_column_is_flagged_where_it_is(tmp_path: Path):
    over = CODE_LINE_CHARACTERS + 1
    prose = "a sentence " * 20  # prose wraps: never measured
    lines = [
        '"""A module.',
        "",
        prose,
        "",
        "Examples:",
        "    >>> " + "x" * (CODE_LINE_CHARACTERS - 4),  # 6: fits, less the section's indent
        "    >>> g(1,",
        "    ...   " + "x" * (over - 6),  # 8: a continuation line
        "    " + "y" * over,  # 9: expected output
        "",
        "    " + prose,
        '"""',
        "",
        "CONSTANT = 1",
        f'"""... {prose}"""',  # 15: an attribute's docstring, prose
        "",
        "",
        "class Thing:",
        '    """A class.',
        "",
        "    A table of what it does::",
        "",
        "        " + "z" * over,  # 23: a literal block
        "",
        "    " + prose,
        '    """',
        "",
        "    def method(self):",
        '        """A method.',
        "",
        "        Examples:",
        "            >>> Thing().method()  # doctest: +ELLIPSIS",
        "            " + "w" * over,  # 33: a method's expected output
        '        """',
    ]
    module = tmp_path / "module.py"
    module.write_text("\n".join(lines) + "\n", encoding="utf-8")
    found = docstring_problems(module.read_text(encoding="utf-8"), "module.py")
    assert found == [
        f"module.py:{number}: a docstring's code line of {over} characters (> {CODE_LINE_CHARACTERS}): {text[:50]}..."
        for number, text in [(8, "...   " + "x" * (over - 6)), (9, "y" * over), (23, "z" * over), (33, "w" * over)]
    ]
    fixed = [line[:-1] if line.endswith(("x", "y", "z", "w")) else line for line in lines]
    assert docstring_problems("\n".join(fixed), "module.py") == []
    # A backslash at a line's end joins two source lines into one docstring line: given at the docstring's first.
    joined = '"""Summary.\n\n>>> f()\n' + "a" * 60 + " \\\n" + "b" * 60 + '\n"""\n'
    assert [line.split(": a docstring")[0] for line in docstring_problems(joined, "m.py")] == ["m.py:1"]


def test_a_docstring_code_line_is_measured_without_the_indent_the_page_drops():
    docstring = """Summary.

    Examples:
        Some text first:

        >>> a = 1
        ... # the section's indent goes, this line's own does not
          2

    A literal block::

            indented = "by its block's indent"

    ```python
    fenced = "by its fence's indent"
    ```
    """
    assert docstring_code_lines(docstring) == [
        (5, ">>> a = 1"),
        (6, "... # the section's indent goes, this line's own does not"),
        (7, "  2"),
        (11, 'indented = "by its block\'s indent"'),
        (14, 'fenced = "by its fence\'s indent"'),
    ]
    assert docstring_code_lines("Summary.\n\n>>> 1 + 1\n2\n") == [(2, ">>> 1 + 1"), (3, "2")]
    assert docstring_code_lines("... and a sentence that starts with an ellipsis") == []
