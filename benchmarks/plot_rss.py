"""Draw RSS over time for the four arms from ``bench_pinned_memory.json`` (needs matplotlib).

One panel per workflow and offload mode, one panel per row, each titled in words; time runs from the start
of each arm's work (the encoding or the first call); triangles mark each call's start, dots the executed
ddo_hooks boundaries (right after each release). The legend of every panel sits under the title, above
the first panel, where a reader looks before reading a line; the GPU is named once, in the title. Drawn
688 pixels wide, the docs' content column at 1280 px, so that it is shown at the size it is drawn.

Run: ``python benchmarks/plot_rss.py OUT/bench_pinned_memory.json --out docs/img/rss-over-time.png``
(``--config b/group_lcmu_true`` to draw only some panels, ``--whole`` to start at loading).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ARMS = {
    "nothing": ("1 nothing", "#555555"),
    "gc_empty_cache": ("2 gc.collect + empty_cache after each call", "#e69f00"),
    "flush": ("3 flush after each call (as mmgp does)", "#0072b2"),
    "ddo_hooks": ("4 ddo_hooks, three boundaries", "#009e73"),
}

WORKFLOWS = {
    "a": "Everything stays loaded",
    "b": "Text encoders dropped after the first call",
}
"""Each workflow of the benchmark, in words (the JSON's ``settings.workflows`` keys)."""

MODES = {
    "group_lcmu_true": "group offloading, streams, low_cpu_mem_usage=True",
    "group_lcmu_false": "group offloading, streams, low_cpu_mem_usage=False",
    "model_offload": "model CPU offload (pins nothing)",
}
"""Each offload mode, in words (the JSON's ``settings.modes`` keys)."""

CALL_MARKER = "v"
RELEASE_MARKER = "o"


def panel_title(workflow: str, mode: str, doc: dict[str, Any] | None = None) -> str:
    """A panel's title in words, e.g. "Text encoders dropped after the first call; group offloading, ..."."""
    settings = (doc or {}).get("settings", {})
    first = WORKFLOWS.get(workflow) or settings.get("workflows", {}).get(workflow, workflow)
    second = MODES.get(mode) or settings.get("modes", {}).get(mode, mode)
    return f"{first}; {second}"


def machine(doc: dict[str, Any]) -> str:
    """The GPU, named once (the JSON lists every visible GPU): "NVIDIA H200", "2 GPUs: A, B" or "CPU"."""
    gpus = list(dict.fromkeys((doc.get("workload") or {}).get("versions", {}).get("gpus") or []))
    if not gpus:
        return "CPU"
    return gpus[0] if len(gpus) == 1 else f"{len(gpus)} GPUs: {', '.join(gpus)}"


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


SHOWN_WIDTH = 688
"""Pixels: the docs' content column at 1280 px (tests/test_site.py). The figure is drawn at this width, so
that it is shown at its size and each text at the size it was drawn at."""

DPI = 100
FONT = {"title": 11, "panel": 10, "legend": 10, "label": 9.5, "tick": 9}
"""Points, at :data:`DPI`: 9 points are 12.5 pixels, the smallest text of the figure."""


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
        for times, marker in ((starts, CALL_MARKER), (executed, RELEASE_MARKER)):
            at = [x - origin for x in times]
            near = [rss[min(range(len(t)), key=lambda i, a=a: abs(t[i] - a))] for a in at]
            ax.plot(at, near, marker, color=color, ms=4.5, ls="none")
    ax.set_title(title.replace("; ", ";\n", 1), fontsize=FONT["panel"], loc="left")  # two lines fit 688 px
    ax.set_xlabel(
        "seconds since loading started" if whole else "seconds since the work started", fontsize=FONT["label"]
    )
    ax.set_ylabel("RSS (GiB)", fontsize=FONT["label"])
    ax.tick_params(labelsize=FONT["tick"])
    ax.set_ylim(0, top * 1.08 or 1)
    ax.grid(alpha=0.3)


def draw(doc: dict[str, Any], *, configs: Sequence[str] = (), whole: bool = False) -> Any:
    """The figure: the title, then the legend of every panel (read before the panels), then a panel per row.

    Args:
        doc: ``bench_pinned_memory.json``.
        configs: ``WORKFLOW/MODE`` panels to draw (default: every finished one).
        whole: Time from each process's start, loading included.

    Returns:
        The matplotlib figure, :data:`SHOWN_WIDTH` pixels wide at :data:`DPI`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    panels: dict[str, list[dict[str, Any]]] = {}
    for run in doc["runs"]:
        config = f"{run['workflow']}/{run['mode']}"
        if run["status"] == "ok" and (not configs or config in configs):
            panels.setdefault(config, []).append(run)
    if not panels:
        raise ValueError("no finished arm to draw")
    rows = len(panels)  # one panel per row: readable at the width of a docs page
    title, legend, panel, bottom = 0.62, 0.4, 2.9, 0.1  # inches: the title, the legend, each panel, the margin
    height = title + legend + panel * rows + bottom
    fig, axes = plt.subplots(rows, 1, figsize=(SHOWN_WIDTH / DPI, height), dpi=DPI, squeeze=False)
    for ax, (config, runs) in zip(axes.flat, panels.items(), strict=True):
        workflow, mode = config.split("/")
        draw_panel(ax, panel_title(workflow, mode, doc), runs, whole)
    handles = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    handles["a call starts"] = Line2D([], [], color="0.3", marker=CALL_MARKER, ls="none", ms=6)
    handles["a ddo_hooks boundary executed"] = Line2D([], [], color="0.3", marker=RELEASE_MARKER, ls="none", ms=6)
    fig.legend(
        handles.values(),
        handles.keys(),
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - title / height),
        ncol=2,
        fontsize=FONT["legend"],
        frameon=False,
        columnspacing=1.2,
        handlelength=1.6,
    )
    versions = (doc.get("workload") or {}).get("versions", {})
    fig.suptitle(
        f"Process RSS over time: four ways of handling pinned memory\non an {machine(doc)}, "
        f"torch {versions.get('torch')}",
        fontsize=FONT["title"],
        y=1 - 0.06 / height,
        va="top",
    )
    fig.tight_layout(rect=(0, bottom / height, 1, 1 - (title + legend) / height), h_pad=1.4)
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="bench_pinned_memory.json")
    parser.add_argument("--out", type=Path, default=Path("docs/img/rss-over-time.png"))
    parser.add_argument("--config", action="append", default=[], help="WORKFLOW/MODE panels to draw (default all)")
    parser.add_argument("--whole", action="store_true", help="from each process's start, loading included")
    args = parser.parse_args()

    doc = json.loads(args.json.read_text())
    try:
        fig = draw(doc, configs=args.config, whole=args.whole)
    except ValueError as e:
        raise SystemExit(f"{args.json}: {e}") from e
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=DPI)
    print(f"wrote {args.out} ({len(fig.axes)} panels)")


if __name__ == "__main__":
    main()
