"""Draw RSS over time for the four arms from ``bench_pinned_memory.json`` (needs matplotlib).

One panel per workflow/offload mode; time runs from the start of each arm's work (the encoding or the first
call); triangles mark each call's start, dots the executed ddo_hooks boundaries (right after each release).

Run: ``python benchmarks/plot_rss.py OUT/bench_pinned_memory.json --out docs/img/rss-over-time.png``
(``--config b/group_lcmu_true`` to draw only some panels, ``--whole`` to start at loading).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

ARMS = {
    "nothing": ("1 nothing", "#555555"),
    "gc_empty_cache": ("2 gc.collect + empty_cache", "#e69f00"),
    "flush": ("3 flush after each call (mmgp)", "#0072b2"),
    "ddo_hooks": ("4 ddo_hooks, three boundaries", "#009e73"),
}


def arm_series(result: dict[str, Any], whole: bool) -> tuple[float, list[float], list[float]]:
    """The origin (seconds after the sampler started), then seconds from it and RSS in GiB."""
    events = {name: t / 1e3 for t, name in result["events"]}
    origin, end = (0.0 if whole else events["work_start"]), events["work_end"]
    series = zip(result["series"]["t_ms"], result["series"]["rss_kib"], strict=True)
    pairs = [(t / 1e3 - origin, kib / 2**20) for t, kib in series if origin <= t / 1e3 <= end]
    return origin, [p[0] for p in pairs], [p[1] for p in pairs]


def marks(result: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Seconds after the sampler started: each call's start, and each executed ddo_hooks boundary."""
    starts = [t / 1e3 for t, name in result["events"] if name.startswith("call") and name.endswith("_start")]
    releases = [b["report"]["setup"].get("host_cache_release") or {} for b in result["boundaries"]]
    executed = [b["t"] for b, r in zip(result["boundaries"], releases, strict=True) if r.get("status") == "executed"]
    return starts, executed


def draw_panel(ax: Any, title: str, runs: list[dict[str, Any]], whole: bool) -> None:
    top = 0.0
    for run in sorted(runs, key=lambda r: list(ARMS).index(r["arm"])):
        label, color = ARMS[run["arm"]]
        origin, t, rss = arm_series(run["result"], whole)
        if not t:
            continue
        ax.plot(t, rss, color=color, lw=1.3, label=label)
        top = max(top, *rss)
        starts, executed = marks(run["result"])
        for times, marker in ((starts, "v"), (executed, "o")):
            at = [x - origin for x in times]
            near = [rss[min(range(len(t)), key=lambda i, a=a: abs(t[i] - a))] for a in at]
            ax.plot(at, near, marker, color=color, ms=4, ls="none")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("seconds since loading started" if whole else "seconds since the work started")
    ax.set_ylabel("RSS (GiB)")
    ax.set_ylim(0, top * 1.08 or 1)
    ax.grid(alpha=0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="bench_pinned_memory.json")
    parser.add_argument("--out", type=Path, default=Path("docs/img/rss-over-time.png"))
    parser.add_argument("--config", action="append", default=[], help="WORKFLOW/MODE panels to draw (default all)")
    parser.add_argument("--whole", action="store_true", help="from each process's start, loading included")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(args.json.read_text())
    panels: dict[str, list[dict[str, Any]]] = {}
    for run in doc["runs"]:
        config = f"{run['workflow']}/{run['mode']}"
        if run["status"] == "ok" and (not args.config or config in args.config):
            panels.setdefault(config, []).append(run)
    if not panels:
        raise SystemExit(f"{args.json}: no finished arm to draw")
    modes, workflows = doc["settings"]["modes"], doc["settings"]["workflows"]
    columns = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / columns)
    height = 3.6 * rows + (0.9 if columns == 2 else 1.2)  # inches: panels, the title above, the legend below
    fig, axes = plt.subplots(rows, columns, figsize=(7.5 * columns, height), squeeze=False)
    for ax, (config, runs) in zip(axes.flat, panels.items(), strict=False):
        workflow, mode = config.split("/")
        draw_panel(ax, f"{config}: {workflows[workflow]};\n{modes[mode]}", runs, args.whole)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=2 * columns, fontsize=9, frameon=False)
    versions = (doc.get("workload") or {}).get("versions", {})
    machine = ", ".join(versions.get("gpus") or ["CPU"])
    fig.suptitle(f"RSS over time ({machine}; torch {versions.get('torch')}; size {doc['settings']['size']})")
    fig.tight_layout(rect=(0, (0.4 if columns == 2 else 0.7) / height, 1, 1 - 0.3 / height))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({len(panels)} panels)")


if __name__ == "__main__":
    main()
