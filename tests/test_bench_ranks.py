"""bench_ranks on the CPU: two ranks under torchrun, gloo, each on the CPU, run end to end with the tiny pipeline;
it refuses where it cannot measure, interleaves and resumes its trials, and compares two ranks with one as issue
53's targets say. The cgroup's memory.peak is read only as root with cgroup v2; the GPUs, on the two-GPU machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.file_modules import load_file

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
GIB = 2**30


@pytest.fixture(scope="module")
def ranks() -> Any:
    return load_file(BENCH / "bench_ranks.py", "bench_ranks_under_test", beside=True)


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("weights")  # drawn once by the first run, reused by the next (its manifest)


def test_without_cgroup_v2_it_says_so_and_prints_no_figure(ranks, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ranks.box, "CGROUP", tmp_path)  # no cgroup.controllers: not a cgroup v2 hierarchy
    assert ranks.main(["--out", str(tmp_path / "out"), "--size", "tiny"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "is not a cgroup v2 hierarchy with the memory controller; memory.peak cannot be measured here" in err
    assert "(--without-cgroup runs the ranks without it)" in err
    assert not (tmp_path / "out").exists()


def test_each_rank_needs_a_gpu_of_its_own_and_a_cpu_runs_only_the_tiny_size(ranks):
    assert ranks.device_problem(True, 1, "full") == "two ranks, each on its own GPU, need two GPUs; this machine has 1"
    assert ranks.device_problem(True, 2, "full") is None
    assert ranks.device_problem(False, 0, "full") == "without CUDA only --size tiny runs (on the CPU), not --size full"
    assert ranks.device_problem(False, 0, "tiny") is None


@pytest.mark.parametrize(
    ("arm", "why"),
    [
        ("true/preset:smallest-box*2", r"'true/preset:smallest-box\*2': the rank counts are this script's"),
        ("false/ddo-auto", r"'false/ddo-auto': DDO's own arms run on cuda:0 only, not on each rank's GPU"),
    ],
)
def test_an_arm_that_cannot_run_as_ranks_is_refused(ranks, arm, why):
    args = ranks.parse_args(["--out", "x", "--arms", f"false/nothing,{arm}"])
    with pytest.raises(SystemExit, match=why):
        ranks.arm_specs(args, {})
    assert list(ranks.arm_specs(ranks.parse_args(["--out", "x"]), {})) == ["true/preset:smallest-box", "false/nothing"]


def rank_steps(rank: int, seconds: list[float], digests: list[str]) -> list[dict[str, Any]]:
    made = [{"event": "call", "index": i, "seconds": s, "digest": d, "gpu": {"max_allocated": GIB}}
            for i, (s, d) in enumerate(zip(seconds, digests, strict=True))]  # fmt: skip
    return [{"event": "start", "rank": rank}, *made, {"event": "end", "contexts": [rank == 0, rank == 1]}]


def trial(peak_gib: float | None, *ranks_seconds: list[float], digests: tuple[str, ...] = ("a", "b", "c")) -> Any:
    steps = [rank_steps(r, s, list(digests[: len(s)])) for r, s in enumerate(ranks_seconds)]
    peak = None if peak_gib is None else int(peak_gib * GIB)
    return {"ranks": len(steps), "exit": 0, "memory_peak": peak, "events": {}, "log": "x.log", "steps": steps}


def test_two_ranks_are_set_beside_one_as_the_targets_say(ranks):
    one = [trial(10.0, [9, 2.0, 2.0]), trial(10.4, [9, 2.2, 2.2]), trial(10.2, [9, 2.1, 2.1])]
    two = [trial(11.0, [9, 2.1, 2.1], [9, 2.1, 2.1]), trial(11.2, [9, 2.0, 2.0], [9, 2.5, 2.5]),
           trial(11.1, [9, 2.2, 2.2], [9, 2.4, 2.4])]  # fmt: skip
    summary = ranks.summarize({"arms": {"true/preset:smallest-box": {"1": one, "2": two}}}, 3)
    arm = summary["arms"]["true/preset:smallest-box"]
    assert arm["1"]["memory_peak"] == {"median": int(10.2 * GIB), "min": 10 * GIB, "max": int(10.4 * GIB), "n": 3}
    assert [s["median"] for s in arm["2"]["steady"]] == [2.1, 2.4]
    assert arm["2"]["context_elsewhere"] == [False, False]
    c = arm["two_to_one"]
    assert c["memory_peak_ratio"] == pytest.approx(11.1 / 10.2, rel=1e-6)
    assert c["memory_peak_met"] is True
    assert c["steady_within_one_rank"] == [True, False]  # rank 1's median 2.4 is past one rank's 2.0-2.2
    assert c["outputs_equal"] is True
    assert summary["outputs_equal_across_arms"] is True

    bigger = [trial(12.0, [9, 2, 2], [9, 2, 2])] * 3
    assert ranks.compare(arm["1"], ranks.rows(bigger, 2, 3))["memory_peak_met"] is False  # 12.0 / 10.2 > 1.15


def test_a_failed_trial_is_listed_not_counted_and_differing_outputs_are_told(ranks):
    failed = {**trial(30.0, [9, 2, 2], [9, 2]), "exit": 1}  # rank 1 made two calls of three, the launcher failed
    other = trial(11.0, [9, 2, 2], [9, 2, 2], digests=("a", "b", "X"))
    row = ranks.rows([failed, other], 2, 3)
    assert (row["trials"], row["complete"], row["failed"]) == (2, 1, [{"exit": 1, "log": "x.log", "events": {}}])
    assert row["memory_peak"]["max"] == 11 * GIB
    alone = ranks.rows([trial(10.0, [9, 2, 2])], 1, 3)
    assert ranks.compare(alone, row)["outputs_equal"] is False
    assert ranks.compare(alone, ranks.rows([failed], 2, 3))["outputs_equal"] is None  # nothing to compare with


def test_a_rank_with_a_context_on_the_other_gpu_is_told(ranks):
    made = trial(10.0, [9, 2, 2], [9, 2, 2])
    made["steps"][1][-1]["contexts"] = [True, True]
    assert ranks.rows([made], 2, 3)["context_elsewhere"] == [False, True]


def test_trials_interleave_and_a_resumed_run_runs_only_what_is_missing(ranks, tmp_path, monkeypatch):
    ran: list[tuple[str, int]] = []

    def fake_session(spec, nproc, out, label, args):
        ran.append((spec["arm"], nproc))
        return trial(None, *[[9, 2, 2]] * nproc)

    monkeypatch.setattr(ranks, "session", fake_session)
    monkeypatch.setattr(ranks.floor_bench, "setup", lambda args, out: (out / "setup-flux.json").write_text("{}"))
    where = {"device": "cpu", "gpus": 0, "threads": 1, "cgroup": "none"}
    argv = ["--size", "tiny", "--calls", "3", "--out", str(tmp_path / "a")]
    doc = ranks.run(ranks.parse_args([*argv, "--reps", "2"]), where)
    assert ran == [("preset:smallest-box", 1), ("preset:smallest-box", 2), ("nothing", 1), ("nothing", 2)] * 2
    assert doc["complete"] is True

    ran.clear()
    earlier = str(tmp_path / "a" / ranks.RESULT)
    argv[-1] = str(tmp_path / "b")
    doc = ranks.run(ranks.parse_args([*argv, "--reps", "3", "--resume", earlier]), where)
    assert ran == [("preset:smallest-box", 1), ("preset:smallest-box", 2), ("nothing", 1), ("nothing", 2)]
    assert [len(doc["arms"]["false/nothing"][n]) for n in ("1", "2")] == [3, 3]
    assert doc["commands"] == [json.loads(Path(earlier).read_text())["command"], doc["command"]]
    with pytest.raises(SystemExit, match="its workload differs in steps; rerun instead"):
        ranks.run(ranks.parse_args([*argv, "--resume", earlier, "--steps", "4"]), where)


def run_tiny(ranks: Any, out: Path, weights: Path, *extra: str) -> dict[str, Any]:
    # --cpu: the ranks stay on the CPU where the CPU suite runs on a GPU machine (gpu_session.sh cpu-suite)
    argv = ["--out", str(out), "--size", "tiny", "--cpu", "--calls", "3", "--steps", "2", "--reps", "1",
            "--threads", "1", "--weights-dir", str(weights), *extra]  # fmt: skip
    assert ranks.main(argv) == 0
    return json.loads((out / ranks.RESULT).read_text())


def test_two_ranks_run_end_to_end_on_the_cpu_and_make_one_rank_s_outputs(ranks, tmp_path, weights, capsys):
    doc = run_tiny(ranks, tmp_path, weights, "--without-cgroup")
    printed = capsys.readouterr().out
    assert list(doc["arms"]) == ["true/preset:smallest-box", "false/nothing"]
    for arm in doc["arms"].values():
        for n in ("1", "2"):
            (made,) = arm[n]
            assert (made["exit"], made["ranks"], made["memory_peak"], made["cache_dropped"]) == (0, int(n), None, False)
            starts = [steps[0] for steps in made["steps"]]
            expected = [(rank, int(n), "cpu") for rank in range(int(n))]
            assert [(s["rank"], s["world_size"], s["device"]) for s in starts] == expected
            assert len({s["pid"] for s in starts}) == int(n)  # a process per rank
            assert [len(ranks.calls(steps)) for steps in made["steps"]] == [3] * int(n)
    pinned = doc["arms"]["true/preset:smallest-box"]["2"][0]["steps"]
    assert [[e["statuses"] for e in steps if e["event"] == "reports"] for steps in pinned] == [[["noop"] * 9]] * 2
    summary = doc["summary"]
    for label, arm in summary["arms"].items():
        assert arm["two_to_one"]["outputs_equal"] is True, label  # each rank's three outputs are one rank's
        assert arm["two_to_one"]["memory_peak_ratio"] is None  # no cgroup: not measured, not guessed
        assert [s["n"] for s in arm["2"]["steady"]] == [1, 1]
    assert summary["outputs_equal_across_arms"] is True  # smallest-box's outputs are nothing's
    assert "cgroup: none (--without-cgroup" in printed
    table = printed[printed.index("ranks on cpu (0 GPU(s))") :]
    assert table.count(" not measured ") == 2 * 2  # each row's peak
    assert table.count("two ranks against one: memory.peak not measured; steady ") == 2
    assert "every arm's outputs, every rank's: bitwise equal" in printed


def test_the_ranks_share_one_cgroup_whose_peak_is_recorded(ranks, tmp_path, weights, capsys):
    problem = ranks.box.cgroup_problem()
    if problem is not None:
        pytest.skip(f"needs root and cgroup v2: {problem}")
    doc = run_tiny(ranks, tmp_path, weights, "--arms", "true/preset:smallest-box")
    for n in ("1", "2"):
        (made,) = doc["arms"]["true/preset:smallest-box"][n]
        assert made["memory_peak"] > 0
        assert made["cache_dropped"] is True
        assert [steps[0]["cgroup"] for steps in made["steps"]] == [made["cgroup"]] * int(n)  # born in the trial's
    assert doc["summary"]["arms"]["true/preset:smallest-box"]["two_to_one"]["memory_peak_ratio"] > 0
    assert "memory.peak not measured" not in capsys.readouterr().out
