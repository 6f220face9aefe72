"""The box figures of ``bench_box.py``'s checked-in runs: a table for the docs, and box size against call time.

Each arm's row comes from one results file: its smallest box (``memory.max`` in which its calls ran at full
speed, with the box below it that failed), the unboxed process's ``memory.peak``, what its cgroup held at rest
(``memory.stat``: anon, file, shmem; file includes shmem), and its steady call (the median of calls 2 to 5).

Run: ``python benchmarks/plot_box.py --out docs/img/box.png`` (needs matplotlib); ``--table`` prints the
Markdown rows that ``docs/benchmarks.md`` holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 2**30
ARMS = [
    ("today", "false/nothing", "nothing"),
    ("today", "false/preset:default", "`default` (repack)"),
    ("today", "false/preset:lowest-peak+stable", "`lowest-peak`, stable files"),
    ("lcmu-true", "true/nothing", "nothing"),
    ("register", "true/preset:default+register", "`default` + register"),
    ("register", "true/preset:lowest-peak+register", "`lowest-peak` + register"),
    ("lcmu-true", "true/preset:lowest-peak+stage", "`lowest-peak` + stage"),
]
"""(results file ``bench_box-<name>.json``, arm, label) of each row, in order."""


def _steady(trial: dict[str, Any]) -> float:
    return statistics.median(s["seconds"] for s in trial["steps"] if s["event"] == "call" and s["index"] > 0)


def _failed_below(arm: dict[str, Any]) -> float | None:
    """The largest box that failed its trial, below the smallest that fitted."""
    box = arm["box_gib"]
    failed = [t["box_gib"] for t in arm["trials"] if t["verdict"] and (box is None or t["box_gib"] < box)]
    return max(failed) if failed else None


def rows(results: Path = RESULTS) -> list[dict[str, Any]]:
    """Each arm's figures, from the checked-in results."""
    found = []
    for name, arm_name, label in ARMS:
        doc = json.loads((results / f"bench_box-{name}.json").read_text())
        arm = doc["arms"][arm_name]
        first = arm["unboxed"][0]
        rest = [s for s in first["steps"] if s["event"] == "call"][-1]["cgroup"]
        complete = arm["box_note"] is not None and "budget" not in arm["box_note"]
        found.append({
            "label": label, "lcmu": arm_name.startswith("true"), "file": name, "box": arm["box_gib"],
            "box_complete": complete, "failed_below": _failed_below(arm), "peak": first["memory_peak"] / GIB,
            "anon": rest["anon"] / GIB, "file_gib": rest["file"] / GIB, "shmem": rest["shmem"] / GIB,
            "steady": _steady(first), "digests": [s["digest"] for s in first["steps"] if s["event"] == "call"],
        })  # fmt: skip
    return found


def table(found: list[dict[str, Any]]) -> list[str]:
    """The Markdown rows of docs/benchmarks.md's box table."""
    lines = []
    for row in found:
        if row["box"] is None:
            box = "not bisected"
        else:
            box = f"{row['box']:.2f}" if row["box_complete"] else f"at most {row['box']:.2f}"
            if row["failed_below"] is not None:
                box += f" ({row['failed_below']:.2f} fails)"
        mode = "True" if row["lcmu"] else "False"
        lines.append(
            f"| {row['label']} | {mode} | {box} | {row['peak']:.2f} | {row['anon']:.2f} | {row['file_gib']:.2f} | "
            f"{row['shmem']:.2f} | {row['steady']:.2f} |"
        )
    return lines


def draw(found: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for row in found:
        if row["box"] is None:
            continue
        color = "#0072b2" if row["lcmu"] else "#d55e00"
        marker = "o" if row["box_complete"] else "v"
        ax.scatter(row["steady"], row["box"], color=color, marker=marker, s=60, zorder=3)
        if row["failed_below"] is not None:
            ax.plot([row["steady"]] * 2, [row["failed_below"], row["box"]], color=color, lw=1, alpha=0.5)
        mode = "lcmu=True" if row["lcmu"] else "lcmu=False"
        ax.annotate(f"{row['label'].replace('`', '')} ({mode})", (row["steady"], row["box"]),
                    textcoords="offset points", xytext=(6, 4), fontsize=8)  # fmt: skip
    ax.set_xlabel("steady plain call, s (median of calls 2-5)")
    ax.set_ylabel("smallest cgroup memory.max that fits, GiB")
    ax.set_title("Flux-shaped pipeline, 1024x1024, 20 steps, one H200: box against speed\n"
                 "(a line down to the box that failed; a triangle: an upper bound)", fontsize=9)  # fmt: skip
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the PNG to write")
    parser.add_argument("--table", action="store_true", help="print the docs' Markdown rows")
    args = parser.parse_args()
    found = rows()
    if args.table:
        print("\n".join(table(found)))
    if args.out:
        draw(found, args.out)


if __name__ == "__main__":
    main()
