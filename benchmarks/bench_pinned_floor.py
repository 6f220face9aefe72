"""Pinned memory at its floor, and which memory each arm wins: plain ``pipe(prompt=...)`` calls side by side.

Two families with random bf16 weights saved once (``pinned_workload.py``'s Flux-shaped pipeline, and an SD
1.5-shaped one from ``floor_workload.py``), offloaded at leaf level with streams and ``record_stream=False``,
in both ``low_cpu_mem_usage`` modes. Arms, each in a fresh process (several at once: memory is per process):
``nothing``; ``delete`` (the user deletes the text encoders after the first call, ``del`` and ``gc``, and calls
with the embeddings); each preset with the repack off; each preset with it on (the default). Each arm makes
``--calls`` plain calls and reads, at rest after each, RSS split into anon / file / shmem, the cgroup's charge
and the pinned bytes the allocator owns. Then, per family, ``twins``: one process, two copies of the pipeline
under the same preset, one repacked, their calls interleaved (ABBA) ``--reps`` times, for the steady-state
call time (whole calls, and each component's forwards within them) and bitwise-equal outputs; ``--arms ""``
runs the twins alone.

GPU machine: ``python3 benchmarks/bench_pinned_floor.py --out $OUT`` (``--jobs 4``; ``--budget-s``).
CPU, to try the flow: ``python benchmarks/bench_pinned_floor.py --size tiny --out /tmp/floor``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULT = "bench_pinned_floor.json"
PRESETS = ("default", "lowest-peak", "lowest-latency")
GIB = 2**30
TIMES = "\u00d7"  # as the docs write a ratio


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help=f"directory for {RESULT}")
    p.add_argument("--size", choices=("full", "tiny"), default="full", help="tiny: toy models, runs on a CPU")
    p.add_argument("--families", default="flux,sd")
    p.add_argument("--modes", default="false,true", help="low_cpu_mem_usage values to run")
    p.add_argument("--arms", default="nothing,delete," + ",".join(f"preset:{p}" for p in PRESETS))
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--resolution", type=int, default=None, help="default: 1024 (flux), 512 (sd); tiny: 64")
    p.add_argument("--reps", type=int, default=6, help="twins: interleaved calls per copy (0: no twins)")
    p.add_argument("--jobs", type=int, default=4, help="arms at once")
    p.add_argument("--budget-s", type=float, default=540.0, help="start no arm after this")
    p.add_argument("--weights-dir", type=Path, default=Path(tempfile.gettempdir()) / "ddo-floor-weights")
    return p.parse_args()


def child(argv: list[str], result: Path, log: Path) -> dict[str, Any] | None:
    """Run a worker; its JSON result, or ``None`` (its output is in ``log``)."""
    with log.open("w") as out:
        proc = subprocess.run([sys.executable, *argv, "--result", str(result)], stdout=out, stderr=subprocess.STDOUT,
                              cwd=HERE, check=False)  # fmt: skip
    if proc.returncode != 0 or not result.is_file():
        print(f"  failed ({proc.returncode}): {log}", flush=True)
        return None
    return json.loads(result.read_text())


def workload_spec(args: argparse.Namespace, family: str) -> dict[str, Any]:
    """What every process of one family shares: its weights, the call's size and steps."""
    size = args.resolution or (64 if args.size == "tiny" else {"flux": 1024, "sd": 512}[family])
    spec = {"family": family, "steps": args.steps, "height": size, "width": size, "seed": 0}
    spec["weights_dir"] = str(args.weights_dir / f"{family}-{args.size}")
    if args.size == "tiny" and family == "flux":
        spec["max_sequence_length"] = 16
    return spec


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    specs = []
    for family in args.families.split(","):
        for mode in args.modes.split(","):
            lcmu = mode == "true"
            for arm in filter(None, args.arms.split(",")):  # --arms "": the twins alone
                for repack in (False, True) if arm.startswith("preset:") and not lcmu else (False,):
                    spec = {**workload_spec(args, family), "lcmu": lcmu, "arm": arm, "repack": repack}
                    spec.update(calls=args.calls, rest_s=2.5 if arm == "preset:lowest-latency" else 0.3)
                    specs.append(spec)
    return specs


def name(spec: dict[str, Any]) -> str:
    repack = "+repack" if spec.get("repack") else ""
    return f"{spec['family']}/lcmu={str(spec['lcmu']).lower()}/{spec['arm'].removeprefix('preset:')}{repack}"


def setup(args: argparse.Namespace, out: Path) -> None:
    for family in args.families.split(","):
        folder = args.weights_dir / f"{family}-{args.size}"
        script = "pinned_workload.py" if family == "flux" else "floor_workload.py"
        argv = [script, "setup", "--dir", str(folder), "--size", args.size]
        found = child(argv, out / f"setup-{family}.json", out / f"setup-{family}.log")
        if found is None:
            raise SystemExit(f"could not set up the {family} weights")
        print(f"{family}: weights {'reused' if found.get('reused') else 'drawn and saved'} in {folder}", flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    setup(args, out)
    doc: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "arms": {}, "twins": {}}

    def one(spec: dict[str, Any]) -> None:
        if args.budget_s and time.perf_counter() - started > args.budget_s:
            print(f"{name(spec)}: skipped (budget)", flush=True)
            return
        label = name(spec).replace("/", "_").replace("=", "-").replace("+", "_")
        argv = ["floor_workload.py", "arm", "--spec", json.dumps(spec)]
        found = child(argv, out / f"{label}.json", out / f"{label}.log")
        if found is not None:
            doc["arms"][name(spec)] = found
            rest = found["calls"][-1]["rest"]
            print(f"{name(spec)}: RSS {rest['rss'] / GIB:.2f} GiB, pinned {(rest['pinned_owned'] or 0) / GIB:.2f} GiB",
                  flush=True)  # fmt: skip

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, plan(args)))
    doc["arms"] = {name(s): doc["arms"][name(s)] for s in plan(args) if name(s) in doc["arms"]}  # the plan's order
    for family in args.families.split(",") if args.reps else ():
        spec = {**workload_spec(args, family), "lcmu": False, "preset": "default", "reps": args.reps}
        found = child(["floor_workload.py", "twins", "--spec", json.dumps(spec)], out / f"twins-{family}.json",
                      out / f"twins-{family}.log")  # fmt: skip
        if found is not None:
            doc["twins"][family] = found
    (out / RESULT).write_text(json.dumps(doc))
    return doc


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def spread(values: list[float], dash: str = "-") -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}{dash}{max(values):.3f})" if values else "-"


def report(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Print the arms side by side and the targets; return the targets."""
    print("\nat rest after the last call (GiB; pinned/tensors: the pinned bytes owned over the copies' bytes)")
    print(f"{'arm':44} {'RSS':>6} {'anon':>6} {'file':>6} {'shmem':>6} {'pinned':>7} {'cgroup':>7} {'÷tensors':>9}")
    targets = []
    for key, arm in doc["arms"].items():
        rest = arm["calls"][-1]["rest"]
        tensors = sum(c["tensor_bytes"] for c in arm["copies_end"].values() if c["pinned"])
        ratio = (rest["pinned_owned"] or 0) / tensors if tensors else None
        cells = [_gib(rest[k]) for k in ("rss", "anon", "file", "shmem", "pinned_owned", "cgroup")]
        print(f"{key:44} {cells[0]:>6} {cells[1]:>6} {cells[2]:>6} {cells[3]:>6} {cells[4]:>7} {cells[5]:>7} "
              f"{'-' if ratio is None else f'{ratio:.3f}':>9}")  # fmt: skip
        if arm["spec"].get("repack") and "repack" in arm and arm["repack"]["status"] != "executed":
            targets.append({"target": f"{key}: nothing repacked ({arm['repack']['noop_reason']})", "value": None,
                            "limit": None, "met": False})  # fmt: skip
        elif arm["spec"].get("repack") and "repack" in arm:
            for c in arm["repack"]["components"]:
                if c["status"] == "repacked":
                    value = c["pinned_bytes_after"] / c["tensor_bytes"]
                    targets.append({"target": f"{key} {c['component']}: slabs / tensors", "value": value,
                                    "limit": 1.02, "met": value <= 1.02})  # fmt: skip
            needed = sum(c["tensor_bytes"] for c in arm["repack"]["components"])
            at_rest = (rest["pinned_owned"] or 0) / needed if needed else None
            targets.append({"target": f"{key}: pinned owned at rest / the copies' bytes", "value": at_rest,
                            "limit": 1.02, "met": at_rest is not None and at_rest <= 1.02})  # fmt: skip
            above = arm.get("repack_peak_above_start")
            largest = max((c["pinned_bytes_before"] for c in arm["repack"]["components"]), default=0)
            targets.append({"target": f"{key}: repack peak above start / largest component's rounded copies",
                            "value": above / largest if above is not None and largest else None, "limit": 1.0,
                            "met": above is not None and above <= largest})  # fmt: skip
    for key, arm in doc["arms"].items():
        if arm["spec"]["lcmu"] and arm["spec"]["arm"] == "nothing":
            largest = max(c["largest_group_bytes"] for c in arm["copies_end"].values())
            cache = arm["calls"][-1]["rest"]["pinned_owned"] or 0
            print(f"{key}: pinned cache at rest {_gib(cache)} GiB, largest group {_gib(largest)} GiB "
                  f"({cache / largest if largest else 0:.2f}x)")  # fmt: skip
    for family, twins in doc["twins"].items():
        plain = [c["seconds"] for c in twins["calls"]["plain"][1:]]  # call 1 warms up
        packed = [c["seconds"] for c in twins["calls"]["repacked"][1:]]
        ratios = [b / a for a, b in zip(plain, packed, strict=True)]
        print(f"\n{family} twins (default preset, lcmu=false), steady calls in s: plain {spread(plain)}, "
              f"repacked {spread(packed)}, ratio per rep {spread(ratios)}")  # fmt: skip
        ratio = statistics.median(packed) / statistics.median(plain) if plain and packed else None
        for component in twins["calls"]["plain"][-1].get("components", {}):
            times = {k: [c["components"][component] for c in twins["calls"][k][1:]] for k in ("plain", "repacked")}
            print(f"{family} twins, {component}'s forwards per call in s: plain {spread(times['plain'])}, "
                  f"repacked {spread(times['repacked'])}")  # fmt: skip
        if "h2d" in twins:
            h2d = twins["h2d"]
            print(f"{family} twins, the denoiser's copies to the GPU in s: plain {spread(h2d['plain'])}, "
                  f"repacked {spread(h2d['repacked'])}")  # fmt: skip
            value = statistics.median(h2d["repacked"]) / statistics.median(h2d["plain"])
            targets.append({"target": f"{family}: denoiser copies to the GPU, repacked / plain (median of "
                            f"{len(h2d['plain'])})", "value": value, "limit": 1.01, "met": value <= 1.01})  # fmt: skip
        targets.append({"target": f"{family}: steady call, repacked / plain (median of {len(ratios)})",
                        "value": ratio, "limit": 1.01, "met": ratio is not None and ratio <= 1.01})  # fmt: skip
        same = [a["digest"] == b["digest"] for a, b in zip(twins["calls"]["plain"], twins["calls"]["repacked"],
                                                            strict=True)]  # fmt: skip
        targets.append({"target": f"{family}: outputs bitwise equal, call after call", "value": sum(same),
                        "limit": len(same), "met": all(same)})  # fmt: skip
    print("\ntargets")
    for t in targets:
        value = "-" if t["value"] is None else f"{t['value']:.4g}"
        print(f"  {'met    ' if t['met'] else 'NOT MET'}  {t['target']}: {value} (limit {t['limit']})")
    return targets


def memory_rows(doc: dict[str, Any], *, lcmu: bool) -> list[str]:
    """The docs' table of which memory each arm of one mode held at rest after its last call: a row per arm."""
    rows = []
    for arm in doc["arms"].values():
        if arm["spec"]["lcmu"] != lcmu:
            continue
        rest = arm["calls"][-1]["rest"]
        cells = [f"{rest[k] / GIB:.2f}" for k in ("rss", "anon", "file", "shmem")]
        cells.append(f"{(rest['pinned_owned'] or 0) / GIB:.2f}")
        label = arm["spec"]["arm"].removeprefix("preset:") + (" + repack" if arm["spec"]["repack"] else "")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return rows


def repack_rows(doc: dict[str, Any], arm: str) -> list[str]:
    """The docs' table of one arm's repack: per component, the copies' bytes and what they owned before and after."""
    rows = []
    for c in doc["arms"][arm]["repack"]["components"]:
        need = c["tensor_bytes"]
        before, after = c["pinned_bytes_before"], c["pinned_bytes_after"]
        owned = [f"{n / GIB:.3f} ({n / need:.3f}{TIMES})" for n in (before, after)]
        rows.append(f"| {c['component']} | {c['tensors']} | {need / GIB:.3f} | {owned[0]} | {owned[1]} "
                    f"| {len(c['slabs'])} | {c['seconds']:.2f} |")  # fmt: skip
    return rows


def twins_row(label: str, twins: dict[str, Any]) -> str:
    """The docs' row of one twins run: calls each, both medians and ranges, the ratio of the medians, the
    median and range of the ratio within each interleaved pair, the equal outputs."""
    plain = [c["seconds"] for c in twins["calls"]["plain"][1:]]  # the first pair warms up
    packed = [c["seconds"] for c in twins["calls"]["repacked"][1:]]
    pairs = zip(twins["calls"]["plain"], twins["calls"]["repacked"], strict=True)
    same = sum(a["digest"] == b["digest"] for a, b in pairs)
    ratio = statistics.median(packed) / statistics.median(plain)
    cells = [
        spread(plain, "\u2013"),
        spread(packed, "\u2013"),
        f"{ratio:.3f}",
        spread([b / a for a, b in zip(plain, packed, strict=True)], "\u2013"),
        f"{same} of {len(twins['calls']['plain'])}",
    ]
    return f"| {label} | {len(plain)} | " + " | ".join(cells) + " |"


def main() -> None:
    args = parse_args()
    doc = run(args)
    doc["targets"] = report(doc)
    (args.out / RESULT).write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
