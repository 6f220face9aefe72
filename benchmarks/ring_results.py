"""The ring runtime's GPU runs, read from their checked-in results: the tables of ``docs/ring-runtime.md``.

``bench_box-ring-h100.json`` (four arms interleaved, cut by its time budget after 3 or 4 processes an
arm), ``bench_box-ring-h100-2.json`` (the pipeline resident on the GPU and ``streamed-box``, 6
processes each) and ``bench_box-ring-h100-3.json`` (the same two arms, 5 processes each, after the hooks'
host side was made cheaper), on one H100 each; ``probe_overlap-h100.json`` and ``probe_ring_timeline-h100.json``
from the same machine as the first. ``tests/test_ring_results.py`` holds the page to these rows.

    python3 benchmarks/ring_results.py     (prints the tables)
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 2**30
RUNS = ("ring-h100", "ring-h100-2", "ring-h100-3")
"""The runs, ``bench_box-<name>.json``."""
LABELS = {
    "true/resident@none": "resident on the GPU",
    "true/preset:streamed-box@none": "`streamed-box`",
    "true/preset:smallest-box@ddo": "`smallest-box` on DDO",
    "false/ddo-auto": "DDO `auto`",
}
BASELINE = "true/resident@none"


def _calls(trial: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in trial["steps"] if s["event"] == "call"]


def speed(name: str, results: Path = RESULTS) -> list[dict[str, Any]]:
    """Each arm of one run: steady call (per process the median of calls 2 to 4; then the median over the
    processes, min and max), the denoising per step (20 steps), the GPU at rest after the last call and its peak,
    the cgroup's ``memory.peak`` of the first process (page cache dropped before it: later ones ran warm), and in
    how many of the run's pairs (the k-th process of each) the arm was slower than the resident one."""
    record = json.loads((results / f"bench_box-{name}.json").read_text())
    steps = int(record["settings"]["steps"])
    per_arm: dict[str, list[dict[str, float]]] = {}
    for arm, runs in record["arms"].items():
        for trial in runs["unboxed"]:
            later = [c for c in _calls(trial) if c["index"] > 0]
            if not later:
                continue
            per_arm.setdefault(arm, []).append({
                "steady": statistics.median(c["seconds"] for c in later),
                "step_ms": statistics.median(c["phases"]["decode"] - c["phases"]["denoise"] for c in later)
                / steps * 1e3,
                "rest": later[-1]["gpu"]["allocated"] / GIB,
                "gpu_peak": max(c["gpu"]["max_allocated"] for c in later) / GIB,
                "peak": trial["memory_peak"] / GIB,
            })  # fmt: skip
    baseline = [p["steady"] for p in per_arm.get(BASELINE, [])]
    found = []
    for arm, per in per_arm.items():
        own = [p["steady"] for p in per]
        pairs = list(zip(own, baseline, strict=False))
        found.append({
            "run": name, "arm": arm, "n": len(per), "steady": statistics.median(own), "spread": (min(own), max(own)),
            "step_ms": statistics.median(p["step_ms"] for p in per),
            "rest": statistics.median(p["rest"] for p in per), "gpu_peak": max(p["gpu_peak"] for p in per),
            "peak": per[0]["peak"], "slower": sum(a > b for a, b in pairs), "pairs": len(pairs),
        })  # fmt: skip
    return found


def speed_table(rows: list[dict[str, Any]]) -> list[str]:
    """The Markdown rows of the page's table of speed (one row per run and arm)."""
    lines = []
    for row in rows:
        low, high = row["spread"]
        versus = "-" if row["arm"] == BASELINE else f"{row['slower']} of {row['pairs']}"
        lines.append(
            f"| `{row['run']}` | {LABELS[row['arm']]} | {row['n']} | {row['steady']:.2f} ({low:.2f}\u2013{high:.2f}) | "
            f"{row['step_ms']:.1f} | {versus} | {row['rest']:.2f} | {row['gpu_peak']:.2f} | {row['peak']:.2f} |"
        )
    return lines


def probe_lines(results: Path = RESULTS) -> list[str]:
    """The page's sentences of what the probe and the timeline measured."""
    probe = json.loads((results / "probe_overlap-h100.json").read_text())
    timeline = json.loads((results / "probe_ring_timeline-h100.json").read_text())
    forward, copies = probe["forward"], probe["copies"]
    return [
        f"the CPU issues a resident transformer forward in {forward['issue_s'] * 1e3:.1f} ms and the GPU runs it in "
        f"{forward['gpu_s'] * 1e3:.1f} ms",
        f"{copies['tensors']} block weights ({copies['bytes'] / 1e9:.2f} GB) copy from their registered pages at "
        f"{copies['alone_gbps']:.1f} GB/s alone and {copies['beside_gbps']:.1f} GB/s beside the forward, which then "
        f"takes {copies['forward_beside_s'] * 1e3:.1f} ms",
        f"under the ring, {timeline['step_ms']:.1f} ms a step; the link busy {timeline['link_busy']:.0%} of it, "
        f"the compute {timeline['compute_busy']:.0%}",
    ]


def main() -> None:
    print("\n".join([*speed_table([row for name in RUNS for row in speed(name)]), "", *probe_lines()]))


if __name__ == "__main__":
    main()
