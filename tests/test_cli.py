"""The `ddo-hooks` command line, every command through a real subprocess.

Each invocation is a fresh interpreter that imports torch and diffusers (about 4 s of CPU), so
the module fixture `runs` starts every invocation listed in `RUNS` at once, a few at a time, and
each test reads the result it names. `{tmp}` in an argument is the folder of the input files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from support.fakes import FakeHostAllocator

from ddo_hooks import HookPolicy, MetricsTracker, PolicyError, attach, release_pytorch_host_cache
from ddo_hooks.cli import main
from ddo_hooks.cli.demo import CPU_RUN, DEMO_POLICY, FROM_FILES_RUN, H200_FIGURES
from ddo_hooks.cli.table import boundary_rows, infer_calls
from ddo_hooks.policy import PRESETS
from ddo_hooks.release.allocator import use_backend
from ddo_hooks.reports.boundary import BoundaryRefusal, BoundaryRefusalReport, BoundaryRefusalSetup
from ddo_hooks.sizes import format_size
from ddo_hooks.testing.tiny_pipelines import build_pipeline

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCHEMAS = ROOT / "ddo_hooks" / "schemas"
BOUNDARIES = ["before_transformer", "before_vae", "after_call"]
CONSOLE_SCRIPT = shutil.which("ddo-hooks", path=os.pathsep.join([str(Path(sys.executable).parent), os.defpath]))
CONSOLE_SCRIPT = CONSOLE_SCRIPT or shutil.which("ddo-hooks")

RUNS: dict[str, tuple[str, ...]] = {
    # the demo (slowest first)
    "demo flux": ("demo", "--device", "cpu", "--report", "{tmp}/flux.jsonl"),
    "demo sd with an example policy": (
        *("demo", "--family", "sd", "--device", "cpu", "--steps", "1", "--calls", "3"),
        *("--policy", "{tmp}/release-all-boundaries.yaml", "--report", "{tmp}/sd.jsonl"),
    ),
    # help and usage
    "help": ("--help",),
    "help demo": ("demo", "--help"),
    "help validate-policy": ("validate-policy", "--help"),
    "help validate-report": ("validate-report", "--help"),
    "help schema": ("schema", "--help"),
    "help summarize": ("summarize", "--help"),
    "help plot": ("plot", "--help"),
    "usage: unknown command": ("clean-cache",),
    "usage: bad device": ("demo", "--device", "tpu"),
    # validate-policy
    "policy valid": ("validate-policy", str(EXAMPLES / "after-call-only.yaml")),
    "policy invalid": ("validate-policy", "{tmp}/misspelt.yaml"),
    "policy missing": ("validate-policy", "{tmp}/no-such.yaml"),
    "policy directory": ("validate-policy", "{tmp}"),
    "policy binary": ("validate-policy", "{tmp}/binary.dat"),
    "policy empty": ("validate-policy", "{tmp}/empty.yaml"),
    # validate-report
    "report jsonl": ("validate-report", "{tmp}/run.jsonl"),
    "report tracker json": ("validate-report", "{tmp}/run.json"),
    "report invalid field": ("validate-report", "{tmp}/bad-status.jsonl"),
    "report invalid json": ("validate-report", "{tmp}/mangled.jsonl"),
    "report empty": ("validate-report", "{tmp}/empty.jsonl"),
    "report binary": ("validate-report", "{tmp}/binary.dat"),
    "report directory": ("validate-report", "{tmp}"),
    # schema and summarize
    "schema policy": ("schema", "policy"),
    "schema report": ("schema", "report"),
    "summarize": ("summarize", "{tmp}/run.jsonl"),
}

USER_ERRORS = {
    # run: what stderr must say (the file, the place, the fix)
    "policy invalid": ["misspelt.yaml:3:3: boundaries.before_vea: unknown key; did you mean 'before_vae'?"],
    "policy missing": ["no-such.yaml: no such policy file", "check the path"],
    "policy directory": ["is a directory, not a policy file"],
    "policy binary": ["binary.dat: looks like a binary file", "UTF-8 YAML"],
    "policy empty": ["empty.yaml: the policy is empty; write at least 'version: 1'"],
    "report invalid field": [
        "bad-status.jsonl:2:",
        "report.setup.host_cache_release.status: 'done' is not one of executed, noop",
    ],
    "report invalid json": ["mangled.jsonl:3:2:", "not JSON"],
    "report empty": ["empty.jsonl: holds only blank lines, no report (a report sink whose first write"],
    "report binary": ["binary.dat: looks like a binary file"],
    "report directory": ["is a directory, not a report file"],
}

USAGE_ERRORS = {
    "usage: unknown command": "'clean-cache' is not a command; the commands: demo, validate-policy, validate-report",
    "usage: bad device": "'tpu' is not a demo device; use 'cpu', 'cuda' or 'cuda:N'",
}


def _executed(phase: str):
    with use_backend(FakeHostAllocator()):
        return release_pytorch_host_cache(enabled=True, phase=phase, device="cuda:0")


def _refused(boundary: str) -> BoundaryRefusalReport:
    refusal = BoundaryRefusal(
        boundary=boundary,
        action="host_cache_release",
        reason="loading",
        detail="a component was loading (pipe.load_lora_weights())",
        requested_by="pipeline",
        call_index=2,
    )
    return BoundaryRefusalReport(setup=BoundaryRefusalSetup(boundary_refusal=refusal))


def _saved_run() -> MetricsTracker:
    """Two calls: the first executes every boundary, the second has a refusal and a no-op."""
    tracker = MetricsTracker()
    for phase in BOUNDARIES:
        tracker.record(_executed(phase), component=f"host_cache_{phase}")
    tracker.record(_refused("before_transformer"), component="host_cache_before_transformer")
    tracker.record(_executed("before_vae"), component="host_cache_before_vae")
    tracker.record(release_pytorch_host_cache(phase="after_call"), component="host_cache_after_call")
    return tracker


def _write_inputs(folder: Path) -> None:
    shutil.copy(EXAMPLES / "release-all-boundaries.yaml", folder)  # its report_sink lands in folder/reports/
    (folder / "misspelt.yaml").write_text("version: 1\nboundaries:\n  before_vea: {}\n", encoding="utf-8")
    (folder / "binary.dat").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (folder / "empty.yaml").write_text("", encoding="utf-8")
    (folder / "empty.jsonl").write_text("\n  \n", encoding="utf-8")
    run = _saved_run()
    (folder / "run.jsonl").write_text(run.to_jsonl(), encoding="utf-8")
    (folder / "run.json").write_text(run.to_json(), encoding="utf-8")
    lines = run.to_jsonl().splitlines()
    record = json.loads(lines[1])
    record["report"]["setup"]["host_cache_release"]["status"] = "done"
    (folder / "bad-status.jsonl").write_text("\n".join([lines[0], json.dumps(record), *lines[2:]]), encoding="utf-8")
    # not a line cut off, which validate-report leaves out with a warning, but one no writer of records makes
    (folder / "mangled.jsonl").write_text("\n".join([*lines[:2], "{" + lines[2], *lines[3:]]), encoding="utf-8")


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, encoding="utf-8", timeout=300)


class Runs:
    """The started invocations; `runs["name"]` waits for one and returns its CompletedProcess."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._pool = ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) + 1)
        self._futures: dict[str, Future[subprocess.CompletedProcess[str]]] = {}
        for name, args in RUNS.items():
            self.start(name, [sys.executable, "-m", "ddo_hooks", *args])
        if CONSOLE_SCRIPT:
            self.start("console --version", [CONSOLE_SCRIPT, "--version"])

    def start(self, name: str, command: list[str]) -> None:
        command = [part.replace("{tmp}", str(self.folder)) for part in command]
        self._futures[name] = self._pool.submit(_run, command, self.folder)

    def __getitem__(self, name: str) -> subprocess.CompletedProcess[str]:
        return self._futures[name].result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("cli")
    _write_inputs(folder)
    started = Runs(folder)
    yield started
    started.close()


def _rows(stdout: str) -> list[tuple[int, str, str]]:
    """(call, boundary, status) of each table row."""
    found = re.findall(r"^(\d+) +(\S+) +(executed|no-op: \S+|refused: \S+) ", stdout, flags=re.MULTILINE)
    return [(int(call), boundary, status) for call, boundary, status in found]


# -- demo -------------------------------------------------------------------------------------


def _flat(text: str) -> str:
    """The text with its line wrapping undone (notes wrap at 100 columns; temporary paths are long)."""
    return " ".join(text.split())


def _releases(saved: MetricsTracker) -> list[tuple[str, object]]:
    """The built-in release's records (on a CPU the demo also records the RSS it observes)."""
    return [(component, report) for component, report in saved.records() if component.startswith("host_cache_")]


def test_demo_prints_one_row_per_boundary_per_call_and_explains_each_noop(runs: Runs):
    result = runs["demo flux"]
    assert result.returncode == 0, result.stderr
    saved = MetricsTracker.from_jsonl((runs.folder / "flux.jsonl").read_text(encoding="utf-8"))
    releases = [report.release for _, report in _releases(saved)]
    assert [(call, boundary) for call, boundary, _ in _rows(result.stdout)] == [
        (call, boundary) for call in (1, 2) for boundary in BOUNDARIES
    ]
    assert re.search(r"^attach +attach/register +", result.stdout, re.M)  # smallest-box's step, before call 1
    assert [status for _, _, status in _rows(result.stdout)] == [
        "executed" if r.status == "executed" else f"no-op: {r.noop_reason}" for r in releases
    ]
    for release in releases:  # the table says why each no-op was one, in the report's own words
        assert release.status == "noop" or torch.cuda.is_available()  # a CPU-only torch has nothing to release
        if release.status == "noop":
            assert f"no-op {release.noop_reason}: {release.detail}" in _flat(result.stdout)
    count = len(saved.records())  # attach's step, 6 releases, and on a CPU the 6 RSS observations of the demo
    assert f"wrote {count} validated reports to {runs.folder / 'flux.jsonl'}" in _flat(result.stdout)
    assert [component for component, _ in _releases(saved)] == [f"host_cache_{b}" for b in BOUNDARIES] * 2


def test_demo_on_a_cpu_shows_the_rss_at_each_boundary_and_what_each_component_holds(runs: Runs):
    result = runs["demo flux"]
    assert result.returncode == 0, result.stderr
    saved = MetricsTracker.from_jsonl((runs.folder / "flux.jsonl").read_text(encoding="utf-8"))
    # the demo's own action ran last at every boundary and recorded the RSS it saw, validated
    assert saved.components() == (
        "pinned_from_files",
        *(f"{prefix}_{b}" for b in BOUNDARIES for prefix in ("host_cache", "ddo_demo.rss")),
    )
    observed = [
        report.setup.boundary_action.data["rss_bytes"]
        for report in saved.reports()
        if report.route == "boundary_action"
    ]
    assert len(observed) == 6
    assert all(isinstance(rss, int) and rss > 0 for rss in observed)
    # a CPU build of torch has no host allocator; a CUDA build on a machine without a GPU never starts CUDA
    table = re.findall(
        r"^(\d+) +(\S+) +no-op: (?:unsupported_build|cuda_not_initialized) +(\S+ \S+) +(\S+(?: \S+)?) +\S+ ms$",
        result.stdout,
        re.M,
    )
    assert [(int(call), boundary) for call, boundary, _, _ in table] == [(c, b) for c in (1, 2) for b in BOUNDARIES]
    assert [rss for _, _, rss, _ in table] == [format_size(rss) for rss in observed]
    assert table[0][3] == "-"  # nothing to compare the first boundary with
    # what each component holds, printed once, before the table
    sizes = re.findall(r"^  (\w+) +(\d+\.\d [KMG]iB)$", result.stdout.split("\n\n", 1)[0], re.M)
    assert [name for name, _ in sizes] == ["vae", "text_encoder", "text_encoder_2", "transformer", "total"]
    assert "text_encoder, text_encoder_2 left the pipeline after call 1" in result.stdout
    # what a CUDA machine would add, and what was measured there, in one sentence (the wheel has no README)
    last = result.stdout.strip().split("\n\n")[-2]
    assert _flat(last) == f"On a CUDA machine the table also shows the pinned bytes; {H200_FIGURES}."
    assert "README" not in result.stdout
    # the first words say what a CPU run shows, and why the pipeline was saved and loaded back
    assert _flat(result.stderr).startswith(_flat(f"{CPU_RUN} {FROM_FILES_RUN}"))
    assert f"policy: the preset {DEMO_POLICY}, " in result.stderr
    assert (_flat(result.stdout) + _flat(result.stderr)).count("on an H200") == 1
    assert max(len(line) for line in result.stdout.splitlines()) <= 100


def test_the_demo_numbers_what_attach_did_as_no_call_and_tells_two_observations_at_a_boundary_apart(tmp_path):
    from ddo_hooks.cli.cells import ATTACH_CALL
    from ddo_hooks.cli.demo import run_demo
    from ddo_hooks.cli.demo_view import format_result
    from ddo_hooks.policy.model import HookPolicy

    for preset, calls in (("smallest-box", [ATTACH_CALL] + [1] * 6), ("lowest-peak", [1] * 10)):
        result = run_demo(
            family="sd",
            policy=HookPolicy.preset(preset),
            device=torch.device("cpu"),
            steps=1,
            calls=1,
            report=tmp_path / f"{preset}.jsonl",
            progress=False,
            log=__import__("io").StringIO(),
        )
        assert result.calls == calls, preset
        text = format_result(result)
        assert "left the pipeline" not in text  # one call: nothing was dropped
        if preset == "smallest-box":
            assert re.search(r"^attach +attach/register +no-op: ", text, flags=re.MULTILINE)
        else:  # release_done_components and the release both observe before the transformer
            memory = text.split("cgroup\n", 1)[1]
            assert re.search(r"^1 +before_transformer/ +", memory, flags=re.MULTILINE)
            assert re.search(r"^1 +before_transformer +\d", memory, flags=re.MULTILINE)


def test_demo_shows_progress_and_drops_the_text_encoders_after_the_first_call(runs: Runs):
    stderr = runs["demo flux"].stderr
    assert "built a tiny FluxPipeline" in stderr
    assert "call 1/2: 2 steps, prompt 'a tiny test prompt'" in stderr
    assert "dropped text_encoder, text_encoder_2, tokenizer, tokenizer_2" in stderr
    assert "call 2/2: 2 steps, prompt embeddings" in stderr
    assert "100%" in stderr  # the progress bar
    assert "torchvision" not in stderr  # transformers' unrelated notice stays quiet


def test_demo_with_an_example_policy_and_another_family(runs: Runs):
    result = runs["demo sd with an example policy"]
    assert result.returncode == 0, result.stderr
    assert "built a tiny StableDiffusionPipeline" in result.stderr
    assert "release-all-boundaries.yaml" in result.stderr
    assert "call 1/3: 1 step, prompt 'a tiny test prompt'" in result.stderr  # one step, not "1 steps"
    assert [(c, b) for c, b, _ in _rows(result.stdout)] == [(c, b) for c in (1, 2, 3) for b in BOUNDARIES]
    written = (runs.folder / "sd.jsonl").read_text(encoding="utf-8")
    assert len(_releases(MetricsTracker.from_jsonl(written))) == 9
    sink = runs.folder / "ddo-reports.jsonl"  # the policy's report_sink, relative to the policy
    assert MetricsTracker.from_jsonl(sink.read_text(encoding="utf-8")).reports() == (
        MetricsTracker.from_jsonl(written).reports()
    )


def test_demo_families_are_the_tiny_pipeline_families():
    from ddo_hooks.cli.demo import FAMILIES
    from ddo_hooks.testing.tiny_pipelines import FAMILIES as BUILT

    assert FAMILIES == BUILT


# -- validate-policy --------------------------------------------------------------------------


def test_validate_policy_summarizes_a_valid_policy(runs: Runs):
    result = runs["policy valid"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 7  # the summary, each boundary, each size as parsed (A.7), each other setting
    assert "after-call-only.yaml: valid policy (version 1, device cuda)\n" in result.stdout
    assert "  release.min_releasable_bytes: 0 bytes (0 B, the default)\n" in result.stdout
    assert "\n  before_transformer: off\n  before_vae: off\n  after_call: host_cache_release\n" in result.stdout
    assert result.stdout.endswith("\n  release.collect: young (default: auto)\n")


# -- validate-report --------------------------------------------------------------------------


CONTENTS = (
    "6 reports\n  routes: pytorch_host_cache_release x5, phase_boundary_refusal x1\n"
    "  components: host_cache_before_transformer, host_cache_before_vae, host_cache_after_call\n"
)


@pytest.mark.parametrize(
    ("run", "summary"),
    [
        ("report jsonl", f"run.jsonl: valid JSON Lines, {CONTENTS}"),
        ("report tracker json", f"run.json: valid tracker JSON, {CONTENTS}"),
    ],
)
def test_validate_report_accepts_json_lines_and_tracker_json(runs: Runs, run: str, summary: str):
    result = runs[run]
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{runs.folder}{os.sep}{summary}"


# -- user errors and usage errors -------------------------------------------------------------


@pytest.mark.parametrize(("run", "expected"), USER_ERRORS.items(), ids=list(USER_ERRORS))
def test_user_errors_exit_1_with_a_message_and_no_traceback(runs: Runs, run: str, expected: list[str]):
    result = runs[run]
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    for text in expected:
        assert text in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(("run", "expected"), USAGE_ERRORS.items(), ids=list(USAGE_ERRORS))
def test_usage_errors_exit_2(runs: Runs, run: str, expected: str):
    result = runs[run]
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert expected in result.stderr
    assert "usage: ddo-hooks" in result.stderr


@pytest.mark.parametrize("run", [name for name in RUNS if name.startswith("help")])
def test_help_exits_0_on_every_command(runs: Runs, run: str):
    result = runs[run]
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ddo-hooks")
    assert "-h, --help" in result.stdout
    if run == "help":
        assert re.findall(r"^    (\S+)", result.stdout, re.MULTILINE) == [
            *("demo", "validate-policy", "validate-report", "schema", "summarize", "plot"),
        ]
    if run == "help demo":  # what the demo does, and the policy it attaches unless told another
        assert f"attach the policy ({DEMO_POLICY} unless --policy names another)" in _flat(result.stdout)
        assert f"(default: {DEMO_POLICY})" in _flat(result.stdout)


# -- schema and summarize ---------------------------------------------------------------------


@pytest.mark.parametrize(("which", "file"), [("policy", "hook-policy"), ("report", "ddo-report")])
def test_schema_prints_the_checked_in_schema(runs: Runs, which: str, file: str):
    result = runs[f"schema {which}"]
    assert result.returncode == 0, result.stderr
    assert result.stdout == (SCHEMAS / f"{file}.schema.json").read_text(encoding="utf-8")


def test_summarize_shows_the_table_and_totals_per_boundary(runs: Runs):
    result = runs["summarize"]
    assert result.returncode == 0, result.stderr
    assert _rows(result.stdout) == [
        (1, "before_transformer", "executed"),
        (1, "before_vae", "executed"),
        (1, "after_call", "executed"),
        (2, "before_transformer", "refused: loading"),
        (2, "before_vae", "executed"),
        (2, "after_call", "no-op: disabled"),
    ]
    assert "refused loading: a component was loading (pipe.load_lora_weights())" in result.stdout
    totals = result.stdout.split("totals per boundary across calls:\n", 1)[1]
    run = MetricsTracker.from_jsonl((runs.folder / "run.jsonl").read_text(encoding="utf-8"))
    delta = run.reports()[0].release.allocator_bytes_delta
    assert delta > 0
    assert re.search(rf"^before_vae +2 +2 +0 +0 +{re.escape(format_size(2 * delta))} ", totals, re.MULTILINE)
    assert re.search(rf"^before_transformer +2 +1 +0 +1 +{re.escape(format_size(delta))} ", totals, re.MULTILINE)
    assert re.search(rf"^after_call +2 +1 +1 +0 +{re.escape(format_size(delta))} ", totals, re.MULTILINE)


# -- the console script ------------------------------------------------------------------------


@pytest.mark.skipif(CONSOLE_SCRIPT is None, reason="the ddo-hooks console script is not on PATH (pip install -e .)")
def test_the_console_script_runs_the_command_line(runs: Runs):
    from ddo_hooks import __version__

    result = runs["console --version"]
    assert (result.returncode, result.stdout.strip()) == (0, f"ddo-hooks {__version__}")


# -- more cases, in process (main() is what both entry points call) ---------------------------


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err


def test_a_bare_report_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(_executed("before_vae").model_dump(mode="json"), indent=2), encoding="utf-8")
    status, out, _ = _main(capsys, "validate-report", str(path))
    assert status == 0
    assert out == f"{path}: valid report JSON, 1 report\n  routes: pytorch_host_cache_release x1\n" + (
        "  components: none (a bare report)\n"
    )


def test_an_invalid_record_in_tracker_json_is_located_at_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    document = json.loads(_saved_run().to_json())
    document["records"][4]["report"]["setup"]["host_cache_release"]["elapsed_seconds"] = -1.0
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    line, column = next(
        (n, s.index('"elapsed_seconds"') + 1) for n, s in enumerate(path.read_text().splitlines(), 1) if "-1.0" in s
    )
    status, _, err = _main(capsys, "validate-report", str(path))
    assert status == 1
    where = f"{path}:{line}:{column}: records[4].report.setup.host_cache_release.elapsed_seconds:"
    assert err.startswith(f"{where} -1.0 is out of range; expected a value of at least 0.0")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"component": "x"}\n',
            ":1:1: record: expected an object with 'component', 'report' and (optionally) 'envelope'",
        ),
        ("[1, 2]", ":1:1: a JSON list is not a report file"),
        ('{"schema_version": 1, "route": "nope", "setup": {}}', ":1:23: route: 'nope' is not a route of ddo_hooks'"),
        ("{\n", ":2:1: not JSON: a key in double quotes is expected here (Expecting property name"),
        ("[" * 100_000 + "]" * 100_000, ":1:100000: the JSON nests 100,000 levels deep, deeper than Python's JSON"),
    ],
)
def test_report_file_problems_are_located(tmp_path: Path, capsys: pytest.CaptureFixture[str], content, expected):
    path = tmp_path / "reports.jsonl"
    path.write_text(content, encoding="utf-8")
    status, out, err = _main(capsys, "validate-report", str(path))
    assert (status, out) == (1, "")
    assert err.startswith(f"{path}{expected}")


def test_a_bad_component_name_is_located_at_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    lines = _saved_run().to_jsonl().splitlines()
    lines[2] = lines[2].replace('"component": "host_cache_after_call"', '"component": "after call!"')
    path = tmp_path / "reports.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    status, _, err = _main(capsys, "validate-report", str(path))
    assert status == 1
    assert err.startswith(f"{path}:3:2: component: component='after call!' must be a non-empty name")


def test_a_policy_yaml_cannot_read_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "policy.yaml"
    path.write_text(f"version: 1\nrelease:\n  min_releasable_bytes: {'9' * 5000}\n", encoding="utf-8")
    status, _, err = _main(capsys, "validate-policy", str(path))
    assert status == 1
    assert err.startswith(f"{path}:3:25: release.min_releasable_bytes: cannot be read as a value: Exceeds the limit")


@pytest.mark.parametrize("command", ["validate-policy", "validate-report", "summarize"])
def test_files_that_are_not_utf8_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str):
    path = tmp_path / "latin1.txt"
    path.write_bytes("version: 1 # café".encode("latin-1"))
    status, _, err = _main(capsys, command, str(path))
    assert status == 1
    assert err.startswith(f"{path}: is not UTF-8 text (byte 0xe9 at offset 16); save ")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("demo", "--steps", "0"), "argument --steps: must be a whole number >= 1, got '0'"),
        (("demo", "--calls", "two"), "argument --calls: must be a whole number >= 1, got 'two'"),
        (("demo", "--family", "sdxl"), "--family: 'sdxl' is not a demo pipeline; did you mean 'sd'? use one of flux,"),
        (("demo", "--device", "cuda:x"), "'cuda:x' is not a demo device"),
        (("schema", "drawing"), "'drawing' is not a schema; print one of policy, report or record"),
        (("schema", "polcy"), "'polcy' is not a schema; did you mean 'policy'?"),
        (("validate-polcy", "p.yaml"), "'validate-polcy' is not a command; did you mean 'validate-policy'?"),
        (("validate-policy",), "the following arguments are required: FILE"),
    ],
)
def test_usage_errors_name_the_argument(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str):
    status, _, err = _main(capsys, *argv)
    assert status == 2
    assert expected in err
    assert not any(phrase in err for phrase in ("invalid choice", "argument which", "choose from"))


def test_the_commands_named_in_usage_errors_are_the_parsers():
    from ddo_hooks.cli.main import COMMANDS, build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    assert tuple(commands.choices) == COMMANDS


def test_demo_checks_its_arguments_before_building_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    missing = tmp_path / "missing"
    status, _, err = _main(capsys, "demo", "--device", "cpu", "--report", str(missing / "r.jsonl"))
    assert status == 1
    assert err == f"--report {missing / 'r.jsonl'}: the folder {missing} does not exist; create it first\n"
    status, _, err = _main(capsys, "demo", "--report", str(tmp_path))
    assert status == 1
    assert "is a directory; give a file path" in err
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 2\n", encoding="utf-8")
    status, _, err = _main(capsys, "demo", "--policy", str(policy))
    assert status == 1
    assert err == f"{policy}:1:1: version: unsupported version 2; supported versions: 1 (write 'version: 1')\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_demo_on_cuda_without_cuda_says_how_to_run_on_the_cpu(capsys: pytest.CaptureFixture[str]):
    status, _, err = _main(capsys, "demo", "--device", "cuda")
    assert status == 1
    assert "CUDA is not available" in err
    assert "leave --device out (or pass --device cpu)" in err


def test_validate_policy_refuses_an_action_not_registered_here_as_attach_would(capsys: pytest.CaptureFixture[str]):
    status, out, err = _main(capsys, "validate-policy", str(EXAMPLES / "custom-action.yaml"))
    assert status == 1
    first = _flat(out.split("\n  before_transformer")[0])
    assert first == (
        f"{EXAMPLES / 'custom-action.yaml'}: attach() would refuse it: my_pkg.log_memory is not registered here "
        "(otherwise a valid policy (version 1, device cuda:1))"
    )
    assert "  after_call: host_cache_release, my_pkg.log_memory {label: after-call}\n" in out
    where = f"{EXAMPLES / 'custom-action.yaml'}:22:9"
    assert err.startswith(f"{where}: action 'my_pkg.log_memory' is not registered here\n")
    assert _flat(err).endswith("where the host registers it before attach(), pass --allow-unregistered")
    with pytest.raises(PolicyError, match=r"my_pkg\.log_memory"):  # what attach() says of it
        attach(build_pipeline("sd"), str(EXAMPLES / "custom-action.yaml"))


def test_validate_policy_allows_an_action_registered_elsewhere_when_told(capsys: pytest.CaptureFixture[str]):
    status, out, err = _main(capsys, "validate-policy", "--allow-unregistered", str(EXAMPLES / "custom-action.yaml"))
    assert (status, err) == (0, "")
    assert _flat(out).startswith(
        f"{EXAMPLES / 'custom-action.yaml'}: valid policy (version 1, device cuda:1); my_pkg.log_memory to be "
        "registered by the host before attach() (--allow-unregistered)"
    )


@pytest.mark.parametrize("name", PRESETS)
def test_validate_policy_prints_every_setting_that_makes_a_preset(name: str, capsys: pytest.CaptureFixture[str]):
    import yaml

    from ddo_hooks.policy.model import preset_file

    status, out, _ = _main(capsys, "validate-policy", name)
    assert status == 0
    written = yaml.safe_load(preset_file(name).read_text(encoding="utf-8"))
    ours, default = HookPolicy.preset(name).model_dump(mode="json"), HookPolicy.default().model_dump(mode="json")
    expected = [
        f"  {section}.{key}: " for section, keys in written.items() if section != "boundaries"
        for key in (keys if isinstance(keys, dict) else ()) if ours[section][key] != default[section][key]
    ]  # fmt: skip
    shown = [line for line in out.splitlines() if "(default: " in line and "bytes" not in line]
    assert [line.split(": ")[0] + ": " for line in shown] == expected
    if name == "smallest-box":
        assert shown == [
            "  pinned_copies.from_files: register (default: null)",
            "  pinned_copies.keep_encoders_pinned: true (default: false)",
        ]


def test_calls_are_inferred_from_the_boundary_order():
    after_call = [("host_cache_after_call", release_pytorch_host_cache(phase="after_call"))] * 3
    assert infer_calls(after_call) == [1, 2, 3]  # the same action at the same boundary: a new call
    assert [row.call for row in boundary_rows(_saved_run().records())] == [1, 1, 1, 2, 2, 2]
