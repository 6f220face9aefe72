"""The box figures of ``bench_box.py``'s checked-in runs: a table for the docs, and box size against call time.

Each row is one arm. Its unboxed figures come from the first results file it names: ``memory.peak`` over the
process's life, what its cgroup held at rest (``memory.stat``: anon, file, shmem; file includes shmem), the steady
call (each process's median of its calls but the first; the median, min and max over that run's interleaved
processes, and its ratio to ``nothing`` with ``low_cpu_mem_usage=False`` in the same run, where that run has it)
and each call's output digest. An arm ``ARM*2`` is two processes at once in one cgroup: its figures are the
pair's. Its box comes from the boxed trials of every file it names: the smallest ``memory.max`` in which its calls
ran at full speed ("at most" where the step below was not tried), and the largest box below it that failed ("more
than" where none fitted).

Run: ``python benchmarks/plot_box.py --out docs/img/box.png`` (needs matplotlib); ``--table`` prints the
Markdown rows that ``docs/benchmarks-box.md`` holds, then the README's, then both of FLUX.1-dev's shapes, then its
run of two ranks, then every interleaved timing of the register presets against ``nothing``, then where the steady
calls of the runs that mark it spent their time (those two on ``docs/benchmarks-box-timings.md``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 2**30
STEP_GIB = 0.25
ARMS = [
    (("timing", "today"), "false/nothing", "nothing"),
    (("today",), "false/preset:default", "`default`, repack of 2026-12-02"),
    (("peers",), "false/preset:default", "`default`"),
    (("peers",), "false/preset:lowest-peak", "`lowest-peak`"),
    (("peers",), "false/delete", "encoders deleted by hand"),
    (("peers",), "false/diffusers-mm", "diffusers-mm 0.4.0"),
    (("timing", "ddo-box"), "false/ddo-auto", "DDO `auto`"),
    (("new-setup",), "false/ddo-vmm", "DDO VMM route"),
    (("lcmu-true",), "true/nothing", "nothing"),
    (("timing", "new-setup", "register"), "true/preset:default+register", "`default` + register"),
    (("timing-5", "peers", "register"), "true/preset:lowest-peak+register", "`lowest-peak` + register"),
    (("ranks",), "true/preset:lowest-peak+register+evict", "`lowest-peak` + register + evict"),
    (("lcmu-true",), "true/preset:lowest-peak+stage", "`lowest-peak` + stage"),
    (("ranks",), "false/nothing*2", "nothing, 2 processes"),
    (("ranks",), "true/preset:default+register*2", "`default` + register, 2 processes"),
]
"""(results files ``bench_box-<name>.json``, the first for the unboxed figures; arm; label) of each row, in order."""
FLUX_DEV = [
    (("flux-dev",), arm, label)
    for arm, label in (("false/nothing", "nothing"), ("false/preset:lowest-peak", "`lowest-peak`"),
                       ("true/nothing", "nothing"), ("true/preset:default+register", "`default` + register"))
]  # fmt: skip
"""The rows of FLUX.1-dev's own shapes (3 calls at 1024², 28 steps), each arm tried in one box."""
FLUX_DEV_RANKS = [
    (("flux-dev-ranks",), "true/preset:default+register", "`default` + register, 1 process"),
    (("flux-dev-ranks",), "true/preset:default+register*2", "`default` + register, 2 processes"),
]
"""The run of two ranks at FLUX.1-dev's shapes: one process, then two at once in one cgroup."""
TIMINGS = ("timing", "timing-lowest-peak", "timing-2", "timing-3", "timing-4", "timing-5", "timing-6", "timing-7",
           "timing-8", "timing-9", "timing-10")  # fmt: skip
"""The runs of register presets interleaved with ``nothing`` (``low_cpu_mem_usage=False``), in order."""
EXPERIMENTS = {("timing-10", "true/preset:lowest-peak+register"): "true/preset:lowest-peak+register+pageable"}
"""Arms run with code since reverted, under the name that says what it did: ``pageable``, the text encoders
onloaded from their file views instead of pinned again at each onload (commit 0dc9e16, reverted in the next)."""
PHASES = ("timing-8", "timing-9", "timing-10")
"""The runs whose calls say where their time went (``box_workload``: boundaries, phase marks, page faults)."""


def calls(trial: dict[str, Any]) -> list[dict[str, Any]]:
    """A trial's ``call`` steps, in order."""
    return [s for s in trial["steps"] if s["event"] == "call"]


def steady(trial: dict[str, Any]) -> float | None:
    """A trial's steady call: the median of its calls but the first (``None`` with one call)."""
    later = [s["seconds"] for s in calls(trial) if s["index"] > 0]
    return statistics.median(later) if later else None


def rows(results: Path = RESULTS, arms: list[tuple[tuple[str, ...], str, str]] = ARMS) -> list[dict[str, Any]]:
    """Each arm's figures, from the checked-in results (``arms``: :data:`ARMS` or :data:`FLUX_DEV`)."""
    read: dict[str, dict[str, Any]] = {}  # each results file once, though several rows name it
    found = []
    for names, arm_name, label in arms:
        for name in names:
            if name not in read:
                read[name] = json.loads((results / f"bench_box-{name}.json").read_text())["arms"]
        docs = [read[name] for name in names]
        records = [doc[arm_name] for doc in docs]
        unboxed = records[0]["unboxed"]
        nothing = docs[0].get("false/nothing") if arm_name != "false/nothing" else None
        nothing_steady = statistics.median(filter(None, map(steady, nothing["unboxed"]))) if nothing else None
        first = unboxed[0]
        rest = calls(first)[-1]["cgroup"]
        steadies = [v for v in map(steady, unboxed) if v is not None]
        trials = [t for record in records for t in record["trials"]]
        fitted = [t["box_gib"] for t in trials if not t["verdict"]]
        box = min(fitted) if fitted else None
        failed = [t["box_gib"] for t in trials if t["verdict"] and (box is None or t["box_gib"] < box)]
        below = max(failed) if failed else None
        exact = box is not None and below is not None and box - below <= STEP_GIB + 1e-9  # the step below failed
        found.append({
            "label": label, "lcmu": arm_name.startswith("true"), "file": names[0], "box": box,
            "failed_below": below, "exact": exact,
            "peak": first["memory_peak"] / GIB,
            "anon": rest["anon"] / GIB, "file_gib": rest["file"] / GIB, "shmem": rest["shmem"] / GIB,
            "steady": statistics.median(steadies) if steadies else None,
            "spread": (min(steadies), max(steadies), len(steadies)) if steadies else None,
            "calls": len(calls(first)), "digests": [s["digest"] for s in calls(first)],
            "nothing_steady": nothing_steady, "gpu": calls(first)[-1].get("gpu"),
            "peers": [[s["digest"] for s in peer if s["event"] == "call"] for peer in first.get("peers", [])],
        })  # fmt: skip
    return found


def timings(results: Path = RESULTS, names: tuple[str, ...] = TIMINGS) -> list[dict[str, Any]]:
    """Each register arm of each interleaved run against that run's ``nothing``: the steady calls' median and
    spread, their ratio, and in how many of the run's pairs (the k-th process of each) the arm was the slower."""
    found = []
    for name in names:
        arms = json.loads((results / f"bench_box-{name}.json").read_text())["arms"]
        nothing = [steady(t) for t in arms["false/nothing"]["unboxed"]]
        for arm, record in arms.items():
            own = [v for v in map(steady, record["unboxed"]) if v is not None]
            if "+register" not in arm or not own:  # no steady call: its setup raised
                continue
            arm = EXPERIMENTS.get((name, arm), arm)
            # interleaved rep by rep: the k-th of each ran side by side (a run cut short has fewer of an arm)
            pairs = list(zip(own, nothing, strict=False))
            found.append({
                "run": name, "arm": arm, "n": len(own), "steady": statistics.median(own),
                "spread": (min(own), max(own)), "nothing": statistics.median(nothing),
                "nothing_spread": (min(nothing), max(nothing)), "nothing_n": len(nothing),
                "slower": sum(a > b for a, b in pairs), "pairs": len(pairs),
            })  # fmt: skip
    return found


def arm_label(arm: str) -> str:
    """An arm as the docs' tables name it: ``true/preset:lowest-peak+register+without_malloc_trim`` is
    "`lowest-peak` + register, without `malloc_trim`"."""
    what = arm.split("/", 1)[1]
    if not what.startswith("preset:"):
        return what
    name, *extras = what.removeprefix("preset:").split("+")
    named = {"register": "register", "register_all": "register, the encoders too",
             "pageable": "the encoders from their file views, reverted"}  # fmt: skip
    said = [named.get(e) or f"without `{e.removeprefix('without_')}`" for e in extras]
    first = " + " if extras and not extras[0].startswith("without_") else ", "  # what it adds, then what it lacks
    return f"`{name}`" + "".join((first if i == 0 else ", ") + e for i, e in enumerate(said))


def timing_table(found: list[dict[str, Any]]) -> list[str]:
    """The Markdown rows of the docs' table of interleaved timings."""
    lines = []
    for row in found:
        (low, high), (n_low, n_high) = row["spread"], row["nothing_spread"]
        lines.append(
            f"| `{row['run']}` | {arm_label(row['arm'])} | {row['n']} | "
            f"{row['steady']:.2f} ({low:.2f}\u2013{high:.2f}) | "
            f"{row['nothing']:.2f} ({n_low:.2f}\u2013{n_high:.2f}, {row['nothing_n']}) | "
            f"{row['steady'] / row['nothing']:.2f}\u00d7 ({row['slower']} of {row['pairs']}) |"
        )
    return lines


def phases(results: Path = RESULTS, names: tuple[str, ...] = PHASES) -> list[dict[str, Any]]:
    """Where each arm's steady calls spent their time: per process the median over calls 2 to 5 of the call, the
    encoding (call start to the first denoiser forward), the denoising (to the VAE's decoder), the boundaries'
    seconds and the minor page faults; then per arm the median and min-max of those over its processes (``None``
    where the run did not mark phases or count faults)."""
    found = []
    for name in names:
        for arm, record in json.loads((results / f"bench_box-{name}.json").read_text())["arms"].items():
            per = []
            for trial in record["unboxed"]:
                later = [c for c in calls(trial) if c["index"] > 0]
                if not later:
                    continue
                marked = "phases" in later[0]
                per.append({
                    "call": [c["seconds"] for c in later],
                    "encode": [c["phases"]["denoise"] for c in later] if marked else None,
                    "denoise": [c["phases"]["decode"] - c["phases"]["denoise"] for c in later] if marked else None,
                    "boundaries": [sum(c["boundaries"].values()) for c in later],
                    "faults": [c["faults"][0] for c in later] if "faults" in later[0] else None,
                })  # fmt: skip
            if not per:
                continue
            row: dict[str, Any] = {"run": name, "arm": EXPERIMENTS.get((name, arm), arm), "n": len(per)}
            for key in per[0]:
                medians = [statistics.median(p[key]) for p in per if p[key] is not None]
                row[key] = (statistics.median(medians), min(medians), max(medians)) if medians else None
            found.append(row)
    return found


def phase_table(found: list[dict[str, Any]]) -> list[str]:
    """The Markdown rows of the docs' table of where the steady calls' time went: medians over the processes, and
    the min-max of the encoding and the denoising."""

    def spread(value: tuple[float, float, float] | None) -> str:
        return "-" if value is None else f"{value[0]:.2f} ({value[1]:.2f}\u2013{value[2]:.2f})"

    lines = []
    for row in found:
        attached = ":" in row["arm"]  # a preset: its boundaries ran (none else has any)
        mode = row["arm"].split("/")[0].title()
        boundaries = f"{row['boundaries'][0]:.3f}" if attached else "-"
        faults = "-" if row["faults"] is None else f"{row['faults'][0]:,.0f}"
        lines.append(
            f"| `{row['run']}` | {arm_label(row['arm'])} ({mode}) | {row['n']} | {row['call'][0]:.2f} | "
            f"{spread(row['encode'])} | {spread(row['denoise'])} | {boundaries} | {faults} |"
        )
    return lines


def _cells(row: dict[str, Any]) -> tuple[str, str, str]:
    """The mode, box and call cells of a row, as both tables write them."""
    if row["box"] is None:
        box = "not bisected" if row["failed_below"] is None else f"more than {row['failed_below']:.2f}"
    else:
        box = f"{row['box']:.2f}" if row["exact"] else f"at most {row['box']:.2f}"
        if row["failed_below"] is not None:
            box += f" ({row['failed_below']:.2f} fails)"
    if row["steady"] is None:
        call = f"- ({row['calls']} call)"
    else:
        low, high, n = row["spread"]
        call = f"{row['steady']:.2f}" if n == 1 else f"{row['steady']:.2f} ({low:.2f}\u2013{high:.2f}, {n})"
        if row["nothing_steady"]:
            call += f"; {row['steady'] / row['nothing_steady']:.2f}\u00d7"
    return ("True" if row["lcmu"] else "False"), box, call


def table(found: list[dict[str, Any]]) -> list[str]:
    """The Markdown rows of docs/benchmarks-box.md's box table."""
    lines = []
    for row in found:
        mode, box, call = _cells(row)
        lines.append(
            f"| {row['label']} | {mode} | {box} | {row['peak']:.2f} | {row['anon']:.2f} | {row['file_gib']:.2f} | "
            f"{row['shmem']:.2f} | {call} |"
        )
    return lines


def short_table(found: list[dict[str, Any]]) -> list[str]:
    """The Markdown rows of the README's box table: the same figures without the split at rest, and only the
    code of today (no row of an earlier repack)."""
    lines = []
    for row in found:
        if "2026-12-02" not in row["label"]:
            mode, box, call = _cells(row)
            lines.append(f"| {row['label']} | {mode} | {box} | {row['peak']:.2f} | {call} |")
    return lines


def draw(found: list[dict[str, Any]], out: Path) -> Any:
    """Box against speed, one numbered point per arm, named in a key beside the axes (no label near another).

    Returns the figure, saved to ``out`` (the caller closes it).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    shown = [row for row in found if row["box"] is not None and row["steady"] is not None]
    for index, row in enumerate(shown):
        color = "#0072b2" if row["lcmu"] else "#d55e00"
        marker = "o" if row["exact"] else "v"
        ax.scatter(row["steady"], row["box"], color=color, marker=marker, s=60, zorder=3)
        if row["failed_below"] is not None:
            ax.plot([row["steady"]] * 2, [row["failed_below"], row["box"]], color=color, lw=1, alpha=0.5)
        ax.annotate(str(index + 1), (row["steady"], row["box"]), textcoords="offset points", xytext=(6, 4),
                    fontsize=9)  # fmt: skip
    keys = [f"{i + 1}: {row['label'].replace('`', '')}, low_cpu_mem_usage={row['lcmu']}" for i, row in enumerate(shown)]
    ax.text(1.02, 1.0, "\n".join(keys), transform=ax.transAxes, fontsize=8, va="top")
    ax.scatter([], [], color="#d55e00", label="low_cpu_mem_usage=False")
    ax.scatter([], [], color="#0072b2", label="low_cpu_mem_usage=True")
    ax.legend(fontsize=8, loc="lower left")
    ax.set_xlabel("steady plain call, s (median of calls 2-5)")
    ax.set_ylabel("smallest cgroup memory.max that fits, GiB")
    ax.set_title("Flux-shaped pipeline, 1024x1024, 20 steps, one H200: box against speed\n"
                 "(a line down to the box that failed; a triangle: an upper bound)", fontsize=9)  # fmt: skip
    ax.set_xlim(left=0, right=max(row["steady"] for row in shown) * 1.1)
    ax.set_ylim(bottom=0, top=max(row["box"] for row in shown) * 1.12)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, bbox_inches="tight")  # the key beside the axes too
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the PNG to write")
    parser.add_argument("--table", action="store_true", help="print the docs' Markdown rows, then the README's")
    args = parser.parse_args()
    found = rows()
    if args.table:
        dev, ranks = rows(arms=FLUX_DEV), rows(arms=FLUX_DEV_RANKS)
        print("\n".join([*table(found), "", *short_table(found), "", *table(dev), "", *short_table(dev)]))
        print("\n".join(["", *table(ranks), "", *timing_table(timings()), "", *phase_table(phases())]))
    if args.out:
        draw(found, args.out)


if __name__ == "__main__":
    main()
