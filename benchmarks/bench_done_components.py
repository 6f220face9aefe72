"""Plain ``pipe(prompt=...)`` calls that give back what they no longer need: ddo_hooks' presets beside the alternatives.

The Flux-shaped pipeline of ``pinned_workload.py`` (random bf16 weights saved once, loaded with
``from_pretrained``), leaf-level group offloading with streams and ``record_stream=False``, in both
``low_cpu_mem_usage`` modes. Arms, each in a fresh process (one after the other by default):
``nothing``, ``delete`` (the text encoders deleted by hand after the first call, whose prompt embeddings the
later calls pass), ``diffusers-mm`` (``managed(pipe, strategy="group_offload", unload_text_encoders=True)``, when
installed) and each preset. Each arm makes ``--calls`` plain calls back to back and reads at rest after each
RSS split into anon / file / shmem, the cgroup's charge and the pinned bytes the allocator owns, then the same
after ``--idle-s`` of idle time. Then, for each preset of ``--pairs``, one process holds two copies of the
pipeline, one with nothing and one with the preset, their calls interleaved (ABBA) ``--reps`` times: the
steady-state call time of each (medians, spreads, the median of the per-pair ratios) and bitwise-equal outputs;
with ``--block N`` each copy makes bursts of N calls, and the steady calls are all but the first of each burst
(the first follows the other copy's burst: an idle time, in which ``lowest-latency`` gives back).

GPU machine: ``python3 benchmarks/bench_done_components.py --out $OUT``.
CPU, to try the flow: ``python benchmarks/bench_done_components.py --size tiny --arms nothing,preset:lowest-peak
--pairs lowest-peak --reps 2 --calls 3 --out /tmp/done``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import bench_pinned_floor as floor_bench

RESULT = "bench_done_components.json"
ARMS = "nothing,delete,diffusers-mm,preset:default,preset:lowest-peak,preset:lowest-latency"
GIB = 2**30
TIMES, DASH = "\u00d7", "\u2013"  # as the docs write a ratio and a range


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help=f"directory for {RESULT}")
    p.add_argument("--size", choices=("full", "tiny"), default="full", help="tiny: toy models, runs on a CPU")
    p.add_argument("--modes", default="true,false", help="low_cpu_mem_usage values to run")
    p.add_argument("--arms", default=ARMS)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--idle-s", type=float, default=3.0, help="idle time before the last reading (lowest-latency: 2 s)")
    p.add_argument("--pairs", default="lowest-peak,lowest-latency", help="presets timed against nothing")
    p.add_argument("--pair-modes", default="true", help="low_cpu_mem_usage values of the pairs")
    p.add_argument("--reps", type=int, default=6, help="pairs: interleaved bursts per copy")
    p.add_argument("--block", type=int, default=1, help="pairs: calls per burst; >1: steady = all but each first")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--resolution", type=int, default=None, help="default: 1024; tiny: 64")
    p.add_argument("--jobs", type=int, default=1, help="arms at once (several pin at once on one GPU: slow)")
    p.add_argument("--weights-dir", type=Path, default=Path(tempfile.gettempdir()) / "ddo-floor-weights")
    args = p.parse_args()
    args.families, args.budget_s = "flux", 0.0  # what bench_pinned_floor's helpers read
    return args


def label(spec: dict[str, Any]) -> str:
    return f"lcmu={str(spec['lcmu']).lower()}/{spec['arm'].removeprefix('preset:')}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    floor_bench.setup(args, out)
    base = floor_bench.workload_spec(args, "flux")
    specs = [
        {**base, "lcmu": mode == "true", "arm": arm, "calls": args.calls, "idle_s": args.idle_s}
        for mode in args.modes.split(",")
        for arm in filter(None, args.arms.split(","))
    ]
    doc: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "arms": {}, "pairs": {}}

    def one(spec: dict[str, Any]) -> None:
        name = label(spec).replace("/", "_").replace("=", "-")
        found = floor_bench.child(["done_workload.py", "arm", "--spec", json.dumps(spec)], out / f"{name}.json",
                                  out / f"{name}.log")  # fmt: skip
        if found is not None:
            doc["arms"][label(spec)] = found
            print(f"{label(spec)}: done", flush=True)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, specs))
    doc["arms_seconds"] = time.perf_counter() - started
    doc["arms"] = {label(s): doc["arms"][label(s)] for s in specs if label(s) in doc["arms"]}  # the plan's order
    for mode in filter(None, args.pair_modes.split(",")):
        for preset in filter(None, args.pairs.split(",")):
            spec = {**base, "lcmu": mode == "true", "preset": preset, "reps": args.reps, "block": args.block}
            name = f"pair-lcmu-{mode}-{preset}"
            found = floor_bench.child(["done_workload.py", "pair", "--spec", json.dumps(spec)], out / f"{name}.json",
                                      out / f"{name}.log")  # fmt: skip
            if found is not None:
                doc["pairs"][f"lcmu={mode}/{preset}"] = found
    (out / RESULT).write_text(json.dumps(doc))
    return doc


def steady(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A pair's steady calls: in bursts, all but the first of each (it follows an idle time); else all but the first."""
    return [c for c in calls if c.get("at", 0) > 0] if any(c.get("at", 0) for c in calls) else calls[1:]


def _median(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def report(doc: dict[str, Any]) -> None:
    """Print, per mode and arm, which memory the calls left at rest (median over calls 2..N, min-max) and once idle."""
    print("memory at rest after calls 2..N, GiB, median (min-max); idle: after the idle time; x: RSS / nothing's")
    print(f"{'arm':<28} {'calls':>5} {'RSS':>18} {'anon':>18} {'file':>18} {'shmem':>18} {'pinned':>18}"
          f" {'idle RSS':>9} {'x':>6} {'x idle':>6}  outputs")  # fmt: skip
    for name, arm in doc["arms"].items():
        nothing = doc["arms"].get(f"{name.split('/')[0]}/nothing")
        rests = [c["rest"] for c in arm["calls"][1:]] or [c["rest"] for c in arm["calls"]]

        def col(key: str, rests: list[dict[str, Any]] = rests) -> list[float]:
            return [r[key] / GIB for r in rests if r.get(key) is not None]

        rss = statistics.median(col("rss")) if rests else None
        base_rss = statistics.median(c["rest"]["rss"] / GIB for c in nothing["calls"][1:]) if nothing else None
        ratio = f"{rss / base_rss:.3f}" if rss and base_rss else "-"
        idle_ratio = f"{arm['idle']['rss'] / nothing['idle']['rss']:.3f}" if nothing else "-"
        same = "-" if not nothing else (
            "equal" if all(a["digest"] == b["digest"] for a, b in zip(arm["calls"], nothing["calls"], strict=False))
            else "DIFFER"
        )  # fmt: skip
        if "error" in arm:
            same += f"; call {arm['error']['call']} raised {arm['error']['error'][:80]}"
        cells = [_median(col(k)) for k in ("rss", "anon", "file", "shmem", "pinned_owned")]
        print(f"{name:<28} {len(arm['calls']):>5} " + " ".join(f"{c:>18}" for c in cells)
              + f" {arm['idle']['rss'] / GIB:>9.2f} {ratio:>6} {idle_ratio:>6}  {same}")  # fmt: skip
    for name, pair in doc["pairs"].items():
        a, b = pair["calls"]["nothing"], pair["calls"]["preset"]
        steady_a, steady_b = [c["seconds"] for c in steady(a)], [c["seconds"] for c in steady(b)]
        ratios = [y / x for x, y in zip(steady_a, steady_b, strict=True)]
        equal = all(x["digest"] == y["digest"] for x, y in zip(a, b, strict=True))
        print(f"pair {name}: steady call s, nothing {_median(steady_a)}, preset {_median(steady_b)}, "
              f"ratio of medians {statistics.median(steady_b) / statistics.median(steady_a):.3f}, per pair "
              f"{_median(ratios)}; outputs {'equal' if equal else 'DIFFER'}")  # fmt: skip


def _gib(values: list[float]) -> str:
    return f"{statistics.median(values) / GIB:.2f}"


def markdown_rows(doc: dict[str, Any]) -> list[str]:
    """docs/done-components.md's rows: per arm, RSS at rest (median over calls 2..N) and its split, idle RSS, and
    the ratios to ``nothing``; then per pair, the steady call's median seconds and ratio."""
    rows = []
    for name, arm in doc["arms"].items():
        nothing = doc["arms"][f"{name.split('/')[0]}/nothing"]
        rests = [c["rest"] for c in arm["calls"][1:]] or [c["rest"] for c in arm["calls"]]
        base = statistics.median(c["rest"]["rss"] for c in nothing["calls"][1:])
        cells = [_gib([r[k] for r in rests]) for k in ("rss", "anon", "file", "shmem", "pinned_owned")]
        rss = statistics.median(r["rss"] for r in rests)
        calls = f"{len(arm['calls'])}" + (f", call {arm['error']['call']} raised" if "error" in arm else "")
        idle = arm["idle"]["rss"]
        ratios = f"{rss / base:.3f}{TIMES} | {idle / GIB:.2f} ({idle / nothing['idle']['rss']:.3f}{TIMES})"
        rows.append(f"| {name.split('/')[1]} | {calls} | " + " | ".join(cells) + f" | {ratios} |")
    for name, pair in doc["pairs"].items():
        a, b = steady(pair["calls"]["nothing"]), steady(pair["calls"]["preset"])
        ratios = [y["seconds"] / x["seconds"] for x, y in zip(a, b, strict=True)]
        seconds = [statistics.median(c["seconds"] for c in side) for side in (a, b)]
        rows.append(
            f"| {name.split('/')[1]} | {len(a)} | {seconds[0]:.2f} | {seconds[1]:.2f} "
            f"| {seconds[1] / seconds[0]:.3f}{TIMES} "
            f"| {statistics.median(ratios):.3f} ({min(ratios):.3f}{DASH}{max(ratios):.3f}) |"
        )
    return rows


def main() -> None:
    args = parse_args()
    report(run(args))


if __name__ == "__main__":
    main()
