"""The command line on wrong input: the other kind of file, a missing argument, a closed pipe, sizes to confirm."""

from __future__ import annotations

import importlib.util
import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ddo_hooks import MetricsTracker, release_pytorch_host_cache
from ddo_hooks.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err


def reports(folder: Path) -> tuple[Path, Path]:
    tracker = MetricsTracker()
    tracker.record(release_pytorch_host_cache(phase="after_call"), component="host_cache_after_call")
    (folder / "tracker.json").write_text(tracker.to_json(), encoding="utf-8")
    return tracker.write_jsonl(folder / "run.jsonl"), folder / "tracker.json"


# -- A.7: sizes as parsed -------------------------------------------------------------------------


def test_validate_policy_shows_each_size_as_written_and_in_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "policy.yaml"
    path.write_text(
        "version: 1\nrelease: {min_releasable_bytes: 16 MB}\n"
        "boundaries:\n  after_call: {actions: [{name: host_cache_release, options: {min_releasable_bytes: 16MiB}}]}\n",
        encoding="utf-8",
    )
    status, out, _ = run(capsys, "validate-policy", str(path))
    assert status == 0
    assert out.splitlines()[4:] == [  # after the summary and a line per boundary
        "  release.min_releasable_bytes: 16 MB = 16,000,000 bytes (15.3 MiB)",
        "  auxiliary_sources.max_copy_bytes: 16,777,216 bytes (16.0 MiB, the default)",
        "  boundaries.after_call.actions[0].options.min_releasable_bytes: 16MiB = 16,777,216 bytes (16.0 MiB)",
    ]


# -- A.8: the example that needs an action of another package ----------------------------------------


def test_the_custom_action_example_says_first_that_it_needs_its_action():
    head = "\n".join((EXAMPLES / "custom-action.yaml").read_text(encoding="utf-8").splitlines()[1:4])
    assert "NEEDS the action my_pkg.log_memory" in head
    assert "package that provides it is installed" in head


def test_the_demo_explains_an_action_that_is_not_registered_here(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    policy = EXAMPLES / "custom-action.yaml"
    argv = ("demo", "--device", "cpu", "--policy", str(policy), "--report", str(tmp_path / "r.jsonl"))
    status, out, err = run(capsys, *argv)
    assert (status, out) == (1, "")
    assert err.startswith(f"{policy}:")
    assert "the policy names the action 'my_pkg.log_memory', which is not registered in this Python environment" in err
    assert "Install the package that provides it" in err
    assert "remove the action from the policy" in err
    assert not (tmp_path / "r.jsonl").exists()


# -- C.1: the other kind of file -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["run.jsonl", "tracker.json", "bare.json"])
def test_a_report_file_given_to_validate_policy_names_validate_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
):
    reports(tmp_path)
    bare = release_pytorch_host_cache(phase="after_call").model_dump_json()
    (tmp_path / "bare.json").write_text(bare, encoding="utf-8")
    path = tmp_path / name
    status, out, err = run(capsys, "validate-policy", str(path))
    assert (status, out) == (1, "")
    hint = "this looks like a file of reports, not a policy;\n  check it with: ddo-hooks validate-report"
    assert err == f"{path}: {hint} {path}\n"


@pytest.mark.parametrize("command", ["validate-report", "summarize"])
def test_a_policy_given_to_a_report_command_names_validate_policy(capsys: pytest.CaptureFixture[str], command: str):
    path = EXAMPLES / "after-call-only.yaml"
    status, out, err = run(capsys, command, str(path))
    assert (status, out) == (1, "")
    assert err == (
        f"{path}: this looks like a hook policy, not a report file;\n"
        f"  check it with: ddo-hooks validate-policy {path}\n"
    )


def test_a_file_of_neither_kind_keeps_its_own_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "notes.txt"
    path.write_text("just: notes\n", encoding="utf-8")
    assert "version: missing" in run(capsys, "validate-policy", str(path))[2]
    assert "not JSON" in run(capsys, "validate-report", str(path))[2]


# -- C.2: schema without its argument ---------------------------------------------------------------


def test_schema_without_an_argument_names_the_choices(capsys: pytest.CaptureFixture[str]):
    status, out, err = run(capsys, "schema")
    assert (status, out) == (2, "")
    assert "usage: ddo-hooks schema" in err
    assert "say which schema to print: policy, report or record" in err


# -- C.3: a closed pipe ---------------------------------------------------------------------------


def test_a_reader_that_goes_away_ends_the_command_quietly_with_status_0():
    """`ddo-hooks schema report | head -1`, with the pipe closed before the command writes (no race)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: every write meets a broken pipe
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ddo_hooks", "schema", "report"], stdout=write, stderr=subprocess.PIPE, timeout=600
        )
    finally:
        os.close(write)
    assert done.returncode == 0
    assert done.stderr == b""


def test_head_sees_the_first_line_and_the_command_exits_0():
    command = f"{sys.executable} -m ddo_hooks schema report | head -1; echo status=${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600)
    assert done.stdout == "{\nstatus=0\n"
    assert done.stderr == ""


def test_validate_policy_refuses_a_near_miss_of_a_built_in_action_as_attach_does(tmp_path, capsys):
    path = tmp_path / "typo.yaml"
    path.write_text("version: 1\nboundaries:\n  after_call: {actions: [host_cache_relase]}\n", encoding="utf-8")
    assert main(["validate-policy", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:3:26: unknown action 'host_cache_relase'; did you mean 'host_cache_release'?")


def test_validate_policy_allows_an_action_the_host_will_register_when_told(tmp_path, capsys):
    path = tmp_path / "custom.yaml"
    path.write_text("version: 1\nboundaries:\n  after_call: {actions: [my_plugin.log]}\n", encoding="utf-8")
    assert main(["validate-policy", str(path)]) == 1  # attach() would refuse it here
    assert capsys.readouterr().err.startswith(f"{path}:3:26: action 'my_plugin.log' is not registered here\n")
    assert main(["validate-policy", "--allow-unregistered", str(path)]) == 0
    assert "my_plugin.log to be registered by the host before attach()" in capsys.readouterr().out


def test_demo_takes_a_preset_name_and_names_the_presets_when_neither_a_file_nor_a_preset_matches(capsys):
    from ddo_hooks import HookPolicy
    from ddo_hooks.cli.policies import policy_or_preset

    assert policy_or_preset("lowest-peak") == HookPolicy.preset("lowest-peak")
    assert main(["demo", "--policy", "lowest-peek"]) == 1
    assert capsys.readouterr().err == (
        "lowest-peek: no such policy file, and no preset of that name; did you mean 'lowest-peak'? check the path, "
        "or give a preset: default, lowest-peak, lowest-latency, smallest-box, streamed-box\n"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '{"component": "x", "report": {"schema_version": 1, "setup": {}}}\n',
            "report.route: missing: every report names its route",
        ),
        ('{"schema_version": 1, "route": "nope", "setup": {}}', "route: 'nope' is not a route of ddo_hooks' reports"),
        ('{"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "DDOReport"}', "is a JSON Schema"),
    ],
    ids=["no-route", "unknown-route", "schema-file"],
)
@pytest.mark.parametrize("command", ["summarize", "validate-report"])
def test_report_file_messages_say_what_is_wrong_without_pydantic_internals(tmp_path, capsys, command, text, said):
    path = tmp_path / "reports.jsonl"
    path.write_text(text, encoding="utf-8")
    assert main([command, str(path)]) == 1
    err = capsys.readouterr().err
    assert said in err
    assert not any(word in err for word in ("discriminator", "Unable to extract", "Input tag", "pydantic"))


CUT = "the line is cut off (not complete JSON: its writer stopped mid-line, e.g. in a crash or on a full disk); its " \
    "record is left out"  # fmt: skip


def test_summarize_and_plot_read_the_records_before_a_last_line_cut_by_a_crash(tmp_path, capsys):
    from support.report_runs import gpu_run

    path = gpu_run("a1", rank=0, world=1).write_jsonl(tmp_path / "crashed.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join([*lines[:-1], lines[-1][:40]]), encoding="utf-8")  # no newline: cut mid-record
    assert main(["summarize", str(path)]) == 0
    out, err = capsys.readouterr()
    # the line wraps at 100 columns wherever the temporary folder's length puts it
    assert " ".join(out.split()).startswith(f"{path}: {len(lines) - 1} reports (JSON Lines)")
    assert err == f"warning: {path}:{len(lines)}: {CUT}\n"
    if importlib.util.find_spec("matplotlib") is not None:
        assert main(["plot", str(path), "-o", str(tmp_path / "run.png")]) == 0
        assert capsys.readouterr().err == err
    assert main(["validate-report", str(path)]) == 0  # the records before the cut line are valid
    out, err = capsys.readouterr()
    assert out.startswith(f"{path}: valid JSON Lines, {len(lines) - 1} reports; 1 cut line left out (see the warning)")
    assert err == f"warning: {path}:{len(lines)}: {CUT}\n"


def test_the_commands_read_past_lines_cut_in_the_middle_of_a_file_naming_each(tmp_path, capsys):
    """A full disk cut a line of one writer sharing the sink; the lines after it, of any writer, are whole."""
    from support.report_runs import gpu_run

    path = gpu_run("a1", rank=0, world=1).write_jsonl(tmp_path / "full-disk.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    middle = [*lines[:2], lines[2][:40], *lines[3:5], lines[5][:90], *lines[6:]]
    path.write_text("\n".join(middle) + "\n", encoding="utf-8")
    said = f"warning: {path}:3: {CUT}\nwarning: {path}:6: {CUT}\n"
    assert main(["summarize", str(path)]) == 0
    out, err = capsys.readouterr()
    assert " ".join(out.split()).startswith(f"{path}: {len(lines) - 2} reports (JSON Lines)")
    assert err == said
    assert main(["validate-report", str(path)]) == 0  # the sink's design: only the cut lines are lost
    out, err = capsys.readouterr()
    assert out.startswith(
        f"{path}: valid JSON Lines, {len(lines) - 2} reports; 2 cut lines left out (see the warnings)"
    )
    assert err == said
    middle[3] = middle[3].replace('"component": "', '"component": "bad name ')  # valid JSON, invalid record
    path.write_text("\n".join(middle) + "\n", encoding="utf-8")
    assert main(["validate-report", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"warning: {path}:3: {CUT}\n{path}:4:2: component: ")  # the cut line, then the error


@pytest.mark.parametrize("command", [[], ["demo"], ["validate-policy"], ["validate-report"], ["schema"],
                                     ["summarize"], ["plot"]])  # fmt: skip
def test_the_help_points_to_no_file_that_only_a_checkout_has(capsys, command):
    # An installed wheel has no README, docs/ or examples/: the help names the docs or installed things.
    assert main([*command, "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: ddo-hooks")
    assert not [word for word in ("README", "docs/", "examples/", ".md") if word in text]


@pytest.mark.parametrize("command", ["demo", "plot"])
def test_demo_report_and_plot_output_refuse_a_fifo_or_a_link_before_any_work(tmp_path, capsys, command):
    # Issue 51 (C): demo --report renamed its file over a device node (as root, /dev/full became a regular file),
    # and plot -o wrote through a symbolic link (matplotlib opens the path).
    victim = tmp_path / "victim.png"
    victim.write_bytes(b"someone else's")
    fifo, link = tmp_path / "pipe.png", tmp_path / "link.png"
    os.mkfifo(fifo)
    link.symlink_to(victim)
    for target, what in ((fifo, "is a FIFO (named pipe), not a regular file"), (link, "is a symbolic link")):
        if command == "demo":
            argv = ["demo", "--family", "sd", "--device", "cpu", "--steps", "1", "--report", str(target)]
        else:
            argv = ["plot", str(EXAMPLES / "reports" / "h200-flux-lowest-peak.jsonl"), "-o", str(target)]
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert f"{target} {what}" in err
        assert "Traceback" not in err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert link.is_symlink()
    assert victim.read_bytes() == b"someone else's"


def test_demo_report_is_never_written_through_a_link_planted_beside_it(tmp_path, capsys):
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("someone else's file\n")
    report = tmp_path / "run.jsonl"
    planted = tmp_path / f".run.jsonl.{os.getpid()}.tmp"  # the temporary name it used to write to
    planted.symlink_to(victim)
    argv = ["demo", "--family", "sd", "--device", "cpu", "--steps", "1", "--calls", "1", "--report", str(report)]
    assert main(argv) == 0
    capsys.readouterr()
    assert victim.read_text() == "someone else's file\n"
    assert not report.is_symlink()
    assert len(MetricsTracker.from_jsonl(report.read_text(encoding="utf-8")).records()) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [planted.name, "elsewhere", "run.jsonl"]


# -- D: the command's own output cannot be written ----------------------------------------------------


def strict_stream() -> io.TextIOWrapper:
    """A stream as ``PYTHONIOENCODING=utf-8:strict`` makes stdout: a name that is not UTF-8 cannot be written."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)


def test_a_file_name_the_output_cannot_encode_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    path, _ = reports(tmp_path)
    odd = tmp_path / os.fsdecode(b"run\xff.jsonl")  # a name that is not UTF-8: a lone surrogate in Python
    path.rename(odd)
    monkeypatch.setattr(sys, "stdout", strict_stream())
    assert main(["validate-report", str(odd)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("ddo-hooks validate-report: cannot write the output: ")
    assert "PYTHONIOENCODING" in err


def test_an_error_naming_a_file_that_stderr_cannot_encode_is_still_said(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdout", strict_stream())
    monkeypatch.setattr(sys, "stderr", strict_stream())
    assert main(["validate-report", str(tmp_path / os.fsdecode(b"gone\xff.jsonl"))]) == 1
    said = sys.stderr.buffer.getvalue().decode("utf-8")
    assert said.startswith(f"{tmp_path}/gone\\udcff.jsonl: no such report file"), said
    assert said.count("\n") == 1, said


@pytest.mark.parametrize("argv", [["schema", "report"], ["validate-policy", "lowest-peak"], ["--version"]])
def test_a_closed_stdout_is_one_line_and_status_1(monkeypatch, capsys, argv):
    monkeypatch.setattr(sys, "stdout", None)  # what Python makes of `>&-`
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "standard output is closed" in err


def test_a_command_run_with_stdout_closed_says_so_in_one_line():
    command = f'exec "{sys.executable}" -m ddo_hooks schema report >&-'
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=600)
    assert (done.returncode, done.stderr.count("\n")) == (1, 1), done.stderr
    assert done.stderr.startswith("ddo-hooks schema: standard output is closed")
