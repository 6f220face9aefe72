"""The box: the smallest cgroup ``memory.max`` in which each arm makes its plain calls at full speed.

People size a machine, a container or a pod by the most memory their process ever holds: past ``memory.max``
the kernel kills it. Each trial here is a fresh process (``box_workload.py``) in a cgroup v2 child of its own,
``memory.swap.max`` 0, the page cache dropped first (so that the process is charged for the file pages it
reads). For each arm:

1. ``--reps`` unboxed trials (``memory.max`` unset), the arms interleaved rep by rep: the whole process's
   ``memory.peak``, ``memory.stat``'s anon / file / shmem and the RSS split at rest, the steady call (the
   median of calls 2..N of each trial; median, min and max over the trials) and each call's output digest.
2. Bisection to ``--step-gib`` for the smallest ``memory.max`` in which ``--calls`` calls complete, with outputs
   bitwise equal to ``nothing``'s unboxed ones in the same mode, and a steady call at most ``--tolerance`` times
   the arm's own unboxed steady call (a box that thrashes does not count). The upper end starts at the unboxed
   ``memory.peak`` and is checked; the lower end is the anon and shmem the arm holds at rest, which a box
   without swap cannot take from it.

Where cgroup v2 memory cannot be written (not root, no memory controller), it says so and stops: it never
prints a figure it did not measure. ``--size tiny`` runs the flow on a CPU (as root, with cgroup v2).

    python3 benchmarks/bench_box.py --out DIR --arms false/nothing,true/nothing,false/preset:lowest-peak+stable

At FLUX.1-dev's own shapes (``--size flux-dev``: 31.42 GiB of weights, drawn and saved once in the first call
on the GPU machine, 34 GB of its disk, then reused while it stays up), e.g. ``--size flux-dev --calls 3
--steps 28 --reps 1 --no-bisect``, a few arms per device call, each later call with ``--resume`` of the one before
(it keeps their arms and runs only what is missing). ``ARM*2`` arms run two processes from the same files in one
cgroup.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_pinned_floor as floor_bench

HERE = Path(__file__).resolve().parent
CGROUP = Path("/sys/fs/cgroup")
RESULT = "bench_box.json"
GIB = 2**30
ARMS = ",".join([
    "false/nothing", "true/nothing", "false/delete", "false/diffusers-mm",
    "false/ddo-auto", "false/ddo-vmm", "false/preset:default", "false/preset:lowest-peak",
    "false/preset:lowest-latency", "true/preset:default+register", "true/preset:lowest-peak+register",
])  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help=f"directory for {RESULT} and each trial's log")
    p.add_argument(
        "--arms",
        default=ARMS,
        help="MODE/ARM[*N], comma-separated; MODE: low_cpu_mem_usage (true|false); "
        "N: processes at once in one cgroup, each its own pipeline from the same files",
    )
    p.add_argument(
        "--size",
        choices=("full", "flux-dev", "tiny"),
        default="full",
        help="flux-dev: FLUX.1-dev's own shapes (about 31 GiB); tiny: toy models, runs on a CPU",
    )
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--reps", type=int, default=5, help="unboxed trials per arm, interleaved across the arms")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--resolution", type=int, default=None, help="default: 1024; tiny: 64")
    p.add_argument("--step-gib", type=float, default=0.25, help="the bisection's resolution")
    p.add_argument("--tolerance", type=float, default=1.10, help="steady call in the box / unboxed, at most")
    p.add_argument("--no-bisect", action="store_true", help="unboxed trials only")
    p.add_argument(
        "--warm-reps",
        action="store_true",
        help="unboxed trials after each arm's first keep the page cache (their call times count, not their memory)",
    )
    p.add_argument("--boxes", default="", help="MODE/ARM=GIB;...: trials at these boxes instead of bisecting")
    p.add_argument("--bisect", default="", help="MODE/ARM,...: bisect only these arms (default: every arm)")
    p.add_argument("--bracket", default="", help="MODE/ARM=LO,HI;...: where the bisection starts (HI is checked)")
    p.add_argument("--budget-s", type=float, default=0.0, help="start no trial after this many seconds (0: none)")
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        help="an earlier bench_box.json of the same workload: its arms' trials are kept, only the missing ones run",
    )
    p.add_argument("--weights-dir", type=Path, default=Path(tempfile.gettempdir()) / "ddo-floor-weights")
    args = p.parse_args(argv)
    args.families = "flux"  # what bench_pinned_floor's helpers read
    return args


# -- the cgroup ------------------------------------------------------------------------------------------


def cgroup_problem() -> str | None:
    """Why boxes cannot be measured here, or ``None`` when a cgroup v2 child with a memory limit can be made."""
    if not sys.platform.startswith("linux"):
        return f"cgroups are Linux's; this is {sys.platform}"
    controllers = CGROUP / "cgroup.controllers"
    if not controllers.is_file() or "memory" not in controllers.read_text().split():
        return f"{CGROUP} is not a cgroup v2 hierarchy with the memory controller"
    probe = CGROUP / f"ddo-box-probe-{os.getpid()}"
    try:
        _enable_memory(CGROUP)
        probe.mkdir()
        (probe / "memory.max").write_text(str(GIB))
        (probe / "memory.swap.max").write_text("0")
        Path("/proc/sys/vm/drop_caches").write_text("1")
    except OSError as e:
        return f"cannot make a cgroup with memory.max and memory.swap.max under {CGROUP} or drop caches ({e})"
    finally:
        if probe.exists():
            probe.rmdir()
    return None


def _enable_memory(folder: Path) -> None:
    control = folder / "cgroup.subtree_control"
    if "memory" not in control.read_text().split():
        control.write_text("+memory")


def _drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3")


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _events(folder: Path) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (line.split() for line in (folder / "memory.events").read_text().splitlines())}
    except OSError:
        return {}


def close_cgroup(folder: Path) -> tuple[int | None, dict[str, int]]:
    """A trial's cgroup once its processes ended: its ``memory.peak`` and ``memory.events``, then removed."""
    peak, events = _read_int(folder / "memory.peak"), _events(folder)
    for _ in range(50):  # killed processes leave the cgroup a moment after
        try:
            folder.rmdir()
            break
        except OSError:
            time.sleep(0.1)
    return peak, events


def trial(
    spec: dict[str, Any], box_gib: float | None, out: Path, label: str, timeout_s: float, drop: bool = True
) -> dict[str, Any]:
    """One fresh process in a fresh cgroup, ``memory.max`` = ``box_gib`` (``None``: unlimited); what it did.

    ``drop``: the page cache is dropped first, so that the process is charged for every file page it reads (else
    those it finds cached are charged to the cgroup that read them first: its call times count, not its memory).
    """
    folder = CGROUP / "ddo-box" / label
    _enable_memory(CGROUP)
    folder.parent.mkdir(exist_ok=True)
    _enable_memory(folder.parent)
    folder.mkdir()
    (folder / "memory.max").write_text("max" if box_gib is None else str(int(box_gib * GIB)))
    (folder / "memory.swap.max").write_text("0")
    (folder / "memory.oom.group").write_text("1")
    if drop:
        _drop_caches()
    procs = spec.get("procs", 1)  # processes at once in the one cgroup, each its own pipeline (ranks on one host)
    progress = [out / f"{label}{'' if i == 0 else f'-p{i}'}.jsonl" for i in range(procs)]
    enter = f'echo $$ > {folder}/cgroup.procs && exec "$0" "$@"'
    argv = ["/bin/sh", "-c", enter, sys.executable, "box_workload.py", "arm", "--spec", json.dumps(spec)]
    started = time.perf_counter()
    running = []
    for path in progress:
        path.unlink(missing_ok=True)
        output = (out / f"{path.stem}.log").open("w")
        running.append(subprocess.Popen([*argv, "--progress", str(path)], stdout=output, stderr=subprocess.STDOUT,
                                        cwd=HERE))  # fmt: skip
        output.close()
    codes: list[int | str] = []
    for proc in running:
        try:
            codes.append(proc.wait(timeout=max(1.0, timeout_s - (time.perf_counter() - started))))
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            codes.append("timeout")
    code = next((c for c in codes if c == "timeout"), None) or next((c for c in codes if c), 0)
    seconds = time.perf_counter() - started
    peak, events = close_cgroup(folder)
    steps = [[json.loads(line) for line in p.read_text().splitlines()] if p.is_file() else [] for p in progress]
    found = {"box_gib": box_gib, "exit": code, "seconds": seconds, "memory_peak": peak, "events": events,
             "cache_dropped": drop}  # fmt: skip
    return {**found, "steps": steps[0], **({"peers": steps[1:]} if procs > 1 else {})}


# -- what a trial says -----------------------------------------------------------------------------------


def calls(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in result["steps"] if s["event"] == "call"]


def steady(result: dict[str, Any]) -> float | None:
    """The median of calls 2..N (the first pins, compiles and faults in what the later ones reuse)."""
    seconds = [c["seconds"] for c in calls(result)[1:]]
    return statistics.median(seconds) if seconds else None


def wanted_calls(spec: dict[str, Any]) -> int:
    return 1 if spec["arm"] == "diffusers-mm" else spec["calls"]  # its second call raises (a known limit)


def verdict(spec: dict[str, Any], result: dict[str, Any], reference: list[str], unboxed_steady: float | None,
            tolerance: float) -> str | None:  # fmt: skip
    """``None`` when the trial fits; else why not."""
    made = calls(result)
    if result["events"].get("oom_kill") or result["events"].get("oom_group_kill"):
        return f"OOM-killed after {len(made)} call(s)"
    if result["exit"] == "timeout":
        return f"timed out after {len(made)} call(s)"
    if len(made) < wanted_calls(spec):
        return f"exit {result['exit']} after {len(made)} call(s)"
    digests = [c["digest"] for c in made]
    if digests != reference[: len(digests)]:
        return "outputs differ from nothing's"
    for peer in result.get("peers", []):
        if [c["digest"] for c in peer if c["event"] == "call"] != digests:
            return "a peer process's calls did not complete with the same outputs"
    now = steady(result)
    if unboxed_steady and now and now > tolerance * unboxed_steady:
        return f"steady call {now:.2f} s > {tolerance:.2f} x {unboxed_steady:.2f} s (thrashing)"
    return None


def at_rest(result: dict[str, Any]) -> dict[str, Any]:
    """What the process held at rest after its last call: RSS split and the cgroup's charge."""
    made = calls(result)
    return {key: made[-1].get(key) for key in ("memory", "cgroup", "gpu")} if made else {}


# -- the run ---------------------------------------------------------------------------------------------


def parse_arm(text: str) -> tuple[bool, str, int]:
    """``MODE/ARM`` or ``MODE/ARM*N`` (``N`` processes at once in one cgroup): ``(lcmu, arm, processes)``; ``ARM``
    may end in ``@RUNTIME`` (``floor_workload.RUNTIMES``; leaf level with streams when it does not)."""
    mode, _, arm = text.partition("/")
    arm, star, count = arm.partition("*")
    runtime = arm.partition("@")[2]
    if mode not in ("true", "false") or not arm or (star and not count.isdigit()) or count == "0":
        raise SystemExit(f"--arms: {text!r} is not MODE/ARM or MODE/ARM*N (MODE: true or false; N: processes)")
    if runtime:
        from floor_workload import RUNTIMES

        if runtime not in RUNTIMES:
            raise SystemExit(f"--arms: {text!r}: no runtime {runtime!r} (one of {', '.join(RUNTIMES)})")
    return mode == "true", arm, int(count or 1)


def label_of(lcmu: bool, arm: str, procs: int = 1) -> str:
    return f"{str(lcmu).lower()}/{arm}" + (f"*{procs}" if procs > 1 else "")


def arm_spec(base: dict[str, Any], lcmu: bool, arm: str, procs: int, calls: int) -> dict[str, Any]:
    """What the worker is told: the arm's name and its runtime apart (``ARM@RUNTIME``)."""
    name, _, runtime = arm.partition("@")
    return {**base, "lcmu": lcmu, "arm": name, "runtime": runtime or "leaf", "calls": calls, "procs": procs}


_TRIALS = itertools.count(1)


def file_label(text: str, suffix: str) -> str:
    """A file and cgroup name for one trial: the arm's label made safe, the trial's kind and a serial number."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
    return f"{next(_TRIALS):03d}-{safe}-{suffix}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    floor_bench.setup(args, out)
    base = floor_bench.workload_spec(args, "flux")
    arms = [parse_arm(a) for a in filter(None, args.arms.split(","))]
    doc: dict[str, Any] = {"command": "python3 benchmarks/bench_box.py " + " ".join(sys.argv[1:]),
                           "settings": {k: str(v) for k, v in vars(args).items()}, "arms": {}}  # fmt: skip
    doc["setup"] = json.loads((out / "setup-flux.json").read_text())  # the weights' manifest: sizes, seconds to draw
    specs = {label_of(lcmu, arm, procs): arm_spec(base, lcmu, arm, procs, args.calls) for lcmu, arm, procs in arms}
    for label in specs:
        doc["arms"][label] = {"unboxed": [], "trials": [], "box_gib": None, "box_note": None}
    if args.resume is not None:
        _resume(args, doc)

    def budget_left() -> bool:
        return not args.budget_s or time.perf_counter() - started < args.budget_s

    for rep in range(args.reps):  # unboxed, interleaved
        for label, spec in specs.items():
            if not budget_left():
                break
            if len(doc["arms"][label]["unboxed"]) > rep:  # resumed
                continue
            drop = rep == 0 or not args.warm_reps  # the first trial's memory figures are the table's
            result = trial(spec, None, out, file_label(label, f"unboxed{rep}"), timeout_s=900, drop=drop)
            doc["arms"][label]["unboxed"].append(result)
            print(f"{label}: unboxed {rep + 1}: {len(calls(result))} calls, steady {steady(result)}, "
                  f"memory.peak {result['memory_peak']}", flush=True)  # fmt: skip
            _save(out, doc)
    fixed = dict(item.split("=") for item in filter(None, args.boxes.split(";")))
    brackets = dict(item.split("=") for item in filter(None, args.bracket.split(";")))
    for label, spec in specs.items():
        arm = doc["arms"][label]
        nothing = doc["arms"].get(label_of(spec["lcmu"], "nothing"), arm)
        reference = [c["digest"] for c in calls(nothing["unboxed"][0])] if nothing["unboxed"] else []
        arm["reference"] = reference
        arm["steady"] = _spread([steady(r) for r in arm["unboxed"]])
        chosen = not args.bisect or label in args.bisect.split(",")
        if args.no_bisect or not chosen or not arm["unboxed"] or not budget_left():
            continue
        fits = functools.partial(_fits, args, out, doc, label, spec)
        if label in fixed:
            for box in map(float, fixed[label].split(",")):
                if budget_left():
                    fits(box)
            continue
        start = tuple(map(float, brackets[label].split(","))) if label in brackets else None
        arm["box_gib"], arm["box_note"] = bisect(arm["unboxed"][0], fits, args.step_gib, budget_left, start)
        print(f"{label}: smallest box {arm['box_gib']} GiB ({arm['box_note']})", flush=True)
        _save(out, doc)
    doc["seconds"] = time.perf_counter() - started
    doc["complete"] = budget_left()
    _save(out, doc)
    return doc


WORKLOAD = ("size", "calls", "steps", "resolution", "weights_dir")


def _resume(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Take every arm's unboxed and boxed trials from ``--resume`` (one device call rarely holds every arm at
    FLUX.1-dev's size), arms not run now included; the workload's settings must be the same."""
    try:
        earlier = json.loads(args.resume.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"--resume {args.resume}: cannot read an earlier bench_box.json ({e})") from e
    now = doc["settings"]
    differ = [k for k in WORKLOAD if earlier.get("settings", {}).get(k) != now[k]]
    if differ:
        raise SystemExit(f"--resume {args.resume}: its workload differs in {', '.join(differ)}; rerun instead")
    for label, found in earlier["arms"].items():  # arms not in --arms now are kept as they were
        doc["arms"].setdefault(label, found).update(unboxed=found["unboxed"], trials=found["trials"])
    doc["commands"] = [*earlier.get("commands", [earlier["command"]]), doc["command"]]


def _fits(
    args: argparse.Namespace, out: Path, doc: dict[str, Any], label: str, spec: dict[str, Any], box: float
) -> bool:
    """One boxed trial of the arm ``label``, recorded with its verdict; whether it fits."""
    arm = doc["arms"][label]
    limit = 60 + 3 * arm["unboxed"][0]["seconds"]  # a box that thrashes is cut short: it does not fit anyway
    result = trial(spec, box, out, file_label(label, f"box{box:g}"), timeout_s=limit)
    unboxed = arm["steady"]["median"] if arm["steady"] else None
    result["verdict"] = verdict(spec, result, arm["reference"], unboxed, args.tolerance)
    arm["trials"].append(result)
    print(f"{label}: box {box:g} GiB: {result['verdict'] or 'fits'}", flush=True)
    _save(out, doc)
    return result["verdict"] is None


def bisect(
    first: dict[str, Any], fits: Any, step: float, budget_left: Any, start: tuple[float, float] | None = None
) -> tuple[float | None, str]:
    """The smallest box that fits, to ``step``: between the anon + shmem held at rest and ``memory.peak``
    (or ``start``, whose upper end is checked like the peak's)."""
    rest = at_rest(first).get("cgroup") or {}
    floor_bytes = (rest.get("anon") or 0) + (rest.get("shmem") or 0)
    lo = math.floor(floor_bytes / GIB / step) * step
    hi = math.ceil((first["memory_peak"] or 0) / GIB / step) * step + step
    if start is not None:
        lo, hi = max(lo, start[0]), start[1]
    for _ in range(3):  # the upper end must fit
        if not budget_left():
            return None, "budget spent before an upper end was found"
        if fits(hi):
            break
        lo, hi = hi, hi * 1.5
    else:
        return None, f"nothing up to {hi:g} GiB fits"
    checked = False  # whether a trial at lo failed (else lo is the start's assumption)
    while hi - lo > step + 1e-9:
        if not budget_left():
            return hi, f"budget spent: fits at {hi:g}; below it, only {lo:g} and less are known not to fit"
        mid = round(((lo + hi) / 2) / step) * step
        if mid in (lo, hi):
            mid = lo + step
        if fits(mid):
            hi = mid
        else:
            lo, checked = mid, True
    why = "failed its trial" if checked else "was not tried: what it holds at rest, or the bracket's lower end"
    return hi, f"fits at {hi:g} GiB; {lo:g} {why}"


def _spread(values: list[float | None]) -> dict[str, float] | None:
    found = [v for v in values if v is not None]
    if not found:
        return None
    return {"median": statistics.median(found), "min": min(found), "max": max(found), "n": len(found)}


def _save(out: Path, doc: dict[str, Any]) -> None:
    (out / RESULT).write_text(json.dumps(doc))


# -- the table -------------------------------------------------------------------------------------------


def report(doc: dict[str, Any]) -> None:
    """Per arm: the smallest box, the unboxed memory.peak, the charge and RSS split at rest, the steady call."""
    g = lambda v: "-" if v is None else f"{v / GIB:.2f}"  # noqa: E731
    print("GiB; box: smallest memory.max that fits (to the step); peak: memory.peak of the unboxed process's life;")
    print("anon/file/shmem: memory.stat at rest after the last call; RSS: anon/file/shmem of /proc/self/status;")
    print("GPU: what the process keeps allocated on the GPU at rest; ARM*N: N processes at once in one cgroup")
    print(f"{'arm':<36} {'box':>6} {'peak':>6} {'cg anon':>8} {'cg file':>8} {'cg shmem':>8} {'RSS':>6} "
          f"{'anon':>6} {'file':>6} {'shmem':>6} {'GPU':>6} {'steady s (min-max, n)':>24}")  # fmt: skip
    for label, arm in doc["arms"].items():
        if not arm["unboxed"]:
            print(f"{label:<36} not run")
            continue
        first = arm["unboxed"][0]
        errors = [s["error"] for s in first["steps"] if s["event"] == "error"]
        if errors and not calls(first):
            print(f"{label:<36} its setup raised: {errors[0]}")
            continue
        rest = at_rest(first)
        cg, mem, gpu = rest.get("cgroup") or {}, rest.get("memory") or {}, rest.get("gpu") or {}
        s = arm.get("steady")
        timing = "-" if not s else f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f}, {s['n']})"
        box = "-" if arm["box_gib"] is None else f"{arm['box_gib']:g}"
        print(f"{label:<36} {box:>6} {g(first['memory_peak']):>6} {g(cg.get('anon')):>8} {g(cg.get('file')):>8} "
              f"{g(cg.get('shmem')):>8} {g(mem.get('rss')):>6} {g(mem.get('anon')):>6} {g(mem.get('file')):>6} "
              f"{g(mem.get('shmem')):>6} {g(gpu.get('allocated')):>6} {timing:>24}")  # fmt: skip
        for t in arm["trials"]:
            print(f"{'':<8}box {t['box_gib']:g}: {t['verdict'] or 'fits'}, steady {steady(t)}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = cgroup_problem()
    if problem is not None:
        print(f"bench_box: {problem}; the box cannot be measured here, and no figure is printed", file=sys.stderr)
        return 2
    if args.resolution is None and args.size == "tiny":
        args.resolution = 64
    report(run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
