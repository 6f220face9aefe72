"""Box and speed of every runtime in one run (``bench_box-runtimes.json``): the docs' tables and the figure.

One run of ``bench_box.py`` on the H200 (the Flux-shaped pipeline, 1024², 20 steps, 4 plain calls a process): each
arm in fresh processes, interleaved rep by rep, the first process of each arm with the page cache dropped (its
``memory.peak`` is the process's whole charge) and the later ones with it kept (``--warm-reps``: their call times
count, not their memory). Per arm: its steady call (each process's median of calls 2 to 4; the median, min and max
over the processes), its ratio to the fastest arm and to ``nothing``, in how many of the interleaved pairs it was
the faster beside the fastest arm, where the steady calls spent their time (medians over the processes: encoding
to the first denoiser forward, denoising to the VAE's decoder, decoding to the call's end, and the boundaries'
seconds), the ``memory.peak`` of the first process's life, the smallest box where the run bisected it, and what the
process kept on the GPU (allocated and reserved at rest, and the most it allocated).

Run: ``python benchmarks/plot_runtimes.py --table`` prints the Markdown rows ``docs/benchmarks-runtimes.md`` holds;
``--out docs/img/box.png`` draws the figure (needs matplotlib).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from plot_box import GIB, RESULTS, STEP_GIB, calls, steady

RUN = "runtimes"
"""The run: ``benchmarks/results/bench_box-runtimes.json``."""
FASTEST_PEER = "false/ddo-auto"
NOTHING = "false/nothing"
PRESET = "true/preset:default+register+encoders"
"""The arms of the ``smallest-box`` preset (``default`` + ``from_files: register`` + ``keep_encoders_pinned``)."""
ARMS = [
    (NOTHING, "nothing", "diffusers leaf"),
    ("false/nothing@leaf-rs", "nothing", "diffusers leaf, rs"),
    ("false/nothing@block-rs", "nothing", "diffusers block, rs"),
    (FASTEST_PEER, "DDO `auto`", "linear runtime"),
    ("false/ddo-nores", "DDO `auto`, nothing resident", "linear runtime"),
    (f"{PRESET}@leaf-rs", "`smallest-box`", "diffusers leaf, rs"),
    (f"{PRESET}@block-rs", "`smallest-box`", "diffusers block, rs"),
    (f"{PRESET}@ddo", "`smallest-box`", "DDO with its pins off"),
]
"""(arm, what the user did, the runtime) of each row, in order."""


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _phases(trial: dict[str, Any]) -> dict[str, float]:
    """One process's medians over its steady calls: encoding, denoising, decoding and the boundaries' seconds."""
    later = [c for c in calls(trial) if c["index"] > 0]
    return {
        "encode": _median([c["phases"]["denoise"] for c in later]),
        "denoise": _median([c["phases"]["decode"] - c["phases"]["denoise"] for c in later]),
        "decode": _median([c["seconds"] - c["phases"]["decode"] for c in later]),
        "boundaries": _median([sum(c["boundaries"].values()) for c in later]),
    }


def rows(results: Path = RESULTS) -> list[dict[str, Any]]:
    """Each arm's figures from the run (see the module's docstring)."""
    arms = json.loads((results / f"bench_box-{RUN}.json").read_text())["arms"]
    own = {arm: [v for v in map(steady, arms[arm]["unboxed"]) if v is not None] for arm, _, _ in ARMS}
    fastest, nothing = own[FASTEST_PEER], own[NOTHING]
    found = []
    for arm, what, runtime in ARMS:
        record, times = arms[arm], own[arm]
        first = record["unboxed"][0]
        per = [_phases(t) for t in record["unboxed"]]
        fitted = [t["box_gib"] for t in record["trials"] if not t["verdict"]]
        box = min(fitted) if fitted else None
        failed = [t["box_gib"] for t in record["trials"] if t["verdict"] and box is not None and t["box_gib"] < box]
        gpu = calls(first)[-1]["gpu"]
        pairs = list(zip(times, fastest, strict=False))  # the k-th processes of both ran in the same round
        found.append({
            "arm": arm, "what": what, "runtime": runtime, "lcmu": arm.startswith("true"), "n": len(times),
            "steady": _median(times), "spread": (min(times), max(times)), "steadies": times,
            "to_fastest": _median(times) / _median(fastest), "to_nothing": _median(times) / _median(nothing),
            "faster": sum(a < b for a, b in pairs), "pairs": len(pairs),
            **{key: _median([p[key] for p in per]) for key in per[0]},
            "peak": first["memory_peak"] / GIB, "peak_whole": first.get("cache_dropped", True),
            "box": box, "failed_below": max(failed) if failed else None,
            "gpu_rest": gpu["allocated"] / GIB, "gpu_reserved": gpu["reserved"] / GIB,
            "gpu_peak": gpu["max_allocated"] / GIB,
            "digests": [[c["digest"] for c in calls(t)] for t in record["unboxed"]],
        })  # fmt: skip
    return found


def _box(row: dict[str, Any]) -> str:
    if row["box"] is None:
        return "-"
    below = row["failed_below"]
    if below is not None and row["box"] - below <= STEP_GIB + 1e-9:
        return f"{row['box']:.2f}"
    return f"at most {row['box']:.2f}"


def speed_table(found: list[dict[str, Any]]) -> list[str]:
    """Rows of the box-and-speed table: box, whole-life peak, steady call, its ratios and the pairs."""
    lines = []
    for row in found:
        low, high = row["spread"]
        pairs = "" if row["arm"] == FASTEST_PEER else f" ({row['faster']} of {row['pairs']})"
        lines.append(
            f"| {row['what']}, {row['runtime']} | {'True' if row['lcmu'] else 'False'} | {_box(row)} | "
            f"{row['peak']:.2f} | {row['steady']:.2f} ({low:.2f}\u2013{high:.2f}, {row['n']}) | "
            f"{row['to_fastest']:.2f}\u00d7{pairs} | {row['to_nothing']:.2f}\u00d7 |"
        )
    return lines


def phase_table(found: list[dict[str, Any]]) -> list[str]:
    """Rows of the table of where the steady calls went and what each arm keeps on the GPU."""
    return [
        f"| {row['what']}, {row['runtime']} | {row['encode']:.2f} | {row['denoise']:.2f} | {row['decode']:.2f} | "
        f"{row['boundaries']:.3f} | {row['gpu_rest']:.2f} | {row['gpu_reserved']:.2f} | {row['gpu_peak']:.2f} |"
        for row in found
    ]


def draw(found: list[dict[str, Any]], out: Path) -> Any:
    """Memory against the steady call, one point per arm: the box where the run bisected it, else the peak.

    Returns the figure, saved to ``out`` (the caller closes it).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.9, 4.6), dpi=120)
    for index, row in enumerate(found):
        color = "#0072b2" if row["lcmu"] else "#d55e00"
        y = row["box"] if row["box"] is not None else row["peak"]
        ax.scatter(row["steady"], y, s=60, zorder=3, color=color,
                   facecolors=color if row["box"] is not None else "none")  # fmt: skip
        below = index % 2  # neighbours' numbers one above, one below their points
        ax.annotate(str(index + 1), (row["steady"], y), textcoords="offset points", xytext=(5, -11 if below else 4),
                    fontsize=8)  # fmt: skip
    keys = [f"{i + 1}: {r['what'].replace('`', '')}, {r['runtime']}" for i, r in enumerate(found)]
    ax.text(1.02, 1.0, "\n".join(keys), transform=ax.transAxes, fontsize=7, va="top")
    ax.set_xlabel("steady call, seconds (median over processes)")
    ax.set_ylabel("memory, GiB")
    ax.set_title("Filled: smallest box (cgroup memory.max) that fits\nhollow: memory.peak of the whole life "
                 "(box not bisected)", fontsize=8)  # fmt: skip
    ax.scatter([], [], color="#d55e00", facecolors="none", label="low_cpu_mem_usage=False")
    ax.scatter([], [], color="#0072b2", facecolors="none", label="low_cpu_mem_usage=True")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_xlim(0, max(r["steady"] for r in found) * 1.1)
    ax.set_ylim(0, max(r["peak"] for r in found) * 1.1)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, bbox_inches="tight")
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the PNG to write")
    parser.add_argument("--table", action="store_true", help="print the docs' Markdown rows")
    args = parser.parse_args()
    found = rows()
    if args.table:
        print("\n".join([*speed_table(found), "", *phase_table(found)]))
    if args.out:
        draw(found, args.out)


if __name__ == "__main__":
    main()
