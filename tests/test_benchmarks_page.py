"""docs/benchmarks.md reads well at the page's width: its figure, its tables and its headings."""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
FIGURE = ROOT / "docs" / "img" / "rss-over-time.png"
RESULTS = ROOT / "benchmarks" / "results" / "bench_pinned_memory.json"
PLOT = ROOT / "benchmarks" / "plot_rss.py"

# A table of the Material theme, at the width of its content column (about 690 px at 12.8 px a
# character of 7 px), holds about 98 characters a row, of which each cell's padding takes 5.
ROW_CHARACTERS = 98
CELL_PADDING = 5
LONGEST_CODE_IN_A_TABLE = 16  # the theme breaks code anywhere (mid-word) when a cell is too narrow


def _plot_module() -> Any:
    spec = importlib.util.spec_from_file_location("plot_rss", PLOT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_panel_titles_are_words_and_the_gpu_is_named_once():
    plot = _plot_module()
    doc = json.loads(RESULTS.read_text(encoding="utf-8"))
    configs = {(run["workflow"], run["mode"]) for run in doc["runs"]}
    titles = {plot.panel_title(workflow, mode, doc) for workflow, mode in configs}
    assert "Text encoders dropped after the first call; group offloading, streams, low_cpu_mem_usage=True" in titles
    for title in titles:
        assert "/" not in title
        assert "lcmu" not in title
        assert title[0].isupper()
    assert doc["workload"]["versions"]["gpus"] == ["NVIDIA H200", "NVIDIA H200"]
    assert plot.machine(doc) == "NVIDIA H200"


def test_the_figure_has_one_panel_per_row_and_is_drawn_from_the_checked_in_results(tmp_path: Path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed (pip install -e '.[dev]' adds it)")
    out = tmp_path / "rss.png"
    proc = subprocess.run(
        [sys.executable, str(PLOT), str(RESULTS), "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"wrote {out} (5 panels)\n"
    drawn, checked_in = _png_size(out), _png_size(FIGURE)
    assert drawn == checked_in, "regenerate docs/img/rss-over-time.png with benchmarks/plot_rss.py"
    width, height = checked_in
    assert width <= 900  # shown at the page's width without shrinking the text much
    assert height > 1.5 * width  # five panels, one per row


def _tables(text: str) -> list[list[list[str]]]:
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _longest_word(cell: str) -> int:
    visible = re.sub(r"\*\*|`", "", cell)
    return max((len(word) for word in visible.split()), default=0)


def test_the_tables_fit_the_page_without_breaking_code_mid_word():
    problems = []
    for table in _tables(PAGE.read_text(encoding="utf-8")):
        header = " | ".join(table[0])
        columns = len(table[0])
        narrowest = sum(max(_longest_word(row[i]) for row in table if i < len(row)) for i in range(columns))
        if narrowest + CELL_PADDING * columns > ROW_CHARACTERS:
            problems.append(f"| {header} |: needs {narrowest + CELL_PADDING * columns} characters a row")
        for row in table:
            for code in re.findall(r"`([^`]+)`", " ".join(row)):
                if len(code) > LONGEST_CODE_IN_A_TABLE:
                    problems.append(f"| {header} |: the code `{code}` is longer than {LONGEST_CODE_IN_A_TABLE}")
    assert not problems, "\n".join(problems)


def test_headings_mean_something_to_an_outsider():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    vague = []
    for page in pages:
        for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE):
            if re.search(r"\bissues? #?\d+|#\d+\b|^\([a-z]\) |\blcmu\b", heading, flags=re.IGNORECASE):
                vague.append(f"{page.relative_to(ROOT)}: {heading}")
    assert not vague, "\n".join(vague)
