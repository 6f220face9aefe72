"""bench_census: both counts of resident file pages agree, and docs/benchmarks-costs.md holds its checked-in figures."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
from support.file_modules import load_file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bench_census.json"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/pagemap")


def test_both_counts_agree_on_real_file_views_and_the_results_are_written(tmp_path: Path, capsys):
    bench = load_file(ROOT / "benchmarks" / "bench_census.py", "bench_census_under_test", beside=True)
    assert bench.main(["--gib", "0.0625", "--reps", "2", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench_census.json").read_text())
    assert result["agree"]
    assert result["bytes"] == 64 * 2**20
    (resident, written), _ = result["counts"][0]
    pages = 64 * 2**20 // 4096  # every page read (one more: the first weight starts after the file's header)
    assert (resident, written) in ((pages, 0), (pages + 1, 0))
    assert "counts agree: True" in capsys.readouterr().out


def test_the_page_holds_the_checked_in_figures():
    result = json.loads(RESULTS.read_text())
    seconds = result["seconds"]

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.4f} ({min(values):.4f}\u2013{max(values):.4f})"

    text = (ROOT / "docs" / "benchmarks-costs.md").read_text(encoding="utf-8")
    rows = {"counted entry by entry (before)": "entry_by_entry", "counted a chunk at a time (now)": "chunked",
            "the whole give-back (now)": "give_back"}  # fmt: skip
    for label, key in rows.items():
        assert f"| {label} | {cell(seconds[key])} |" in text
    assert result["agree"]
    assert result["reps"] == 9
    shown = " ".join(text.split())
    ratio = statistics.median(seconds["entry_by_entry"]) / statistics.median(seconds["chunked"])
    resident = result["counts"][0][0][0]
    assert f"Both counts agreed at every repetition ({resident:,} resident pages, none written); the count is" in shown
    assert f"the count is {ratio:.0f}\u00d7 faster (medians)" in shown
    before, now, give_back = (statistics.median(seconds[k]) for k in ("entry_by_entry", "chunked", "give_back"))
    # quoted where the register presets' give-back is timed
    timings = " ".join((ROOT / "docs" / "benchmarks-box-timings.md").read_text(encoding="utf-8").split())
    assert f"that count alone took {before:.3f} s for these 1.38 GiB" in timings
    assert f"pages): {now:.4f} s, and the whole give-back of 1.38 GiB in {give_back:.3f} s)" in timings
    assert f"{result['bytes'] / 2**30:.2f} GiB of random bf16 weights" in shown
    assert f"a load average of {result['load_average']:.1f})" in shown
    assert f"torch {result['versions']['torch'].split('+')[0]}, 2026-12-03" in shown
