"""How ``ddo-hooks plot`` and ``summarize`` scale with the number of records: wall time, CPU and peak RSS.

Writes report files of valid records (each record is a template validated once by the library's
own models, replicated with other numbers and envelopes), then runs each command on them in a
fresh process, the cases interleaved, several times, and prints the median and the spread
(min-max) of the wall time, the CPU time (user + system) and the peak RSS of the command's
process (``ru_maxrss``, from ``os.wait4``). A case's records are split into files of at most
``--per-file`` records, one file per worker (rank r of W, its own run id, pid and host), as
workers write them; every release holds readings (owned pinned bytes and RSS, before and after).

Cases: ``plot-N`` draws N releases (three boundaries per call); ``summarize-N`` summarizes N
records (per call three releases and a user action that observed the RSS). Targets (issue 20):
``plot`` of 30,000 releases under 10 s, ``summarize`` of 100,000 records under 5 s and 200 MiB.
No time is asserted: the figures are printed.

Run: ``python benchmarks/bench_cli_scale.py [--repeats 3] [--cases plot-300,summarize-100000] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

CASES = ("plot-300", "plot-2000", "plot-30000", "summarize-100000")
TARGETS = {"plot-30000": (10.0, None), "summarize-100000": (5.0, 200.0)}  # (wall s, peak RSS MiB)
BOUNDARIES = ("before_transformer", "before_vae", "after_call")
GiB, MiB = 1 << 30, 1 << 20
START = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)


def _snapshot(owned: int) -> dict[str, Any]:
    return {
        "status": "available", "unavailable_reason": None, "allocated_bytes": owned,
        "reported_active_bytes": 16 * MiB, "active_bytes": 16 * MiB, "active_counter_consistent": True,
        "counter_layout": "torch>=2.10", "pinned_blocks_total": 2, "pinned_bytes_total": 5 * MiB,
        "pin_seconds_total": 0.001,
    }  # fmt: skip


def _host(rss: int) -> dict[str, Any]:
    return {
        "platform": "linux", "rss_bytes": rss, "private_bytes": None, "physical_available_bytes": None,
        "commit_available_bytes": None, "rss_anon_bytes": rss // 2, "rss_file_bytes": rss // 8,
        "rss_shmem_bytes": rss - rss // 2 - rss // 8, "cgroup_memory_bytes": rss + 64 * MiB,
        "cgroup_limit_bytes": None, "unavailable": {},
    }  # fmt: skip


def release(phase: str, before: int, after: int, rss: int) -> dict[str, Any]:
    """An executed ``host_cache_release`` report as the release core writes it on a CUDA machine."""
    return {
        "schema_version": 1,
        "route": "pytorch_host_cache_release",
        "setup": {
            "host_cache_release": {
                "phase": phase, "status": "executed", "noop_reason": None,
                "detail": "released unused pinned host blocks through torch._C._host_emptyCache",
                "released": True, "elapsed_seconds": 0.0015831619984965073,
                "timings": {
                    "collect_seconds": 0.000253847001658869, "synchronize_seconds": 1.9529998098732904e-06,
                    "snapshot_seconds": 0.001239752000401495, "release_seconds": 9.414001397090033e-06,
                },
                "device": "cuda:0", "synchronized": True, "entry_point": "torch._C._host_emptyCache",
                "torch_version": "2.11.0", "collection": {
                    "strategy": "young", "full_collection": False, "unreachable_objects": 0,
                    "expected_freed": [], "survivors": [],
                },
                "threshold": None, "before": _snapshot(before), "after": _snapshot(after),
                "allocator_bytes_delta": before - after, "host_before": _host(rss),
                "host_after": _host(rss - (before - after)), "pinned_since_previous": None,
                "pinned_allocation": "cudaHostAlloc",
            }
        },
    }  # fmt: skip


def action(boundary: str, rss: int) -> dict[str, Any]:
    """A user action's report that observed the process RSS."""
    result = {"action": "my_pkg.log_memory", "boundary": boundary, "status": "executed", "data": {"rss_bytes": rss}}
    return {"schema_version": 1, "route": "boundary_action", "setup": {"boundary_action": result}}


def check_templates() -> None:
    """Validate each kind of record once with the library's models (the command validates every one)."""
    from ddo_hooks.reports.envelope import ReportRecord

    for report in (release("before_vae", 3 * GiB, 16 * MiB, 8 * GiB), action("after_call", 8 * GiB)):
        record = {"component": "x", "report": report, "envelope": _envelope("0" * 32, 1, "after_call", 0, 1, 0, 1)}
        ReportRecord.model_validate(record)


def _envelope(run_id: str, call: int, boundary: str, n: int, pid: int, rank: int, world: int) -> dict[str, Any]:
    return {
        "envelope_version": 1, "run_id": run_id, "call_index": call, "boundary": boundary,
        "timestamp": (START + timedelta(milliseconds=n)).isoformat().replace("+00:00", "Z"),
        "pid": pid, "host": f"gpu-node-{rank}", "rank": rank, "world_size": world,
    }  # fmt: skip


def write_case(folder: Path, kind: str, count: int, per_file: int) -> list[Path]:
    """The files of a case: ``count`` records (releases for ``plot``; releases and actions for ``summarize``)."""
    world = math.ceil(count / per_file)
    paths = []
    for rank in range(world):
        share = count // world + (rank < count % world)
        run_id = f"{rank + 1:x}" * 32
        path = folder / f"{kind}-{count}-rank{rank}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for n in range(share):
                per_call = 3 if kind == "plot" else 4
                call, slot = n // per_call + 1, n % per_call
                boundary = BOUNDARIES[min(slot, 2)]
                rss = 8 * GiB + (n % 97) * MiB
                if slot == 3:
                    component, report = "my_pkg.log_memory_after_call", action(boundary, rss)
                else:
                    owned = (3 * GiB if slot == 0 else 272 * MiB) + (n % 89) * MiB
                    component, report = f"host_cache_{boundary}", release(boundary, owned, 16 * MiB, rss)
                envelope = _envelope(run_id, call, boundary, n, 1000 + rank, rank, world)
                out.write(json.dumps({"component": component, "report": report, "envelope": envelope}) + "\n")
        paths.append(path)
    return paths


def run_once(argv: list[str], timeout: float) -> dict[str, Any]:
    """Wall and CPU seconds and peak RSS (MiB) of one command in a fresh process; ``None`` figures past ``timeout``."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - start > timeout:
            os.killpg(proc.pid, signal.SIGKILL)
            _, _, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return {  # what it had used when it was stopped: lower bounds
                "wall_s": None, "cpu_s": None, "peak_rss_mib": None, "timed_out": True,
                "cpu_s_when_stopped": usage.ru_utime + usage.ru_stime, "peak_rss_mib_when_stopped": _mib(usage),
                "load": os.getloadavg()[0],
            }  # fmt: skip
        time.sleep(0.02)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    error = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[2:5])}... exited {proc.returncode}: {error[-2000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": _mib(usage),
        "timed_out": False,
        "load": os.getloadavg()[0],  # the 1-minute load average when it ended: other work on the machine
    }


def _mib(usage: Any) -> float:
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024) / MiB  # ru_maxrss: bytes on macOS, KiB on Linux


def _figure(values: list[float | None]) -> dict[str, Any]:
    done = [v for v in values if v is not None]
    if not done:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(done), "min": min(done), "max": max(done), "n": len(done)}


def _shown(figure: dict[str, Any], digits: int) -> str:
    if figure["median"] is None:
        return "timed out"
    return f"{figure['median']:.{digits}f} ({figure['min']:.{digits}f}-{figure['max']:.{digits}f})"


def report(results: dict[str, Any]) -> None:
    """Print the figures of each case: median (min-max) of wall s, CPU s and peak RSS MiB, and the target."""
    print(f"{results['repeats']} interleaved repetitions; median (min-max)")
    print(f"{'case':<18} {'wall s':>24} {'CPU s':>24} {'peak RSS MiB':>24}  {'CPU per record':>14}  target")
    for name, case in results["cases"].items():
        wall, cpu, rss = case["wall_s"], case["cpu_s"], case["peak_rss_mib"]
        per = "" if cpu["median"] is None else f"{cpu['median'] / case['records'] * 1000:.3f} ms"
        target = TARGETS.get(name)
        verdict = ""
        if target is not None:
            met = wall["median"] is not None and wall["median"] < target[0]
            met = met and (target[1] is None or rss["median"] < target[1])
            limits = f"< {target[0]:g} s" + ("" if target[1] is None else f", < {target[1]:g} MiB")
            verdict = f"{limits}: {'met' if met else 'not met'}"
        print(f"{name:<18} {_shown(wall, 2):>24} {_shown(cpu, 2):>24} {_shown(rss, 1):>24}  {per:>14}  {verdict}")
        if case["timed_out"]:
            stopped = [run["cpu_s_when_stopped"] for run in case["runs"] if run["timed_out"]]
            print(
                f"{'':<18} {case['timed_out']} stopped after {results['timeout_s']:g} s, having used "
                f"{min(stopped):.1f}-{max(stopped):.1f} s of CPU"
            )
    loads = [run["load"] for case in results["cases"].values() for run in case["runs"]]
    cpus = results["machine"]["cpus"]
    print(f"1-minute load average at the end of each run: {min(loads):.1f}-{max(loads):.1f} ({cpus} CPUs)")


DASH = "\u2013"  # as docs/benchmarks-cli.md writes a range


def _cell(figure: dict[str, Any], digits: int) -> str:
    if figure["n"] == 1:
        return f"{figure['median']:.{digits}f}"
    return f"{figure['median']:.{digits}f} ({figure['min']:.{digits}f}{DASH}{figure['max']:.{digits}f})"


def case_text(name: str, records: int) -> str:
    """``\\`plot\\`, 30,000 releases``: how docs/benchmarks-cli.md names a case."""
    kind = name.partition("-")[0]
    return f"`{kind}`, {records:,} {'releases' if kind == 'plot' else 'records'}"


def markdown_row(results: dict[str, Any], name: str, label: str) -> str:
    """The row of docs/benchmarks-cli.md for one case of a results file: CPU s, wall s, peak RSS MiB, median (min-max).

    A command stopped at the time limit shows what it had used by then, as lower bounds.
    """
    case = results["cases"][name]
    if case["timed_out"] == len(case["runs"]):
        used = [run.get("cpu_s_when_stopped") for run in case["runs"]]  # not recorded by the first version
        peak = [run.get("peak_rss_mib_when_stopped") for run in case["runs"]]
        cells = [
            "-" if None in used else f"> {min(used):.0f}",  # type: ignore[type-var]
            f"> {results['timeout_s']:.0f} (stopped)",
            "-" if None in peak else f"> {min(peak):.0f}",  # type: ignore[type-var]
        ]
    else:
        cells = [_cell(case["cpu_s"], 2), _cell(case["wall_s"], 2), _cell(case["peak_rss_mib"], 1)]
    return f"| {case_text(name, case['records'])} | {label} | {len(case['runs'])} | " + " | ".join(cells) + " |"


def _commit() -> str | None:
    try:
        found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return found.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated (default: {','.join(CASES)})")
    parser.add_argument("--per-file", type=int, default=20_000, help="records per file at most (default: 20000)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a command may run (default: 600)")
    parser.add_argument("--out", type=Path, default=None, help="write bench_cli_scale.json there")
    parser.add_argument("--name", default="bench_cli_scale", help="the JSON file's name, without .json")
    args = parser.parse_args()
    cases = [case.strip() for case in args.cases.split(",") if case.strip()]
    for case in cases:
        kind, _, count = case.partition("-")
        if kind not in ("plot", "summarize") or not count.isdigit():
            parser.error(f"--cases: {case!r} is not plot-N or summarize-N")
    check_templates()
    cli = [sys.executable, "-m", "ddo_hooks"]
    results: dict[str, Any] = {
        "repeats": args.repeats,
        "timeout_s": args.timeout,
        "per_file": args.per_file,
        "commit": _commit(),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "cases": {},
    }
    with tempfile.TemporaryDirectory() as folder:
        argvs: dict[str, list[str]] = {}
        for case in cases:
            kind, _, count = case.partition("-")
            files = [str(p) for p in write_case(Path(folder), kind, int(count), args.per_file)]
            extra = ["-o", str(Path(folder) / f"{case}.png")] if kind == "plot" else []
            argvs[case] = [*cli, kind, *files, *extra]
            results["cases"][case] = {"records": int(count), "files": len(files)}
        raw: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
        for repeat in range(args.repeats):
            for case, argv in argvs.items():  # interleaved: one of each per round
                raw[case].append(run_once(argv, args.timeout))
                print(f"round {repeat + 1}/{args.repeats} {case}: {raw[case][-1]}", file=sys.stderr, flush=True)
    for case, runs in raw.items():
        results["cases"][case].update(
            {key: _figure([r[key] for r in runs]) for key in ("wall_s", "cpu_s", "peak_rss_mib")},
            timed_out=sum(r["timed_out"] for r in runs),
            runs=runs,
        )
    report(results)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
