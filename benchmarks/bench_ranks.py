"""Two ranks on one host, each on its own GPU, in one cgroup: the host memory they take and their steady calls.

Users with several GPUs run one rank per GPU under ``torchrun``. Each trial here starts ``python -m
torch.distributed.run --standalone --nproc_per_node=N ranks_workload.py`` in a cgroup v2 child of its own
(``memory.swap.max`` 0, the page cache dropped first, so that the trial is charged for the file pages its ranks
read): N = 2, each rank on its own GPU (``cuda:LOCAL_RANK`` after ``torch.cuda.set_device``), or N = 1, one rank
alone in the same way. Every rank loads the same saved folder (``bench_box.py``'s Flux-shaped pipeline) with the
arm, ``MODE/ARM`` as ``bench_box.py`` names them: by default ``smallest-box`` and, for comparison, ``nothing``. The
trials of every arm and rank count are interleaved, ``--reps`` (3) of each. ``bench_ranks.json`` records each
trial's cgroup ``memory.peak`` (the launcher's own memory included, alike for both counts), each rank's calls
(the steady call: the median of calls 2..N), its GPU memory, whether it made a context on another GPU, and each
call's output digest. The table sets two ranks beside one (medians, ranges) against the targets of issue 53:
``memory.peak`` at most 1.15x one rank's, each rank's steady call within the range of one rank alone, outputs
bitwise equal to one rank's.

Where cgroup v2 memory cannot be written (not root, no memory controller) it says so and stops, unless
``--without-cgroup``: then no cgroup of ours holds the ranks and ``memory.peak`` is recorded as not measured
(``null``). With CUDA it needs two GPUs and stops otherwise; without CUDA, or with ``--cpu`` (CUDA hidden from the
ranks), ``--size tiny`` runs the ranks on the CPU: the flow, not GPU figures.

    python3 benchmarks/bench_ranks.py --out DIR         # a two-GPU machine, as root: the Flux-shaped size
    python3 benchmarks/bench_ranks.py --out DIR --size tiny --cpu --calls 3 --steps 2 --without-cgroup   # a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_box as box
import bench_pinned_floor as floor_bench

HERE = Path(__file__).resolve().parent
RESULT = "bench_ranks.json"
GIB = 2**30
RANKS = (1, 2)
"""The rank counts of every arm: one rank alone, and two ranks, each on its own GPU."""
PEAK_TARGET = 1.15
"""Issue 53: two ranks' ``memory.peak`` at most this many times one rank's."""
WORKLOAD = ("size", "calls", "steps", "resolution", "weights_dir", "threads")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help=f"directory for {RESULT} and each trial's logs")
    p.add_argument("--arms", default="true/preset:smallest-box,false/nothing", help="MODE/ARM, comma-separated")
    p.add_argument("--size", choices=("full", "flux-dev", "tiny"), default="full", help="tiny: runs on a CPU")
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--reps", type=int, default=3, help="trials per arm and rank count, interleaved")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--resolution", type=int, default=None, help="default: 1024; tiny: 64")
    p.add_argument(
        "--threads",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="OMP_NUM_THREADS of every rank, one rank alone too (default: half the CPUs)",
    )
    p.add_argument("--budget-s", type=float, default=0.0, help="start no trial after this many seconds (0: none)")
    p.add_argument("--timeout-s", type=float, default=900.0, help="a trial still running then is stopped")
    p.add_argument("--resume", type=Path, default=None, help="an earlier bench_ranks.json: only missing trials run")
    p.add_argument("--without-cgroup", action="store_true", help="run without a cgroup: memory.peak not measured")
    p.add_argument("--cpu", action="store_true", help="ranks on the CPU even where there is CUDA (hidden from them)")
    p.add_argument("--weights-dir", type=Path, default=Path(tempfile.gettempdir()) / "ddo-floor-weights")
    args = p.parse_args(argv)
    args.families = "flux"  # what bench_pinned_floor's helpers read
    if args.resolution is None and args.size == "tiny":
        args.resolution = 64
    return args


def device_problem(cuda: bool, count: int, size: str) -> str | None:
    """Why the ranks cannot run here, or ``None``: with CUDA, each rank needs a GPU of its own."""
    if cuda and count < len(RANKS):
        return f"two ranks, each on its own GPU, need two GPUs; this machine has {count}"
    if not cuda and size != "tiny":
        return f"without CUDA only --size tiny runs (on the CPU), not --size {size}"
    return None


def arm_specs(args: argparse.Namespace, base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    specs = {}
    for text in filter(None, args.arms.split(",")):
        lcmu, arm, procs = box.parse_arm(text)
        if procs != 1:
            raise SystemExit(f"--arms: {text!r}: the rank counts are this script's ({RANKS}); name no *N")
        if arm.startswith("ddo-"):  # box_workload._ddo names cuda:0 for every process
            raise SystemExit(f"--arms: {text!r}: DDO's own arms run on cuda:0 only, not on each rank's GPU")
        specs[box.label_of(lcmu, arm)] = box.arm_spec(base, lcmu, arm, 1, args.calls)
    return specs


# -- one trial: torchrun in a cgroup of its own ------------------------------------------------------------


def session(spec: dict[str, Any], nproc: int, out: Path, label: str, args: argparse.Namespace) -> dict[str, Any]:
    """``nproc`` ranks of the arm under torchrun, in a fresh cgroup (unless ``--without-cgroup``); what they did."""
    folder = None if args.without_cgroup else box.CGROUP / "ddo-ranks" / f"{os.getpid()}-{label}"
    if folder is not None:
        box._enable_memory(box.CGROUP)
        folder.parent.mkdir(exist_ok=True)
        box._enable_memory(folder.parent)
        folder.mkdir()
        for name, value in (("memory.max", "max"), ("memory.swap.max", "0"), ("memory.oom.group", "1")):
            (folder / name).write_text(value)
        box._drop_caches()
    prefix = out / label
    progress = [Path(f"{prefix}-rank{rank}.jsonl") for rank in range(nproc)]
    for path in progress:
        path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "ranks_workload.py", "--spec", json.dumps(spec), "--progress", str(prefix)]  # fmt: skip
    if folder is not None:  # the launcher enters the cgroup before it starts: its ranks are born there
        argv = ["/bin/sh", "-c", f'echo $$ > {folder}/cgroup.procs && exec "$0" "$@"', *argv]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}  # torchrun sets 1 for N > 1 only: the same for both
    if args.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    started = time.perf_counter()
    with (out / f"{label}.log").open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=HERE, env=env)
    code: int | str
    try:
        code = proc.wait(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        _stop(proc, folder)
        code = "timeout"
    except BaseException:  # SIGTERM (the step's timeout) or ^C: the trial's ranks end with this script
        _stop(proc, folder)
        raise
    seconds = time.perf_counter() - started
    peak, events = None, None
    if folder is not None:
        peak, events = box.close_cgroup(folder)
    steps = [[json.loads(line) for line in p.read_text().splitlines()] if p.is_file() else [] for p in progress]
    return {"ranks": nproc, "exit": code, "seconds": seconds, "memory_peak": peak, "events": events,
            "cgroup": str(folder) if folder else None, "cache_dropped": folder is not None,
            "log": f"{label}.log", "steps": steps}  # fmt: skip


def _stop(proc: subprocess.Popen, folder: Path | None) -> None:
    """End a trial past its time: the whole cgroup at once, or torchrun, which ends its ranks (their own sessions)."""
    if folder is not None and (folder / "cgroup.kill").exists():
        (folder / "cgroup.kill").write_text("1")
    else:
        proc.terminate()
        try:
            proc.wait(timeout=60)
            return
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


# -- what the trials say -----------------------------------------------------------------------------------


def calls(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in steps if s["event"] == "call"]


def steady(steps: list[dict[str, Any]]) -> float | None:
    """One rank's steady call: the median of its calls 2..N (the first pins, faults in and warms up)."""
    seconds = [c["seconds"] for c in calls(steps)[1:]]
    return statistics.median(seconds) if seconds else None


def complete(trial: dict[str, Any], wanted: int) -> bool:
    return trial["exit"] == 0 and all(len(calls(steps)) == wanted for steps in trial["steps"])


def context_elsewhere(steps: list[dict[str, Any]]) -> bool | None:
    """Whether the rank made a CUDA context on a GPU not its own (``None``: no CUDA, or it did not end)."""
    start, end = steps[0], next((s for s in steps if s["event"] == "end"), None)
    if end is None or end.get("contexts") is None:
        return None
    return any(has for i, has in enumerate(end["contexts"]) if i != start["rank"])


def rows(trials: list[dict[str, Any]], nproc: int, wanted: int) -> dict[str, Any]:
    """One rank count of one arm over its trials: spreads of its peak and of each rank's steady call."""
    done = [t for t in trials if complete(t, wanted)]
    gpu = [[(c.get("gpu") or {}).get("max_allocated") for t in done for c in calls(t["steps"][r])]
           for r in range(nproc)]  # fmt: skip
    return {
        "trials": len(trials),
        "complete": len(done),
        "failed": [{"exit": t["exit"], "log": t["log"], "events": t["events"]} for t in trials if t not in done],
        "memory_peak": box._spread([t["memory_peak"] for t in done]),
        "steady": [box._spread([steady(t["steps"][r]) for t in done]) for r in range(nproc)],
        "gpu_max_allocated": [max(filter(None, found), default=None) for found in gpu],
        "context_elsewhere": [any(context_elsewhere(t["steps"][r]) or False for t in done) for r in range(nproc)],
        "digests": sorted({tuple(c["digest"] for c in calls(steps)) for t in done for steps in t["steps"]}),
    }


def compare(one: dict[str, Any], two: dict[str, Any]) -> dict[str, Any]:
    """Two ranks against one rank alone, as issue 53's targets put it (``None`` where a side is missing)."""
    peaks = one["memory_peak"], two["memory_peak"]
    ratio = peaks[1]["median"] / peaks[0]["median"] if all(peaks) else None
    alone = one["steady"][0]
    steady_ratio = [s["median"] / alone["median"] if s and alone else None for s in two["steady"]]
    within = [alone["min"] <= s["median"] <= alone["max"] if s and alone else None for s in two["steady"]]
    digests = one["digests"] + two["digests"]
    return {
        "memory_peak_ratio": ratio,
        "memory_peak_met": None if ratio is None else ratio <= PEAK_TARGET,
        "steady_ratio": steady_ratio,
        "steady_within_one_rank": within,
        "outputs_equal": len(set(digests)) == 1 if one["digests"] and two["digests"] else None,
    }


def summarize(doc: dict[str, Any], wanted: int) -> dict[str, Any]:
    arms = {}
    for label, arm in doc["arms"].items():
        found = {str(n): rows(arm[str(n)], n, wanted) for n in RANKS}
        arms[label] = {**found, "two_to_one": compare(found["1"], found["2"])}
    digests = {d for arm in arms.values() for n in RANKS for d in arm[str(n)]["digests"]}
    return {"arms": arms, "outputs_equal_across_arms": len(digests) == 1 if digests else None}


# -- the run -----------------------------------------------------------------------------------------------


def run(args: argparse.Namespace, where: dict[str, Any]) -> dict[str, Any]:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    floor_bench.setup(args, out)
    specs = arm_specs(args, floor_bench.workload_spec(args, "flux"))
    doc: dict[str, Any] = {"command": "python3 benchmarks/bench_ranks.py " + " ".join(sys.argv[1:]),
                           "settings": {k: str(v) for k, v in vars(args).items()}, "where": where,
                           "setup": json.loads((out / "setup-flux.json").read_text()),
                           "arms": {label: {str(n): [] for n in RANKS} for label in specs}}  # fmt: skip
    if args.resume is not None:
        _resume(args, doc)
    for rep in range(args.reps):  # interleaved: every arm and rank count once, then again
        for label, spec in specs.items():
            for n in RANKS:
                trials = doc["arms"][label][str(n)]
                if len(trials) > rep or (args.budget_s and time.perf_counter() - started > args.budget_s):
                    continue
                result = session(spec, n, out, box.file_label(label, f"{n}rank-{rep}"), args)
                trials.append(result)
                peak = "not measured" if result["memory_peak"] is None else f"{result['memory_peak'] / GIB:.2f} GiB"
                print(f"{label}, {n} rank(s), trial {rep + 1}: exit {result['exit']}, steady "
                      f"{[steady(s) for s in result['steps']]}, memory.peak {peak}", flush=True)  # fmt: skip
                _save(out, doc)
    doc["summary"] = summarize(doc, args.calls)
    doc["seconds"] = time.perf_counter() - started
    doc["complete"] = all(len(t) >= args.reps for arm in doc["arms"].values() for t in arm.values())
    _save(out, doc)
    return doc


def _resume(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Keep every trial of ``--resume`` (arms not named now included); the workload must be the same."""
    try:
        earlier = json.loads(args.resume.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"--resume {args.resume}: cannot read an earlier {RESULT} ({e})") from e
    differ = [k for k in WORKLOAD if earlier.get("settings", {}).get(k) != doc["settings"][k]]
    if differ:
        raise SystemExit(f"--resume {args.resume}: its workload differs in {', '.join(differ)}; rerun instead")
    for label, found in earlier["arms"].items():
        doc["arms"].setdefault(label, {str(n): [] for n in RANKS}).update(found)
    doc["commands"] = [*earlier.get("commands", [earlier["command"]]), doc["command"]]


def _save(out: Path, doc: dict[str, Any]) -> None:
    (out / RESULT).write_text(json.dumps(doc))


# -- the table ---------------------------------------------------------------------------------------------


def _spread_text(s: dict[str, float] | None, scale: float = 1.0) -> str:
    """``median (min-max, n)``, two decimals (three significant digits below 1: the CPU's tiny calls)."""
    if not s:
        return "-"
    f = lambda v: f"{v / scale:.2f}" if v >= scale else f"{v / scale:.3g}"  # noqa: E731
    return f"{f(s['median'])} ({f(s['min'])}-{f(s['max'])}, {s['n']})"


def report(doc: dict[str, Any]) -> None:
    """Per arm, one rank beside two: memory.peak, each rank's steady call, GPU memory, outputs; then the targets."""
    where, summary = doc["where"], doc["summary"]
    print(f"ranks on {where['device']} ({where['gpus']} GPU(s)), OMP_NUM_THREADS {where['threads']}; "
          f"cgroup: {where['cgroup'] or 'one per trial, memory.swap.max 0, page cache dropped first'}")  # fmt: skip
    print("memory.peak: the trial's cgroup, GiB; steady: each rank's median of calls 2..N, s; median (min-max, n) "
          "over the trials; GPU: each rank's most allocated, GiB")  # fmt: skip
    print(f"{'arm':<34} {'ranks':>5} {'memory.peak':>22} {'steady, rank 0':>22} {'steady, rank 1':>22} {'GPU':>11}")
    for label, arm in summary["arms"].items():
        for n in RANKS:
            row = arm[str(n)]
            if not row["complete"]:
                print(f"{label:<34} {n:>5} no complete trial of {row['trials']}: {row['failed'][:1]}")
                continue
            peak = _spread_text(row["memory_peak"], GIB) if row["memory_peak"] else "not measured"
            ranks = [_spread_text(s) for s in row["steady"]] + ["-"] * (2 - n)
            gpu = "/".join("-" if b is None else f"{b / GIB:.2f}" for b in row["gpu_max_allocated"])
            print(f"{label:<34} {n:>5} {peak:>22} {ranks[0]:>22} {ranks[1]:>22} {gpu:>11}")
            if row["failed"]:
                print(f"{'':<8}{len(row['failed'])} of {row['trials']} trials failed: {row['failed']}")
        c = arm["two_to_one"]
        peak = (f"memory.peak {c['memory_peak_ratio']:.2f}x one rank's (target <= {PEAK_TARGET}: "
                f"{'met' if c['memory_peak_met'] else 'missed'})" if c["memory_peak_ratio"] is not None
                else "memory.peak not measured")  # fmt: skip
        ratios = ", ".join("-" if r is None else f"{r:.2f}x" for r in c["steady_ratio"])
        within = ", ".join({True: "yes", False: "no", None: "-"}[w] for w in c["steady_within_one_rank"])
        outputs = {True: "bitwise equal", False: "DIFFER", None: "not compared"}[c["outputs_equal"]]
        print(f"{'':<8}two ranks against one: {peak}; steady {ratios} one rank's (within its range: {within}); "
              f"outputs {outputs} to one rank's")  # fmt: skip
    across = {True: "bitwise equal", False: "DIFFER", None: "not compared"}[summary["outputs_equal_across_arms"]]
    print(f"every arm's outputs, every rank's: {across}")
    if not doc["complete"]:
        print(f"incomplete: fewer than --reps trials for some arm (the budget); --resume {RESULT} runs the rest")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = box.cgroup_problem()
    if problem is not None and not args.without_cgroup:
        print(f"bench_ranks: {problem}; memory.peak cannot be measured here, and no figure is printed "
              "(--without-cgroup runs the ranks without it)", file=sys.stderr)  # fmt: skip
        return 2
    import torch

    cuda = not args.cpu and torch.cuda.is_available()
    count = torch.cuda.device_count() if cuda else 0
    refused = device_problem(cuda, count, args.size)
    if refused is not None:
        print(f"bench_ranks: {refused}; no figure is printed", file=sys.stderr)
        return 2
    cgroup = None if not args.without_cgroup else f"none (--without-cgroup{f': {problem}' if problem else ''})"
    where = {"device": "cuda" if cuda else "cpu", "gpus": count, "threads": args.threads, "cgroup": cgroup}
    report(run(args, where))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # timeout(1): stop the running trial, keep the rest
    raise SystemExit(main())
