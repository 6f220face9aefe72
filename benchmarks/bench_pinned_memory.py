"""Pinned host memory side by side: what diffusers users have today against ddo_hooks (issue 6).

A Flux-shaped pipeline (1.31 B transformer, 0.62 B T5-style encoder, CLIP, Flux VAE; random bf16 weights drawn
once per run and saved, see ``pinned_workload.py``) makes two calls of a few steps. Workflows: (a) everything
stays loaded; (b) the text encoders are dropped after the first encoding and the embeddings reused. Offload
modes: group offloading with ``use_stream=True`` and ``low_cpu_mem_usage`` both ways, and model CPU offload.
Arms, each in its own process: (1) nothing; (2) ``gc.collect(); torch.cuda.empty_cache()`` after each call;
(3) ``gc.collect(); torch.cuda.synchronize(); torch._C._host_emptyCache()`` after each call (mmgp's flush);
(4) ddo_hooks releasing at all three boundaries. Prints a table with ratios against arm 1 and the issue's
targets (met / not met), and rewrites ``bench_pinned_memory.json`` (every figure, each arm's RSS series) after
every arm, so a timeout still leaves data.

GPU machine: ``python3 benchmarks/bench_pinned_memory.py --out $OUT`` (about 8 minutes, ``--budget-s``).
CPU, to try the flow: ``python benchmarks/bench_pinned_memory.py --size tiny --out /tmp/bench-tiny``.
"""

from __future__ import annotations

import argparse
import fnmatch
import itertools
import json
import operator
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULT = "bench_pinned_memory.json"
ARMS = ("nothing", "gc_empty_cache", "flush", "ddo_hooks")
WORKFLOWS = {"a": "everything stays loaded", "b": "text encoders dropped after the first encoding, embeddings reused"}
MODES = {
    "group_lcmu_true": "group offloading, use_stream=True, low_cpu_mem_usage=True",
    "group_lcmu_false": "group offloading, use_stream=True, low_cpu_mem_usage=False",
    "model_offload": "model CPU offload (pins nothing)",
}
ORDER = [("b", "group_lcmu_true"), ("b", "group_lcmu_false"), ("b", "model_offload")]
ORDER += [("a", "group_lcmu_true"), ("a", "group_lcmu_false"), ("a", "model_offload")]
QUICK_STEPS, QUICK_CONFIGS = 2, 3  # --quick: workflow (b) only, 2 steps per call
ARM_ORDER = (1, 4, 3, 2)  # within a workflow/mode: should the budget run out, ddo_hooks against nothing first
GIB, MIB = 2**30, 2**20


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help=f"directory for {RESULT}")
    p.add_argument("--size", choices=("full", "tiny"), default="full", help="tiny: toy models, runs on a CPU")
    p.add_argument("--quick", action="store_true", help="workflow (b) only, 2 steps per call")
    only = "fnmatch patterns ARM/WORKFLOW/MODE (arm: 1-4 or its name), e.g. '4/b/*'; WORKFLOW/MODE: all arms"
    p.add_argument("--only", action="append", default=[], metavar="ARM/WORKFLOW/MODE", help=only)
    p.add_argument("--steps", type=int, default=None, help="denoising steps per call (default 4)")
    p.add_argument("--calls", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-ms", type=float, default=5.0, help="RSS sampling interval")
    p.add_argument("--rest-s", type=float, default=0.3, help="pause after each call; resting RSS is its median")
    p.add_argument("--budget-s", type=float, default=450.0, help="skip arms that would end after this (0: never)")
    p.add_argument("--jobs", type=int, default=1, help="arms at once (keep 1 for honest timings)")
    p.add_argument("--weights-dir", type=Path, default=None, help="default: a temp dir, reused per size and seed")
    help_ = "group offloading of the text encoders: leaf level (streams, pins) or block level (one unpinned group)"
    p.add_argument("--encoder-offload", choices=("leaf", "block"), default="leaf", help=help_)
    return p.parse_args()


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    patterns = [p if p.count("/") >= 2 else f"*/{p}" for raw in args.only for p in raw.split(",") if p]
    runs = []
    for workflow, mode in ORDER[:QUICK_CONFIGS] if args.quick else ORDER:
        for index in ARM_ORDER:
            arm = ARMS[index - 1]
            keys = (f"{index}/{workflow}/{mode}", f"{arm}/{workflow}/{mode}")
            if not patterns or any(fnmatch.fnmatchcase(k, p) for k in keys for p in patterns):
                runs.append({"arm": arm, "arm_index": index, "workflow": workflow, "mode": mode, "status": "pending"})
    return runs


def run_child(
    argv: list[str], label: str, timeout: float, script: str = "pinned_workload.py"
) -> tuple[int, float, list[str]]:
    """Run ``script`` (a worker beside this file) with ``argv``, echoing its output; return exit code, seconds, tail."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.update(TRANSFORMERS_VERBOSITY="error", DIFFUSERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH", "")]))
    start, tail = time.perf_counter(), []
    command = [sys.executable, str(HERE / script), *argv]
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "encoding": "utf-8", "errors": "replace"}
    proc = subprocess.Popen(command, text=True, env=env, **pipe)

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            line = line.rstrip().encode("ascii", "replace").decode("ascii")  # whatever the terminal's encoding
            print(f"  [{label}] {line}", flush=True)
            tail[:] = [*tail[-39:], line]

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
        tail.append(f"killed after {timeout:.0f} s")
    reader.join(timeout=5)
    return rc, time.perf_counter() - start, tail


# -- figures, ratios and targets ------------------------------------------------------------------------


def boundary_figures(entry: dict[str, Any]) -> dict[str, Any]:
    """One boundary of arm 4: the release report's figures next to what the observer saw after it."""
    setup = entry["report"]["setup"]
    if "boundary_refusal" in setup:
        refusal = setup["boundary_refusal"]
        return {"call": entry.get("call"), "boundary": refusal["boundary"], "status": "refused", **refusal}
    rel = setup["host_cache_release"]
    timings, before, after = rel["timings"], rel["host_before"] or {}, rel["host_after"] or {}
    rss = before.get("rss_bytes"), after.get("rss_bytes")
    drop = None if None in rss else rss[0] - rss[1]
    delta = rel["allocator_bytes_delta"]
    return {
        "call": entry.get("call"),
        "boundary": rel["phase"],
        "status": rel["status"],
        "noop_reason": rel["noop_reason"],
        "elapsed_seconds": rel["elapsed_seconds"],
        "timings": timings,
        "beyond_release_seconds": rel["elapsed_seconds"] - (timings["release_seconds"] or 0.0),
        "full_collection": (rel["collection"] or {}).get("full_collection"),
        "survivors": (rel["collection"] or {}).get("survivors"),
        "owned_after": (rel["after"] or {}).get("allocated_bytes"),
        "allocator_bytes_delta": delta,
        "rss_drop": drop,
        "drop_over_delta": drop / delta if drop is not None and delta else None,
        "live_pinned_after": entry.get("live_pinned", {}).get("rounded_bytes"),
        "observe_seconds": entry.get("observe_seconds"),
    }


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """Peak, resting and integral RSS in the work window, step and call times, pinned bytes: one arm."""
    events = {name: t for t, name in result["events"]}
    series = list(zip(result["series"]["t_ms"], (k * 1024 for k in result["series"]["rss_kib"]), strict=True))
    work = [(t, r) for t, r in series if events["work_start"] <= t <= events["work_end"]]
    integral = sum((r0 + r1) / 2 * (t1 - t0) / 1e3 for (t0, r0), (t1, r1) in itertools.pairwise(work))
    calls = result["calls"]
    rests = [(events[f"call{c['index']}_rest"], events[f"call{c['index']}_rested"]) for c in calls]
    rests = [[r for t, r in series if start <= t <= end] for start, end in rests]
    steps = [s for c in calls for s in c["step_seconds"]]
    later = [s for c in calls for s in c["step_seconds"][1:]]
    return {
        "device": result["device"],
        "peak_rss": result["peak_rss_kernel"] or max((r for _, r in work), default=None),
        "peak_rss_sampled": max((r for _, r in work), default=None),
        "resting_rss": [int(statistics.median(r)) if r else None for r in rests],
        "integral_gib_s": integral / GIB,
        "window_seconds": (events["work_end"] - events["work_start"]) / 1e3,
        "sample_interval_ms": (work[-1][0] - work[0][0]) / (len(work) - 1) if len(work) > 1 else None,
        "mean_step_s": statistics.fmean(steps) if steps else None,
        "mean_step_excl_first_s": statistics.fmean(later) if later else None,
        "call_s": [c["call_seconds"] for c in calls],
        "post_s": [c["post_seconds"] for c in calls],
        "owned_pinned_after": [c["owned_pinned_after_post"] for c in calls],
        "live_pinned_after": [c["live_pinned_after_post"]["rounded_bytes"] for c in calls],
        "encoders_pinned": (result["encode"] or {}).get("encoders_live_pinned", {}).get("rounded_bytes"),
        "boundaries": [boundary_figures(b) for b in result["boundaries"]],
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Figures per ``workflow/mode`` and arm, with ratios against arm 1 of the same workflow and mode."""
    summary: dict[str, dict[str, Any]] = {}
    for run in (r for r in runs if r.get("figures")):
        summary.setdefault(f"{run['workflow']}/{run['mode']}", {})[run["arm"]] = dict(run["figures"])
    for arms in summary.values():
        base = arms.get("nothing")
        for fig in arms.values() if base else ():
            resting = [_ratio(a, b) for a, b in zip(fig["resting_rss"], base["resting_rss"], strict=True)]
            fig["ratios"] = {"peak": _ratio(fig["peak_rss"], base["peak_rss"]), "resting": resting}
            fig["ratios"].update(integral=_ratio(fig["integral_gib_s"], base["integral_gib_s"]))
            fig["ratios"].update(step=_ratio(fig["mean_step_s"], base["mean_step_s"]))
    return summary


OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq}


def _target(name: str, where: str, value: Any, op: str, limit: float | None, detail: str = "") -> dict[str, Any]:
    met = None if value is None else OPS[op](value, limit)
    return {"target": name, "where": where, "value": value, "op": op, "limit": limit, "met": met, "detail": detail}


def _boundary_targets(config: str, boundaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for b in (b for b in boundaries if b["status"] == "executed"):
        where, owned, live = f"{config} call {b['call']} {b['boundary']}", b["owned_after"], b["live_pinned_after"]
        gap = None if None in (owned, live) else owned - live
        shown = f"owned {(owned or 0) / MIB:.1f} MiB, live {(live or 0) / MIB:.1f} MiB"
        found.append(_target("owned - live pinned bytes after the boundary", where, gap, "==", 0, shown))
        delta = b["allocator_bytes_delta"] or 0
        if delta >= 64 * MIB:  # below that, RSS noise decides
            shown = f"RSS fell {(b['rss_drop'] or 0) / MIB:.0f} MiB, {delta / MIB:.0f} MiB released"
            found.append(_target("RSS drop / allocator_bytes_delta", where, b["drop_over_delta"], ">=", 0.95, shown))
        parts = [f"{k.removesuffix('_seconds')} {v * 1e3:.1f}" for k, v in b["timings"].items() if v is not None]
        shown = f"ms: elapsed {b['elapsed_seconds'] * 1e3:.1f} = " + " + ".join(parts)
        found.append(_target("seconds beyond the release call", where, b["beyond_release_seconds"], "<=", 0.01, shown))
    return found


def targets(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, evaluated where they apply; ``met`` is None where the run cannot tell."""
    found = []
    for config, arms in summary.items():
        mine = arms.get("ddo_hooks")
        if mine is None:
            continue
        if mine["device"] == "cpu":
            found.append(_target("every target", config, None, "", None, "CPU run: nothing is pinned, not evaluated"))
            continue
        found += _boundary_targets(config, mine["boundaries"])
        ratios = mine.get("ratios")
        if not ratios:
            continue
        found.append(_target("mean step time (4)/(1)", config, ratios["step"], "<=", 1.01))
        if config == "b/group_lcmu_true":
            found.append(_target("peak RSS (4)/(1)", config, ratios["peak"], "<=", 0.85))
            found.append(_target("resting RSS (4)/(1), last call", config, ratios["resting"][-1], "<=", 0.75))
        if config == "b/group_lcmu_false":
            pinned = arms["nothing"]["encoders_pinned"]
            for i, (a, b) in enumerate(zip(arms["nothing"]["resting_rss"], mine["resting_rss"], strict=True), 1):
                lower = None if None in (a, b) else a - b
                shown = f"{(lower or 0) / GIB:.2f} GiB lower; the dropped encoders pinned {(pinned or 0) / GIB:.2f} GiB"
                name = "resting RSS (1) - (4) / the dropped encoders' pinned bytes"
                found.append(_target(name, f"{config} call {i}", _ratio(lower, pinned), ">=", 0.95, shown))
    return found


# -- printing --------------------------------------------------------------------------------------------


def _gib(v: float | None) -> str:
    return "-" if v is None else f"{v / GIB:.2f}"


def _x(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def print_table(summary: dict[str, dict[str, Any]]) -> None:
    heads = ("arm", "peak GiB", "x", "resting GiB", "x", "GiB*s", "x", "step ms", "x", "call s", "post s")
    row = "  {:<17}{:>9}{:>7}{:>12}{:>7}{:>8}{:>7}{:>8}{:>7}{:>11}{:>11}   {}"
    for config, arms in summary.items():
        workflow, mode = config.split("/")
        print(f"\n== {config}: ({workflow}) {WORKFLOWS[workflow]}; {MODES[mode]}")
        print(row.format(*heads, "pinned owned/live GiB after each call"))
        for index, arm in enumerate(ARMS, 1):
            if (f := arms.get(arm)) is None:
                continue
            r = f.get("ratios") or {"resting": [None]}
            step = f"{f['mean_step_s'] * 1e3:.1f}" if f["mean_step_s"] is not None else "-"
            resting = "/".join(map(_gib, f["resting_rss"]))
            calls, posts = ("/".join(f"{v:.2f}" for v in f[k]) for k in ("call_s", "post_s"))
            pinned = zip(f["owned_pinned_after"], f["live_pinned_after"], strict=True)
            cells = (f"{index} {arm}", _gib(f["peak_rss"]), _x(r.get("peak")), resting, _x(r["resting"][-1]))
            cells += (f"{f['integral_gib_s']:.2f}", _x(r.get("integral")), step, _x(r.get("step")), calls, posts)
            print(row.format(*cells, " ".join(f"{_gib(o)}/{_gib(v)}" for o, v in pinned)))
        if "ddo_hooks" in arms:
            print_boundaries(arms["ddo_hooks"]["boundaries"])


def print_boundaries(boundaries: list[dict[str, Any]]) -> None:
    print("  ddo_hooks boundaries, ms (elapsed = gc + sync + snapshots + release; beyond = elapsed - release)")
    for b in boundaries:
        name = f"call {b['call']} {b['boundary']}"
        if b["status"] != "executed":
            print(f"    {name:28} {b['status']}: {b.get('noop_reason') or b.get('detail')}")
            continue
        t = {k.removesuffix("_seconds"): "-" if v is None else f"{v * 1e3:.1f}" for k, v in b["timings"].items()}
        gc = "full" if b["full_collection"] else "young"
        times = f"elapsed {b['elapsed_seconds'] * 1e3:.1f} = gc({gc}) {t['collect']} + sync {t['synchronize']}"
        times += f" + snap {t['snapshot']} + release {t['release']}; beyond {b['beyond_release_seconds'] * 1e3:.1f}"
        owned, live, delta = (b[k] or 0 for k in ("owned_after", "live_pinned_after", "allocator_bytes_delta"))
        memory = f"released {delta / MIB:.0f} MiB, RSS -{(b['rss_drop'] or 0) / MIB:.0f} MiB"
        print(f"    {name:28} {times}; {memory}; owned/live after {owned / MIB:.0f}/{live / MIB:.0f} MiB")


def print_targets(found: list[dict[str, Any]]) -> None:
    print("\n== targets (issue 6)")
    for t in found or [_target("none evaluated", "-", None, "", None, "no arm-4 run finished")]:
        value = f"{t['value']:.4g}" if isinstance(t["value"], float) else t["value"]
        state = {True: "met    ", False: "NOT MET", None: "n/a    "}[t["met"]]
        limit = "" if t["limit"] is None else f": {value} (target {t['op']} {t['limit']})"
        print(f"  {state} {t['target']} [{t['where']}]{limit} {t['detail']}")


# -- the run ---------------------------------------------------------------------------------------------


class Bench:
    """Runs the setup, then every planned arm in its own process; rewrites the JSON after each."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.t0, self.lock, self.durations = args, time.perf_counter(), threading.Lock(), []
        self.steps = args.steps or (QUICK_STEPS if args.quick else 4)
        self.weights = args.weights_dir or Path(tempfile.gettempdir()) / f"ddo-bench-weights-{args.size}-{args.seed}"
        settings = {k: v for k, v in vars(args).items() if k not in ("out", "weights_dir")}
        settings.update(steps=self.steps, weights_dir=str(self.weights), workflows=WORKFLOWS, modes=MODES)
        self.doc: dict[str, Any] = {
            "benchmark": "bench_pinned_memory",
            "format": 1,
            "command": shlex.join(["python3", *sys.argv]),
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "complete": False,
            "settings": {**settings, "arms": dict(enumerate(ARMS, 1))},
            "workload": None,
            "runs": plan(args),
        }

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def save(self) -> None:
        with self.lock:
            self.doc["elapsed_seconds"] = self.elapsed()
            try:
                self.doc["summary"] = summarize(self.doc["runs"])
                self.doc["targets"] = targets(self.doc["summary"])
            except Exception as e:  # never lose the raw figures to an analysis bug
                self.doc["analysis_error"] = f"{type(e).__name__}: {e}"
            tmp = self.args.out / f".{RESULT}.tmp"
            tmp.write_text(json.dumps(self.doc, separators=(",", ":")))
            tmp.replace(self.args.out / RESULT)

    def setup(self) -> None:
        print(f"== setup: {self.args.size} weights, seed {self.args.seed}, under {self.weights}", flush=True)
        result = self.args.out / ".setup.json"
        argv = ["setup", "--dir", str(self.weights), "--size", self.args.size, "--seed", str(self.args.seed)]
        rc, wall, tail = run_child([*argv, "--result", str(result)], "setup", timeout=420)
        if rc != 0:
            raise SystemExit(f"setup failed (exit {rc}):\n" + "\n".join(tail))
        self.doc["workload"] = {**json.loads(result.read_text()), "wall_seconds": wall}
        result.unlink()
        print(f"== setup took {wall:.1f} s", flush=True)
        self.save()

    def run_one(self, run: dict[str, Any]) -> None:
        label = f"{run['arm_index']}/{run['workflow']}/{run['mode']}"
        left = self.args.budget_s - self.elapsed()
        with self.lock:
            guess = 1.1 * max(self.durations, default=0.0)
        if self.args.budget_s and left < guess:
            run.update(status="skipped", reason=f"budget: {left:.0f} s left, an arm takes about {guess:.0f} s")
            print(f"== {label}: skipped ({run['reason']})", flush=True)
            return self.save()
        spec = {k: run[k] for k in ("arm", "workflow", "mode")} | {"weights_dir": str(self.weights)}
        spec.update(
            {k: getattr(self.args, k) for k in ("size", "calls", "seed", "sample_ms", "rest_s", "encoder_offload")}
        )
        spec["steps"] = self.steps
        result = self.args.out / f".arm-{label.replace('/', '-')}.json"
        print(f"== {label} ({run['arm']}) at {self.elapsed():.0f} s", flush=True)
        timeout = max(60.0, left + 30.0) if self.args.budget_s else 1800.0
        rc, wall, tail = run_child(["arm", "--spec", json.dumps(spec), "--result", str(result)], label, timeout)
        run["wall_seconds"] = wall
        if rc == 0 and result.is_file():
            run.update(status="ok", result=json.loads(result.read_text()))
            result.unlink()
            try:  # the raw result is kept whatever happens here
                run["figures"] = f = figures(run["result"])
            except Exception as e:
                run["analysis_error"] = f"{type(e).__name__}: {e}"
                print(f"== {label}: ran, but its figures could not be computed: {run['analysis_error']}", flush=True)
            else:
                rest = "/".join(map(_gib, f["resting_rss"]))
                line = f"peak {_gib(f['peak_rss'])} GiB, resting {rest} GiB, {f['integral_gib_s']:.1f} GiB*s"
                line += f", step {(f['mean_step_s'] or 0) * 1e3:.1f} ms; process {wall:.1f} s"
                print(f"== {label}: {line}", flush=True)
        else:
            run.update(status="error", reason=f"exit {rc}", output_tail=tail)
            print(f"== {label}: FAILED (exit {rc})", flush=True)
        with self.lock:
            self.durations.append(wall)
        return self.save()

    def run(self) -> None:
        self.args.out.mkdir(parents=True, exist_ok=True)
        print(f"== {len(self.doc['runs'])} arms planned; JSON: {self.args.out / RESULT}", flush=True)
        self.setup()
        with ThreadPoolExecutor(max_workers=max(1, self.args.jobs)) as pool:
            list(pool.map(self.run_one, self.doc["runs"]))
        self.doc.update(complete=True, finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        self.save()
        self.report()

    def report(self) -> None:
        workload, settings = self.doc["workload"], self.doc["settings"]
        v = workload["versions"]
        print(f"\n== bench_pinned_memory: {self.doc['command']}")
        gpus = ", ".join(v["gpus"]) or "no GPU (offloading, pinning and releases need CUDA: skipped)"
        print(f"  machine: {gpus}; {v['cpu_count']} CPUs, {v['ram_bytes'] / GIB:.0f} GiB RAM; {v['platform']}")
        libs = ", ".join(f"{k} {v[k]}" for k in ("python", "torch", "diffusers", "transformers", "accelerate"))
        print(f"  versions: {libs}, ddo_hooks {v['ddo_hooks']}")
        models = ", ".join(f"{k} {m['parameters']:,}" for k, m in workload["models"].items())
        print(f"  workload ({settings['size']}, bf16 parameters): {models}")
        print(f"  {settings['calls']} calls x {self.steps} steps; x: ratio to arm 1; resting x: the last call")
        print_table(self.doc.get("summary", {}))
        print_targets(self.doc.get("targets", []))
        if "analysis_error" in self.doc:
            print(f"  the analysis failed ({self.doc['analysis_error']}): the raw figures are in the JSON")
        for r in (r for r in self.doc["runs"] if r["status"] != "ok"):
            print(f"  {r['status']}: {r['arm_index']}/{r['workflow']}/{r['mode']}: {r.get('reason')}")
        print(f"\n== done in {self.elapsed():.0f} s; JSON: {self.args.out / RESULT}", flush=True)


def main() -> None:
    Bench(parse_args()).run()


if __name__ == "__main__":
    main()
