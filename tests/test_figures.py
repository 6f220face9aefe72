"""No label of a figure the docs show overlaps another: each is drawn as its script draws it, every text measured.

The texts are those a reader sees: titles, axis labels, the tick labels within the view, annotations and texts,
legend entries. A check that found the two labels of ``docs/img/box.png`` on top of each other (and one on the
title) before they became numbers with a key beside the axes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.file_modules import load_file

pytest.importorskip("matplotlib", reason="the plot extra is not installed (pip install -e '.[dev]' adds it)")

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def shown_texts(fig: Any) -> list[Any]:
    """The texts of ``fig`` a reader sees (tick labels only within the axes' view)."""
    found = list(fig.texts)
    for legend in fig.legends:
        found += legend.get_texts()
    if fig._suptitle is not None:
        found.append(fig._suptitle)
    for ax in fig.axes:
        found += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        if ax.get_legend() is not None:
            found += ax.get_legend().get_texts()
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            found += [tick.label1 for tick in axis.get_major_ticks() if low <= tick.get_loc() <= high]
    unique = {id(text): text for text in found}  # the suptitle is one of fig.texts too
    return [text for text in unique.values() if text.get_visible() and text.get_text().strip()]


def overlapping(fig: Any) -> list[tuple[str, str]]:
    """Each pair of shown texts whose drawn boxes overlap."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(text.get_text(), text.get_window_extent(renderer)) for text in shown_texts(fig)]
    return [(a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1 :] if box.overlaps(other)]


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The figures the scripts close once saved, kept for measuring."""
    import matplotlib.pyplot as plt

    figures: list[Any] = []
    close = plt.close
    monkeypatch.setattr(plt, "close", figures.append)
    yield figures
    for fig in figures:
        close(fig)


def test_the_check_finds_two_labels_on_top_of_each_other():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.annotate("default + register", (0.5, 0.5))
    ax.annotate("lowest-peak + register", (0.52, 0.51))
    try:
        assert ("default + register", "lowest-peak + register") in overlapping(fig)
    finally:
        plt.close(fig)


def test_the_box_figures_have_no_overlapping_label(tmp_path, kept):
    box = load_file(BENCHMARKS / "plot_box.py", "plot_box", beside=True)
    runtimes = load_file(BENCHMARKS / "plot_runtimes.py", "plot_runtimes", beside=True)
    for fig in (box.draw(box.rows(), tmp_path / "box.png"), runtimes.draw(runtimes.rows(), tmp_path / "rt.png")):
        kept.append(fig)
        assert overlapping(fig) == []
    assert "lcmu" not in " ".join(text.get_text() for fig in kept for text in shown_texts(fig))  # spelled out


def test_the_floor_and_rss_figures_have_no_overlapping_label(tmp_path, kept):
    import json

    floor = load_file(BENCHMARKS / "plot_floor.py", "plot_floor")
    floor.draw(tmp_path / "floor.png")
    rss = load_file(BENCHMARKS / "plot_rss.py", "plot_rss")
    kept.append(rss.draw(json.loads((BENCHMARKS / "results" / "bench_pinned_memory.json").read_text("utf-8"))))
    for fig in kept:
        assert overlapping(fig) == []


def test_the_summarize_plot_of_the_h200_run_has_no_overlapping_label(tmp_path, kept):
    from ddo_hooks.cli.inputs import read_reports
    from ddo_hooks.cli.plot import draw_runs

    draw_runs(read_reports([str(ROOT / "examples" / "reports" / "h200-flux-lowest-peak.jsonl")]), tmp_path / "h.png")
    (fig,) = kept
    assert overlapping(fig) == []
