"""bench_box on the CPU: it refuses to print figures where it cannot box a process, and its bisection and
verdicts decide as the docs say. The boxes themselves are measured on the GPU machine (cgroup v2, root)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.file_modules import load_file

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def box() -> Any:
    return load_file(BENCH / "bench_box.py", "bench_box_under_test", beside=True)


def test_without_cgroup_v2_memory_it_says_so_and_prints_no_figure(box, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(box, "CGROUP", tmp_path)  # no cgroup.controllers: not a cgroup v2 hierarchy
    assert box.main(["--out", str(tmp_path / "out"), "--size", "tiny"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "is not a cgroup v2 hierarchy with the memory controller; the box cannot be measured here" in err
    assert not (tmp_path / "out").exists()


def test_a_hierarchy_without_the_memory_controller_is_refused(box, tmp_path, monkeypatch):
    (tmp_path / "cgroup.controllers").write_text("cpu io pids\n")
    monkeypatch.setattr(box, "CGROUP", tmp_path)
    assert "memory controller" in box.cgroup_problem()


def trial(box_gib: float | None, seconds: list[float], digests: list[str], **events: int) -> dict[str, Any]:
    steps = [
        {"event": "call", "index": i, "seconds": s, "digest": d}
        for i, (s, d) in enumerate(zip(seconds, digests, strict=True))
    ]
    return {"box_gib": box_gib, "exit": 0, "events": events, "steps": steps, "memory_peak": None, "seconds": 30.0}


SPEC = {"arm": "nothing", "calls": 5}
REFERENCE = ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize(
    ("made", "why"),
    [
        (trial(6, [4, 2, 2, 2, 2], REFERENCE), None),
        (trial(6, [4, 2.3, 2.3, 2.3, 2], REFERENCE), "steady call 2.30 s > 1.10 x 2.00 s (thrashing)"),
        (trial(6, [4, 2, 2, 2, 2], ["a", "b", "x", "d", "e"]), "outputs differ from nothing's"),
        (trial(6, [4, 2], REFERENCE[:2], oom_kill=1), "OOM-killed after 2 call(s)"),
        (trial(6, [4, 2, 2], REFERENCE[:3]), "exit 0 after 3 call(s)"),
    ],
)
def test_a_box_fits_only_with_every_call_equal_and_at_speed(box, made, why):
    assert box.verdict(SPEC, made, REFERENCE, 2.0, 1.10) == why


def test_diffusers_mm_fits_with_its_one_call(box):
    assert box.verdict({"arm": "diffusers-mm", "calls": 5}, trial(6, [4], ["a"]), REFERENCE, None, 1.10) is None


def test_the_bisection_finds_the_smallest_box_to_the_step_and_says_what_failed(box):
    tried = []

    def fits(gib: float) -> bool:
        tried.append(gib)
        return gib >= 5.75

    first = {
        "memory_peak": int(7.4 * box.GIB),
        "steps": [{"event": "call", "memory": {}, "cgroup": {"anon": box.GIB, "shmem": 0}}],
    }
    found, note = box.bisect(first, fits, 0.25, lambda: True)
    assert found == 5.75
    assert note == "fits at 5.75 GiB; 5.5 failed its trial"
    assert tried[0] == 7.75  # the unboxed memory.peak, rounded up, checked first
    assert all(t >= 1.0 for t in tried)  # never below what it holds at rest (anon + shmem)


def test_a_bracket_whose_lower_end_is_never_tried_says_so(box):
    first = {"memory_peak": box.GIB, "steps": [{"event": "call", "memory": {}, "cgroup": {"anon": 0, "shmem": 0}}]}
    found, note = box.bisect(first, lambda gib: True, 0.25, lambda: True, (4.0, 5.0))
    assert found == 4.25
    assert note == "fits at 4.25 GiB; 4 was not tried: what it holds at rest, or the bracket's lower end"


def test_the_worker_runs_an_arm_and_leaves_a_line_per_step(tmp_path):
    weights = tmp_path / "flux-tiny"
    setup = [sys.executable, "pinned_workload.py", "setup", "--dir", str(weights), "--size", "tiny"]
    subprocess.run([*setup, "--result", str(tmp_path / "s.json")], cwd=BENCH, check=True, capture_output=True)
    spec = {"family": "flux", "steps": 2, "height": 64, "width": 64, "seed": 0, "weights_dir": str(weights),
            "max_sequence_length": 16, "lcmu": True, "arm": "preset:lowest-peak+register+evict",
            "calls": 2}  # fmt: skip
    progress = tmp_path / "p.jsonl"
    command = [sys.executable, "box_workload.py", "arm", "--spec", json.dumps(spec), "--progress", str(progress)]
    proc = subprocess.run(command, cwd=BENCH, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    steps = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [s["event"] for s in steps] == ["start", "ready", "from_files", "call", "call", "reports", "end"]
    calls = [s for s in steps if s["event"] == "call"]
    assert all(c["memory"]["rss"] > 0 and len(c["digest"]) == 16 for c in calls)
    # the seconds each boundary ran in each call: the hooks' whole time at quiet points
    assert [sorted(c["boundaries"]) for c in calls] == [["after_call", "before_transformer", "before_vae"]] * 2
    assert all(0 < s < max(c["seconds"] for c in calls) for c in calls for s in c["boundaries"].values())
    # when the call reached its denoiser and its decoder, and the page faults it took
    assert all(0 < c["phases"]["denoise"] < c["phases"]["decode"] < c["seconds"] for c in calls)
    assert all(len(c["faults"]) == 2 and min(c["faults"]) >= 0 for c in calls)
    done = steps[-2]["done"]  # each call's release_done_components, with what left the cgroup's charge (if read)
    assert len(done) == 2
    assert all("cgroup_released_bytes" in d for d in done)


def test_a_setup_that_raises_is_recorded_and_ends_the_arm(tmp_path):
    spec = {"family": "flux", "steps": 2, "height": 64, "width": 64, "seed": 0, "lcmu": False,
            "weights_dir": str(tmp_path / "missing"), "arm": "ddo-auto", "calls": 2}  # fmt: skip
    progress = tmp_path / "p.jsonl"
    command = [sys.executable, "box_workload.py", "arm", "--spec", json.dumps(spec), "--progress", str(progress)]
    proc = subprocess.run(command, cwd=BENCH, capture_output=True, text=True, timeout=300, check=False)
    steps = [json.loads(line) for line in progress.read_text().splitlines()]
    assert (proc.returncode, [s["event"] for s in steps]) == (1, ["start", "error"])
    assert steps[1]["stage"] == "setup"
    # without DDO: ModuleNotFoundError; with it, diffusers refuses the missing folder (ValueError)
    assert steps[1]["error"].split(":")[0] in ("ModuleNotFoundError", "OSError", "EnvironmentError", "ValueError")


def test_an_arm_may_name_processes_that_share_one_cgroup(box):
    assert box.parse_arm("true/preset:default+register*2") == (True, "preset:default+register", 2)
    assert box.parse_arm("false/nothing") == (False, "nothing", 1)
    assert box.label_of(True, "preset:default+register", 2) == "true/preset:default+register*2"
    for bad in ("false/nothing*", "false/nothing*0", "false/nothing*two", "maybe/nothing"):
        with pytest.raises(SystemExit, match="is not MODE/ARM or MODE/ARM\\*N"):
            box.parse_arm(bad)


def test_processes_sharing_a_box_fit_only_when_each_made_every_call_equal(box):
    made = trial(6, [4, 2, 2, 2, 2], REFERENCE)
    assert box.verdict(SPEC, {**made, "peers": [made["steps"]]}, REFERENCE, 2.0, 1.10) is None
    short = {**made, "peers": [made["steps"][:3]]}
    why = box.verdict(SPEC, short, REFERENCE, 2.0, 1.10)
    assert why == "a peer process's calls did not complete with the same outputs"


def test_the_flux_dev_size_has_flux_1_devs_parameter_counts_without_a_byte_of_weights():
    workload = load_file(BENCH / "pinned_workload.py", "pinned_workload_under_test", beside=True)
    models = workload.meta_models("flux-dev")
    counts = {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()}
    # the published models' counts: FLUX.1-dev's transformer, T5 v1.1 XXL's encoder, CLIP-L's text model, the VAE
    assert counts == {
        "transformer": 11_901_408_320,
        "text_encoder": 123_060_480,
        "text_encoder_2": 4_762_310_656,
        "vae": 83_819_683,
    }
    assert all(p.is_meta for model in models.values() for p in model.parameters())
    gib = sum(p.numel() * 2 for model in models.values() for p in model.parameters()) / 2**30  # bf16
    readme = " ".join((BENCH.parent / "README.md").read_text(encoding="utf-8").split())
    assert f"At FLUX.1-dev's own shapes ({gib:.2f} GiB in bf16;" in readme  # the counts of the weights the box ran on


def test_a_resumed_run_keeps_the_earlier_arms_and_runs_only_what_is_missing(box, tmp_path, monkeypatch):
    ran: list[tuple[str, float | None]] = []

    def fake_trial(spec, box_gib, out, label, timeout_s, drop=True):
        ran.append((f"{str(spec['lcmu']).lower()}/{spec['arm']}", box_gib))
        return trial(box_gib, [4, 2, 2], ["a", "b", "c"])

    monkeypatch.setattr(box, "trial", fake_trial)
    monkeypatch.setattr(box.floor_bench, "setup", lambda args, out: (out / "setup-flux.json").write_text("{}"))
    first = ["--size", "tiny", "--calls", "3", "--reps", "1", "--no-bisect"]
    box.run(box.parse_args([*first, "--out", str(tmp_path / "a"), "--arms", "false/nothing"]))
    assert ran == [("false/nothing", None)]

    ran.clear()
    earlier = str(tmp_path / "a" / box.RESULT)
    register = "true/preset:default+register"
    arms = ["--arms", f"false/nothing,{register}", "--boxes", f"false/nothing=1.5;{register}=1"]
    doc = box.run(box.parse_args([*first[:-1], "--out", str(tmp_path / "b"), "--resume", earlier, *arms]))
    assert ran == [(register, None), ("false/nothing", 1.5), (register, 1)]
    nothing = doc["arms"]["false/nothing"]
    assert len(nothing["unboxed"]) == 1
    assert [t["box_gib"] for t in nothing["trials"]] == [1.5]
    assert doc["commands"] == [json.loads(Path(earlier).read_text())["command"], doc["command"]]

    with pytest.raises(SystemExit, match="its workload differs in steps; rerun instead"):
        box.run(box.parse_args([*first, "--out", str(tmp_path / "c"), "--resume", earlier, "--steps", "4"]))


@pytest.mark.parametrize("warm", [False, True])
def test_with_warm_reps_only_each_arms_first_trial_drops_the_page_cache(box, tmp_path, monkeypatch, warm):
    dropped: list[tuple[str, bool]] = []

    def fake_trial(spec, box_gib, out, label, timeout_s, drop=True):
        dropped.append((spec["arm"], drop))
        return trial(box_gib, [4, 2, 2], ["a", "b", "c"])

    monkeypatch.setattr(box, "trial", fake_trial)
    monkeypatch.setattr(box.floor_bench, "setup", lambda args, out: (out / "setup-flux.json").write_text("{}"))
    argv = ["--size", "tiny", "--calls", "3", "--reps", "3", "--no-bisect", "--arms", "false/nothing,false/ddo-auto"]
    box.run(box.parse_args([*argv, "--out", str(tmp_path)] + (["--warm-reps"] if warm else [])))
    later = not warm
    assert dropped == [("nothing", True), ("ddo-auto", True)] + [("nothing", later), ("ddo-auto", later)] * 2


def test_a_preset_extra_takes_an_action_out_of_every_boundary_and_an_unknown_one_is_refused():
    floor = load_file(BENCH / "floor_workload.py", "floor_workload", beside=True)
    policy = floor.preset_policy("lowest-peak+register+without_malloc_trim")
    actions = {name: [a["name"] for a in b["actions"]] for name, b in policy["boundaries"].items()}
    assert actions == {
        "before_transformer": ["release_done_components", "host_cache_release"],
        "before_vae": ["host_cache_release"],
        "after_call": ["host_cache_release"],
    }
    assert policy["pinned_copies"]["from_files"] == "register"
    # a boundary left with no action is disabled, as a policy requires (timing-8's arm raised before this)
    from ddo_hooks import HookPolicy

    policy = floor.preset_policy("lowest-peak+without_host_cache_release+without_malloc_trim")
    enabled = {name: (b["enabled"], [a["name"] for a in b["actions"]]) for name, b in policy["boundaries"].items()}
    assert enabled == {
        "before_transformer": (True, ["release_done_components"]),
        "before_vae": (False, []),
        "after_call": (False, []),
    }
    assert HookPolicy.from_mapping(policy).enabled
    with pytest.raises(SystemExit, match="'sideways' in 'default\\+sideways': stable, evict, register, stage, "):
        floor.preset_policy("default+sideways")


def test_an_arm_may_name_its_runtime_and_an_unknown_one_is_refused(box):
    assert box.parse_arm("true/preset:default+register+encoders@block-rs") == (
        True, "preset:default+register+encoders@block-rs", 1,
    )  # fmt: skip
    spec = box.arm_spec({"family": "flux"}, True, "preset:default+register+encoders@block-rs", 1, 4)
    assert (spec["arm"], spec["runtime"], spec["calls"]) == ("preset:default+register+encoders", "block-rs", 4)
    assert box.arm_spec({}, False, "nothing", 1, 4)["runtime"] == "leaf"
    with pytest.raises(SystemExit, match=r"'false/nothing@sideways': no runtime 'sideways' \(one of leaf, leaf-rs, "):
        box.parse_arm("false/nothing@sideways")


@pytest.mark.parametrize(
    ("arm", "runtime", "lcmu"),
    [("nothing", "block-rs", False), ("preset:default+register+encoders", "block-rs", True)],
)
def test_the_worker_offloads_as_the_runtime_says(tmp_path, arm, runtime, lcmu):
    # on a CPU there are no streams: the same calls, block level, with the policy's pinning a no-op
    weights = tmp_path / "flux-tiny"
    setup = [sys.executable, "pinned_workload.py", "setup", "--dir", str(weights), "--size", "tiny"]
    subprocess.run([*setup, "--result", str(tmp_path / "s.json")], cwd=BENCH, check=True, capture_output=True)
    spec = {"family": "flux", "steps": 2, "height": 64, "width": 64, "seed": 0, "weights_dir": str(weights),
            "max_sequence_length": 16, "lcmu": lcmu, "arm": arm, "runtime": runtime, "calls": 2}  # fmt: skip
    progress = tmp_path / "p.jsonl"
    command = [sys.executable, "box_workload.py", "arm", "--spec", json.dumps(spec), "--progress", str(progress)]
    proc = subprocess.run(command, cwd=BENCH, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    steps = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [s["event"] for s in steps if s["event"] == "call"] == ["call", "call"]
