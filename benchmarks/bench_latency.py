"""Memory and latency side by side: the presets against doing nothing, with repetitions, medians and spreads.

The realistic workload: the Flux-shaped pipeline of ``pinned_workload.py`` (1.31 B transformer) at
1024x1024 and 20 steps, group offloading with ``use_stream=True`` and ``low_cpu_mem_usage=True``, the text
encoders dropped after the first encoding (``attachment.drop`` where ddo_hooks is attached), three calls,
then an idle wait. Arms: nothing, the ``lowest-peak`` and the ``lowest-latency`` presets; each repetition
runs every arm once, in a fresh process, interleaved (rep 1: nothing, peak, latency; rep 2: ...). Printed:
per arm the median and the min-max of first-call time, steady-state call time (calls 2 and 3), peak,
resting and idle RSS and RSS*time, the ratio of each to nothing with the min-max of the per-repetition
ratios, where each arm's sampled peak fell, the time a boundary took beyond the raw release call right
after ``drop()``, and the targets. ``--arms`` picks other arms (the ``default`` preset, ``lowest-peak``
in host-register mode with N threads). Extras (``--extras [drop,repin,trim,model-offload]``, all by
default): the first boundary after ``drop()`` with ``low_cpu_mem_usage=False``; re-pinning cost per
``PYTORCH_CUDA_ALLOC_CONF`` (default and host-register with 4, 8, 16 threads); the lowest-peak boundaries
with ``malloc_trim`` in host-register mode (RSS drop against the allocator delta); model CPU offload over
10 calls with and without ``malloc_trim`` at each boundary.

GPU machine: ``python3 benchmarks/bench_latency.py --out $OUT --reps 5 --extras``.
CPU, to try the flow: ``python benchmarks/bench_latency.py --size tiny --reps 2 --out /tmp/lat``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_pinned_memory import run_child

HERE = Path(__file__).resolve().parent
RESULT = "bench_latency.json"
ARMS = ("nothing", "lowest-peak", "lowest-latency")
MORE_ARMS = ("default", "lowest-peak-trim", "lowest-peak-register4", "lowest-peak-register8", "lowest-peak-register16")
"""--arms may add: the default preset; lowest-peak with malloc_trim; lowest-peak in host-register mode (N threads)."""
GIB = 2**30
EXTRAS = ("drop", "repin", "trim", "model-offload")
REGISTER = "pinned_use_cuda_host_register:True,pinned_num_register_threads:{}"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--size", choices=("full", "tiny"), default="full")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=None, help="default: 20 (full), 2 (tiny)")
    p.add_argument("--resolution", type=int, default=None, help="default: 1024 (full), 64 (tiny)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS + MORE_ARMS)}")
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--idle-s", type=float, default=2.5)
    p.add_argument(
        "--extras",
        nargs="?",
        const=",".join(EXTRAS),
        default="",
        help=f"after the arms, these extras (comma-separated, default all): {', '.join(EXTRAS)}",
    )
    p.add_argument("--budget-s", type=float, default=560.0, help="skip runs that would start after this")
    args = p.parse_args()
    for option, allowed in (("extras", EXTRAS), ("arms", ARMS + MORE_ARMS)):
        unknown = set(filter(None, getattr(args, option).split(","))) - set(allowed)
        if unknown:
            p.error(f"--{option}: unknown {', '.join(sorted(unknown))}; choose from {', '.join(allowed)}")
    return args


def ratio_text(ratio: dict[str, float] | None) -> str:
    return "-" if ratio is None else f"{ratio['median']:.3f} ({ratio['min']:.3f}-{ratio['max']:.3f})"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})" if values else "-"


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.start, self.doc = args, time.perf_counter(), {"runs": [], "skipped": []}
        args.out.mkdir(parents=True, exist_ok=True)
        self.weights = Path(os.environ.get("TMPDIR", "/tmp")) / f"ddo-bench-weights-{args.size}-0"
        full = args.size == "full"
        self.steps = args.steps or (20 if full else 2)
        self.resolution = args.resolution or (1024 if full else 64)

    def left(self) -> float:
        return self.args.budget_s - (time.perf_counter() - self.start)

    def child(self, argv: list[str], label: str, env: dict[str, str] | None = None) -> dict[str, Any] | None:
        if self.args.budget_s and self.left() <= 0:
            self.doc["skipped"].append(label)
            print(f"[{label}] skipped: the budget is spent", flush=True)
            return None
        result = self.args.out / f"{label}.json"
        saved = {k: os.environ.get(k) for k in (env or {})}
        os.environ.update(env or {})
        try:
            rc, wall, tail = run_child([*argv, "--result", str(result)], label, 600, script="latency_workload.py")
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        if rc != 0:
            self.doc["runs"].append({"label": label, "rc": rc, "tail": tail})
            return None
        data = json.loads(result.read_text())
        self.doc["runs"].append({"label": label, "rc": rc, "wall_s": wall, "result": data})
        (self.args.out / RESULT).write_text(json.dumps(self.doc))
        return data

    def arm(
        self, arm: str, rep: int, env: dict[str, str] | None = None, label: str | None = None, **extra: Any
    ) -> dict[str, Any] | None:
        spec = {"arm": arm, "rep": rep, "weights_dir": str(self.weights), "size": self.args.size, "workflow": "b"}
        spec.update(mode="group_lcmu_true", steps=self.steps, height=self.resolution, width=self.resolution)
        spec.update(calls=self.args.calls, idle_s=self.args.idle_s, sample_ms=5.0, save_reports=rep == 1)
        spec.update(extra, label=label or f"{arm}-rep{rep}")
        return self.child(["arm", "--spec", json.dumps(spec)], spec["label"], env)


def arm_figures(runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    f: dict[str, list[float]] = {k: [] for k in ("first", "steady", "peak", "resting", "idle", "gib_s")}
    for r in runs:
        seconds = [c["seconds"] for c in r["calls"]]
        f["first"].append(seconds[0])
        f["steady"].append(statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0])
        f["peak"].append((r["peak_rss"] or max(c["rss_after"] for c in r["calls"])) / GIB)
        f["resting"].append(r["calls"][-1]["rss_after"] / GIB)
        f["idle"].append(r["idle"]["rss"] / GIB)
        f["gib_s"].append(r["gib_seconds"])
    return f


def report(doc: dict[str, Any]) -> dict[str, Any]:
    arms = doc.get("arms", ARMS)
    by_arm: dict[str, dict[int, dict[str, Any]]] = {}
    for run in doc["runs"]:
        if "result" in run and run["label"].split("-rep")[0] in arms:
            spec = run["result"]["spec"]
            by_arm.setdefault(spec["arm"], {})[spec["rep"]] = run["result"]
    figures = {arm: arm_figures(list(reps.values())) for arm, reps in by_arm.items()}
    base = by_arm.get("nothing", {})
    print("\nper arm: median (min-max) over repetitions; ratio to nothing: median (min-max of per-repetition ratios)")
    header = f"{'arm':22}{'first call s':>24}{'steady call s':>24}{'peak GiB':>24}{'resting GiB':>24}{'idle GiB':>24}"
    print(header)
    summary: dict[str, Any] = {}
    for arm in arms:
        if arm not in figures:
            continue
        f = figures[arm]
        print(f"{arm:22}" + "".join(f"{spread(f[k]):>24}" for k in ("first", "steady", "peak", "resting", "idle")))
        summary[arm] = {k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in f.items() if v}
        if arm != "nothing" and base:
            ratios = {}
            for key in ("first", "steady", "peak", "resting", "idle", "gib_s"):
                per = [
                    arm_figures([by_arm[arm][rep]])[key][0] / arm_figures([base[rep]])[key][0]
                    for rep in by_arm[arm]
                    if rep in base
                ]
                if per:
                    ratios[key] = {"median": statistics.median(per), "min": min(per), "max": max(per)}
            summary[arm]["ratio"] = ratios
            print(
                f"{'  x nothing':22}"
                + "".join(
                    f"{spread([ratios[k]['median'], ratios[k]['min'], ratios[k]['max']]) if k in ratios else '-':>24}"
                    for k in ("first", "steady", "peak", "resting", "idle")
                )
            )
    print("\nwhere the sampled peak fell (5 ms samples): the phase it fell in and how far into it")
    for arm in arms:
        places = [
            f"rep {rep}: {r['sampled_peak']['rss'] / GIB:.2f} GiB in {r['sampled_peak']['during']} "
            f"+{r['sampled_peak']['seconds_in']:.2f} s"
            for rep, r in sorted(by_arm.get(arm, {}).items())
            if r.get("sampled_peak")
        ]
        if places:
            print(f"  {arm:16} " + "; ".join(places))
    drops = []
    for arm in ("lowest-peak", "lowest-latency"):
        for result in by_arm.get(arm, {}).values():
            first = next(
                (
                    b
                    for b in result["boundaries"]
                    if b.get("phase") == "before_transformer" and b.get("status") == "executed"
                ),
                None,
            )
            if first is not None and first["release"] is not None:
                encoders = (result["encoders_pinned"] or {}).get("rounded_bytes")
                drops.append(
                    {
                        "arm": arm,
                        "beyond_release_ms": (first["elapsed"] - first["release"]) * 1e3,
                        "delta": first["delta"],
                        "encoders_rounded_bytes": encoders,
                        "full": first["full"],
                    }
                )
    if drops:
        print("\nthe first boundary after drop(): time beyond the raw release call, bytes released vs the encoders'")
        for d in drops:
            ratio = d["delta"] / d["encoders_rounded_bytes"] if d["encoders_rounded_bytes"] else float("nan")
            print(
                f"  {d['arm']:16} {d['beyond_release_ms']:8.2f} ms  released {d['delta'] / 2**20:9.1f} MiB  "
                f"x encoders {ratio:.3f}  full collection {d['full']}"
            )
    targets = []

    def target(name: str, value: float | None, spread_text: str, limit: float, at_most: bool = True) -> None:
        met = None if value is None else (value <= limit if at_most else value >= limit)
        verdict = "not measured" if met is None else ("met" if met else "not met")
        targets.append({"target": name, "value": value, "limit": limit, "verdict": verdict})
        shown = "-" if value is None else f"{value:.3f}"
        print(f"  {name:58} {shown:>8} {spread_text:>16}  {'<=' if at_most else '>='} {limit:<6} {verdict}")

    def ratio(arm: str, key: str) -> tuple[float | None, str]:
        found = summary.get(arm, {}).get("ratio", {}).get(key)
        return (None, "-") if found is None else (found["median"], f"({found['min']:.3f}-{found['max']:.3f})")

    print("\ntargets (median, min-max of the per-repetition ratios)")
    target("lowest-peak: peak RSS x nothing", *ratio("lowest-peak", "peak"), 0.75)
    target("lowest-peak: resting RSS x nothing", *ratio("lowest-peak", "resting"), 0.72)
    target("lowest-latency: steady-state call time x nothing", *ratio("lowest-latency", "steady"), 1.02)
    target("lowest-latency: idle RSS x nothing", *ratio("lowest-latency", "idle"), 0.72)
    beyond = [d["beyond_release_ms"] for d in drops]
    worst = max(beyond) if beyond else None
    target("after drop(): ms beyond the raw release (worst)", worst, f"({len(beyond)} boundaries)", 10.0)
    off = [abs(d["delta"] / d["encoders_rounded_bytes"] - 1) for d in drops if d["encoders_rounded_bytes"]]
    target("after drop(): |released / encoders' pinned - 1| (worst)", max(off) if off else None, "", 0.01)
    return {"arms": summary, "drops": drops, "targets": targets}


def extras(runner: Runner, chosen: set[str]) -> None:
    for rep in (1, 2) if "drop" in chosen else ():  # the encoders' pinned copies: what the first boundary gives back
        runner.arm("lowest-peak", rep, label=f"drop-lcmu-false-rep{rep}", mode="group_lcmu_false", calls=1, idle_s=0)
    for threads in (None, 4, 8, 16) if "repin" in chosen else ():
        conf = "" if threads is None else REGISTER.format(threads)
        label = "repin-default" if threads is None else f"repin-register{threads}"
        runner.child(["repin"], label, {"PYTORCH_CUDA_ALLOC_CONF": conf})
    for rep in (1, 2) if "trim" in chosen else ():
        runner.arm("peak-trim", rep, env={"PYTORCH_CUDA_ALLOC_CONF": REGISTER.format(8)})
    for arm in ("nothing", "model-offload-trim") if "model-offload" in chosen else ():
        label_arm = "model-offload" if arm == "nothing" else arm
        spec_extra = {"mode": "model_offload", "workflow": "a", "calls": 10, "idle_s": 0.0}
        spec = {"arm": arm, "rep": 1, "weights_dir": str(runner.weights), "size": runner.args.size}
        spec.update(steps=4, height=256 if runner.args.size == "full" else 64, sample_ms=20.0, save_reports=False)
        spec.update(width=spec["height"], **spec_extra)
        runner.child(["arm", "--spec", json.dumps(spec)], f"{label_arm}-10calls")


def extras_report(doc: dict[str, Any]) -> dict[str, Any]:
    """Print what the extras measured; return it."""
    results = {run["label"]: run["result"] for run in doc["runs"] if "result" in run}
    found: dict[str, Any] = {"repin": [], "trim": [], "model_offload": {}}
    print("\nre-pinning 1 GiB (16 x 64 MiB) per PYTORCH_CUDA_ALLOC_CONF")
    print(f"{'conf':58}{'fresh s/GiB':>12}{'cached':>10}{'release':>10}{'re-pin':>10}{'H2D GB/s':>10}")
    for label, r in results.items():
        if label.startswith("repin-"):
            found["repin"].append({"label": label, **r})
            print(
                f"{r['conf'] or '(default: cudaHostAlloc)':58}{r['fresh_s_per_gib']:12.3f}{r['cached_s_per_gib']:10.5f}"
                f"{r['release_s_per_gib']:10.3f}{r['repin_s_per_gib']:10.3f}{r['h2d_gb_per_s']:10.1f}"
            )
    print("\nhost-register mode with malloc_trim after each release: RSS drop / allocator delta, where bytes went back")
    for label, r in results.items():
        if label.startswith("peak-trim"):
            rows = r["boundaries"]
            for release, trim in itertools.pairwise(rows):
                released = release.get("route") == "pytorch_host_cache_release" and (release.get("delta") or 0) > 0
                if released and trim.get("action") == "malloc_trim":
                    drop = release["rss_before"] - trim["data"]["rss_after"]
                    found["trim"].append(
                        {
                            "label": label,
                            "phase": release["phase"],
                            "delta": release["delta"],
                            "rss_drop": drop,
                            "ratio": drop / release["delta"],
                        }
                    )
                    print(
                        f"  {label:16} {release['phase']:20} delta {release['delta'] / 2**20:9.1f} MiB  "
                        f"RSS drop {drop / 2**20:9.1f} MiB  x {drop / release['delta']:.3f}"
                    )
    print("\nlow_cpu_mem_usage=False: the first boundary after drop() against the encoders' pinned copies")
    found["drop"] = []
    for label, r in results.items():
        if label.startswith("drop-lcmu-false"):
            first = next((b for b in r["boundaries"] if b.get("phase") == "before_transformer"), None)
            encoders = (r["encoders_pinned"] or {}).get("rounded_bytes")
            if first is not None and first.get("release") is not None and encoders:
                row = {
                    "label": label,
                    "beyond_release_ms": (first["elapsed"] - first["release"]) * 1e3,
                    "delta": first["delta"],
                    "encoders_rounded_bytes": encoders,
                    "full": first["full"],
                }
                found["drop"].append(row)
                print(
                    f"  {label:20} {row['beyond_release_ms']:8.2f} ms beyond the release; released "
                    f"{row['delta'] / 2**20:9.1f} MiB of {encoders / 2**20:9.1f} MiB pinned "
                    f"(x {row['delta'] / encoders:.4f}); full collection {row['full']}"
                )
    print("\nmodel CPU offload, 10 calls: RSS after each call, GiB")
    for label in ("model-offload-10calls", "model-offload-trim-10calls"):
        if label in results:
            rss = [c["rss_after"] / GIB for c in results[label]["calls"]]
            found["model_offload"][label] = rss
            print(f"  {label:28} " + " ".join(f"{v:.2f}" for v in rss))
    return found


def main() -> int:
    args = parse_args()
    runner = Runner(args)
    rc, _, _ = run_child(
        ["setup", "--dir", str(runner.weights), "--size", args.size, "--result", str(args.out / "setup.json")],
        "setup",
        900,
    )
    if rc != 0:
        return rc
    runner.doc["arms"] = args.arms.split(",")
    for rep in range(1, args.reps + 1):
        for arm in runner.doc["arms"]:
            threads = arm.partition("-register")[2]
            runner.arm(arm, rep, env={"PYTORCH_CUDA_ALLOC_CONF": REGISTER.format(threads)} if threads else None)
    runner.doc["summary"] = report(runner.doc)
    if args.extras:
        extras(runner, set(args.extras.split(",")))
        runner.doc["extras"] = extras_report(runner.doc)
    (args.out / RESULT).write_text(json.dumps(runner.doc))
    print(f"\nwrote {args.out / RESULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
