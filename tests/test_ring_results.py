"""The ring runtime's page says what its checked-in GPU runs measured (``benchmarks/ring_results.py``)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import ring_results  # noqa: E402

PAGE = (ROOT / "docs" / "ring-runtime.md").read_text()


def test_the_speed_table_is_the_runs():
    rows = [row for name in ring_results.RUNS for row in ring_results.speed(name)]
    assert [line for line in ring_results.speed_table(rows) if line not in PAGE] == []
    streamed = [row for row in rows if row["arm"] == "true/preset:streamed-box@none"]
    ddo = [row for row in rows if row["arm"] == "false/ddo-auto"]
    assert all(row["n"] >= 6 for row in rows if row["run"] == "ring-h100-2")
    assert all(row["rest"] <= 1.5 for row in streamed)  # "GPU at rest 1.48 GiB"
    assert max(row["steady"] for row in streamed) / ddo[0]["steady"] < 0.75  # "about 0.7 of theirs"


def test_the_probe_sentences_are_the_probes():
    text = " ".join(PAGE.split())
    assert [line for line in ring_results.probe_lines() if line not in text] == []


def test_the_readme_and_the_benchmarks_page_quote_the_runs():
    first = {row["arm"]: row["steady"] for row in ring_results.speed("ring-h100")}
    second = {row["arm"]: row["steady"] for row in ring_results.speed("ring-h100-2")}
    streamed, resident = "true/preset:streamed-box@none", "true/resident@none"
    assert {row["n"] for row in ring_results.speed("ring-h100")} == {3, 4}  # "3 to 4 processes an arm"
    assert {row["n"] for row in ring_results.speed("ring-h100-2")} == {6}  # "over 6 each"
    readme = " ".join((ROOT / "README.md").read_text().split())
    benchmarks = " ".join((ROOT / "docs" / "benchmarks.md").read_text().split())
    assert f"{first['false/ddo-auto']:.2f}" == f"{first['true/preset:smallest-box@ddo']:.2f}"  # one figure for both
    assert (
        f"a steady call of {first[streamed]:.2f} s where DDO took {first['false/ddo-auto']:.2f} s and the pipeline "
        f"resident on the GPU {first[resident]:.2f} s, 3 to 4 processes an arm; {second[streamed]:.2f} s against "
        f"{second[resident]:.2f} s resident over 6 each"
    ) in readme
    assert (
        f"made its steady calls in {first[streamed]:.2f} s where `smallest-box` on DDO and DDO `auto` took "
        f"{first['false/ddo-auto']:.2f} s and the pipeline resident on the GPU {first[resident]:.2f} s"
    ) in benchmarks
    assert f"in a second run, {second[streamed]:.2f} s against {second[resident]:.2f} s resident" in benchmarks
    third = {row["arm"]: row for row in ring_results.speed("ring-h100-3")}
    assert {row["n"] for row in third.values()} == {5}  # "5 processes each"
    assert (
        f"in a third, after the hooks' host side was made cheaper, {third[streamed]['steady']:.2f} s against "
        f"{third[resident]['steady']:.2f} s resident (5 processes each)" in benchmarks
    )


def test_the_third_run_and_its_timeline_are_quoted_as_measured():
    text = " ".join(PAGE.split())
    third = {row["arm"]: row for row in ring_results.speed("ring-h100-3")}
    streamed, resident = third["true/preset:streamed-box@none"], third["true/resident@none"]
    assert (
        f"`streamed-box` made its steady calls in {streamed['steady']:.2f} s against {resident['steady']:.2f} s "
        f"resident ({streamed['step_ms']:.1f} against {resident['step_ms']:.1f} ms a step; slower in "
        f"{streamed['slower']} of {streamed['pairs']} pairs)"
    ) in text
    import json

    timeline = json.loads((ring_results.RESULTS / "probe_ring_timeline-h100-2.json").read_text())
    assert (
        f"gave {timeline['step_ms']:.1f} ms a step, the link busy {timeline['link_busy']:.0%}, the compute "
        f"{timeline['compute_busy']:.0%}"
    ) in text
