"""Benchmarks end to end on the CPU: the pinned-memory one (tiny models, the JSON and the printed table),
and bench_cli_scale with a few records.

The GPU figures come from the GPU machine; here the flow, the JSON layout and the analysis are checked.
Arms 1 and 4 run as the benchmark runs them (a subprocess per arm); arms 2 and 3, workflow (a) and model
offload run in-process to keep the test short, and so does arm 4's executed path, through the allocator
seam (``support.fakes.FakeHostAllocator``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.fakes import FakeHostAllocator, MiB
from support.file_modules import load_file

from ddo_hooks._compat import torch as torch_compat
from ddo_hooks.release import allocator as _allocator

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
ARMS = ["1/b/group_lcmu_true", "4/b/group_lcmu_true"]


def _module(name: str) -> ModuleType:
    return load_file(BENCH / f"{name}.py", f"bench_smoke_{name}")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    command = [sys.executable, str(BENCH / "bench_pinned_memory.py"), "--size", "tiny", "--out", str(out)]
    command += ["--weights-dir", str(out / "weights"), "--steps", "2", "--rest-s", "0.05", "--jobs", "2"]
    command += [arg for arm in ARMS for arg in ("--only", arm)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads((out / "bench_pinned_memory.json").read_text())
    return {"doc": doc, "stdout": proc.stdout, "weights": out / "weights"}


def test_every_arm_ran_and_left_its_figures(run: dict[str, Any]) -> None:
    doc = run["doc"]
    assert doc["complete"] is True
    assert doc["command"].startswith("python3 ")
    assert "--size tiny" in doc["command"]
    assert {"size", "steps", "calls", "sample_ms", "rest_s", "budget_s", "workflows", "modes", "arms"} <= set(
        doc["settings"]
    )
    workload = doc["workload"]
    assert set(workload["models"]) == {"transformer", "text_encoder", "text_encoder_2", "vae"}
    assert {"python", "torch", "diffusers", "transformers", "accelerate", "ddo_hooks", "gpus"} <= set(
        workload["versions"]
    )
    assert [f"{r['arm_index']}/{r['workflow']}/{r['mode']}" for r in doc["runs"]] == ARMS
    for run_ in doc["runs"]:
        assert run_["status"] == "ok", run_.get("output_tail")
        assert "analysis_error" not in run_
        assert run_["figures"]["peak_rss"] > 0
        result = run_["result"]
        assert {"spec", "device", "offload", "timings", "encode", "calls", "events", "series", "boundaries"} <= set(
            result
        )
        assert len(result["series"]["t_ms"]) == len(result["series"]["rss_kib"]) > 10
        assert [c["index"] for c in result["calls"]] == [1, 2]
        for call in result["calls"]:
            assert len(call["step_seconds"]) == 2
            assert {"call_seconds", "post_seconds", "owned_pinned_after_post", "live_pinned_after_post"} <= set(call)
        assert (result["encode"] is not None) == (run_["workflow"] == "b")
    boundaries = doc["runs"][1]["result"]["boundaries"]
    assert [b["report"]["setup"]["host_cache_release"]["phase"] for b in boundaries] == [
        "before_transformer",
        "before_vae",
        "after_call",
    ] * 2


def test_summary_ratios_and_targets(run: dict[str, Any]) -> None:
    summary = run["doc"]["summary"]
    assert set(summary) == {"b/group_lcmu_true"}
    figures = summary["b/group_lcmu_true"]
    for arm in ("nothing", "ddo_hooks"):
        f = figures[arm]
        assert f["peak_rss"] > 0
        assert len(f["resting_rss"]) == 2
        assert f["integral_gib_s"] > 0
        assert set(f["ratios"]) == {"peak", "resting", "integral", "step"}
    assert figures["nothing"]["ratios"]["peak"] == 1.0
    assert len(figures["ddo_hooks"]["boundaries"]) == 6
    # On a CPU nothing is pinned: the targets are reported as not evaluated, never as met.
    assert [t["met"] for t in run["doc"]["targets"]] == [None]


def test_the_table_and_the_targets_are_printed(run: dict[str, Any]) -> None:
    out = run["stdout"]
    assert "== b/group_lcmu_true" in out
    assert "4 ddo_hooks" in out
    assert "ddo_hooks boundaries" in out
    assert "== targets (issue 6)" in out
    assert "versions: python" in out
    assert "machine:" in out


def test_executed_boundaries_reach_the_figures_and_the_targets(
    run: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    workload, bench = _module("pinned_workload"), _module("bench_pinned_memory")
    monkeypatch.setattr(workload, "reset_peak_rss", lambda: False)  # leave this process's VmHWM alone
    spec = {**run["doc"]["runs"][1]["result"]["spec"], "weights_dir": str(run["weights"]), "steps": 1}
    with _allocator.use_backend(FakeHostAllocator(cached_bytes=256 * MiB, live_bytes=MiB)):
        result = workload.run_arm(spec)
    result["device"] = "cuda:0"  # as on the GPU machine, so that the targets are evaluated
    figures = bench.figures(result)
    executed = [b for b in figures["boundaries"] if b["status"] == "executed"]
    assert [b["boundary"] for b in executed] == ["before_transformer", "before_vae", "after_call"] * 2
    first = executed[0]
    assert first["allocator_bytes_delta"] == 256 * MiB
    assert first["owned_after"] == MiB
    assert first["beyond_release_seconds"] >= 0
    assert first["live_pinned_after"] == 0
    found = bench.targets({"b/group_lcmu_true": {"ddo_hooks": figures}})
    names = [t["target"] for t in found]
    assert names.count("seconds beyond the release call") == 6
    assert names.count("RSS drop / allocator_bytes_delta") == 1  # only the first release freed >= 64 MiB
    assert all(t["met"] is False for t in found if t["target"] == "owned - live pinned bytes after the boundary")
    bench.print_boundaries(figures["boundaries"])
    assert "released 256 MiB" in capsys.readouterr().out


@pytest.mark.parametrize(("arm", "mode"), [("gc_empty_cache", "model_offload"), ("flush", "group_lcmu_false")])
def test_arms_2_and_3_in_workflow_a(run: dict[str, Any], monkeypatch: pytest.MonkeyPatch, arm: str, mode: str) -> None:
    workload, bench = _module("pinned_workload"), _module("bench_pinned_memory")
    monkeypatch.setattr(workload, "reset_peak_rss", lambda: False)
    spec = {**run["doc"]["runs"][0]["result"]["spec"], "weights_dir": str(run["weights"])}
    result = workload.run_arm({**spec, "arm": arm, "workflow": "a", "mode": mode, "steps": 1})
    assert result["encode"] is None
    assert result["boundaries"] == []
    assert [set(c["post"]) for c in result["calls"]] == [{"gc_seconds"}] * 2  # the CUDA calls are skipped here
    assert all("skipped (no CUDA)" in line for line in result["skipped"])
    assert len(result["skipped"]) == (1 if arm == "gc_empty_cache" else 2)  # empty_cache; or sync and release
    assert (result["offload"]["applied"] is None) == (mode == "model_offload")
    assert bench.figures(result)["mean_step_s"] > 0


def test_the_floor_benchmarks_arms_and_twins_run_on_the_tiny_weights(run: dict[str, Any]) -> None:
    # bench_pinned_floor.py's worker, in-process on the weights saved above (the GPU figures are in
    # benchmarks/results/): which memory each call left, each component's copies, bitwise-equal twins.
    sys.path.insert(0, str(BENCH))
    try:
        floor = load_file(BENCH / "floor_workload.py", "bench_smoke_floor_workload")
    finally:
        sys.path.remove(str(BENCH))
    spec = {"family": "flux", "lcmu": False, "calls": 2, "steps": 1, "height": 64, "width": 64, "seed": 0,
            "rest_s": 0.0, "weights_dir": str(run["weights"]), "max_sequence_length": 16}  # fmt: skip
    arm = floor.run_arm({**spec, "arm": "preset:lowest-peak", "repack": True})
    assert set(arm["calls"][-1]["rest"]) == {"rss", "anon", "file", "shmem", "cgroup", "pinned_owned"}
    # A CPU build has no pinned memory; a CUDA build without a GPU (torch 2.15's wheel here) streams nothing.
    expected = "nothing_to_repack" if torch_compat.is_cuda_build() else "unsupported_build"
    assert arm["repack"]["noop_reason"] == expected
    assert set(arm["copies_end"]) == {"transformer", "text_encoder", "text_encoder_2", "vae"}
    deleted = floor.run_arm({**spec, "arm": "delete", "repack": False})
    # Calling with the embeddings after deleting the encoders computes what the prompt did.
    assert [call["digest"] for call in deleted["calls"]] == [call["digest"] for call in arm["calls"]]
    twins = floor.run_twins({**spec, "preset": "default", "reps": 2})
    plain, repacked = twins["calls"]["plain"], twins["calls"]["repacked"]
    assert [c["digest"] for c in plain] == [c["digest"] for c in repacked]


def test_the_cli_scale_benchmark_runs_small_cases(tmp_path: Path) -> None:
    """bench_cli_scale end to end with a few records: its files are valid reports and its JSON holds the figures."""
    import importlib.util

    cases = "summarize-40" + (",plot-30" if importlib.util.find_spec("matplotlib") else "")
    command = [sys.executable, str(BENCH / "bench_cli_scale.py"), "--repeats", "1", "--cases", cases]
    command += ["--per-file", "20", "--out", str(tmp_path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]  # each command exited 0
    doc = json.loads((tmp_path / "bench_cli_scale.json").read_text())
    summarize = doc["cases"]["summarize-40"]
    assert (summarize["records"], summarize["files"], summarize["timed_out"]) == (40, 2, 0)
    assert {"wall_s", "cpu_s", "peak_rss_mib", "load"} <= set(summarize["runs"][0])
    assert "summarize-40" in proc.stdout


def test_the_signal_trace_script_runs_and_finds_each_boundary_where_it_belongs():
    trace = load_file(ROOT / "scripts" / "trace_signals.py", "trace_signals_smoke")
    pipe, events = trace.trace("sd")
    verdicts = trace.verdict(events)
    assert [v.split(":")[0] for v in verdicts] == ["before_transformer", "before_vae", "after_call"]
    assert all(v.split(": ", 1)[1].startswith("ok") for v in verdicts), verdicts
    assert "unet [D].forward" in trace.render("sd", pipe, events)
