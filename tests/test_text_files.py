"""Users' text files (policies, report files): only regular files, never more than the documented size.

What a reader is given is told as it is: a file whose size says 0 is read all the same (``/proc``),
a file of blank lines or of one cut line is named so (what a sink whose first write met a full disk
holds), and text given where a path is expected names the function that reads text.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ddo_hooks import MetricsTracker, attach, parse_report, release_pytorch_host_cache
from ddo_hooks.cli import main
from ddo_hooks.errors import DdoHooksError, PolicyError, ReportError
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.reports.files import MAX_REPORT_FILE_BYTES, load_report_file
from ddo_hooks.testing.tiny_pipelines import build_pipeline

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")

READERS = [
    pytest.param(HookPolicy.from_yaml, PolicyError, "policy", id="policy"),
    pytest.param(load_report_file, ReportError, "report", id="report"),
]


@pytest.fixture
def never_opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail any attempt to open a FIFO or a device: a special file must be refused from its ``stat``.

    Opening a FIFO with no writer blocks, so a reader that opened it would hang; with this fixture
    it fails at once instead, and the test needs no clock.
    """
    opened: list[str] = []
    real_open = os.open

    def guarded_open(path, flags, *args, **kwargs):
        name = os.fsdecode(path)
        if Path(name).name == "pipe" or name.startswith("/dev/"):
            opened.append(name)
            raise AssertionError(f"{name} was opened")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    return opened


@posix_only
@pytest.mark.parametrize(("read", "error", "kind"), READERS)
def test_a_fifo_is_refused_at_once_instead_of_blocking(tmp_path: Path, never_opened: list[str], read, error, kind):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(error) as raised:
        read(fifo)
    assert never_opened == []
    assert str(raised.value) == (
        f"{fifo}: is a FIFO (named pipe), not a regular file; save the {kind} to a file and pass that file's path"
    )


@posix_only
@pytest.mark.parametrize(("read", "error", "kind"), READERS)
def test_a_device_is_refused_without_reading_it(never_opened: list[str], read, error, kind):
    with pytest.raises(error) as raised:
        read("/dev/zero")
    assert never_opened == []
    assert str(raised.value).startswith("/dev/zero: is a character device, not a regular file")


def test_a_report_file_larger_than_the_limit_is_refused_before_reading(tmp_path: Path):
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as f:
        f.truncate(MAX_REPORT_FILE_BYTES + 1)  # sparse
    with pytest.raises(ReportError, match=r"huge\.jsonl: is 67,108,865 bytes, more than a report file may hold"):
        load_report_file(path)


def test_the_limits_are_documented_sizes():
    from ddo_hooks.policy.yaml_loader import MAX_POLICY_BYTES

    assert (MAX_POLICY_BYTES, MAX_REPORT_FILE_BYTES) == (1024**2, 64 * 1024**2)


@posix_only
@pytest.mark.parametrize("command", ["validate-policy", "validate-report", "summarize"])
def test_the_file_commands_refuse_special_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], never_opened: list[str], command: str
):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main([command, str(fifo)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{fifo}: is a FIFO (named pipe), not a regular file")
    assert main([command, "/dev/zero"]) == 1
    assert never_opened == []


def test_a_path_with_a_nul_byte_is_a_clear_error():
    for read in (HookPolicy.from_yaml, load_report_file):
        with pytest.raises(DdoHooksError, match=r"cannot read the (policy|report) file: .*null"):
            read("a\0b")


# -- E: what a reader is given, told as it is ------------------------------------------------------------


def a_record() -> str:
    tracker = MetricsTracker()
    tracker.record(release_pytorch_host_cache(phase="after_call"), component="host_cache_after_call")
    return tracker.to_jsonl()


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="a Linux /proc")
def test_read_jsonl_reads_a_pseudo_file_whose_size_says_zero():
    assert os.stat("/proc/self/status").st_size == 0
    with pytest.raises(ReportError, match=r"^/proc/self/status:1:1: not JSON"):
        MetricsTracker.read_jsonl("/proc/self/status")


def test_read_jsonl_reads_the_records_of_a_file_whose_size_says_zero(tmp_path: Path, monkeypatch):
    path = tmp_path / "run.jsonl"
    path.write_text(a_record() * 2, encoding="utf-8")
    real_stat = os.stat

    def says_zero(name, *args, **kwargs):  # as /proc, a FUSE file system or a file still being written say
        info = real_stat(name, *args, **kwargs)
        return os.stat_result((*info[:6], 0, *info[7:])) if os.fspath(name) == str(path) else info

    monkeypatch.setattr(os, "stat", says_zero)
    assert len(MetricsTracker.read_jsonl(path).entries()) == 2


@pytest.mark.parametrize("text", ["\n", "\n\n  \n"])
def test_a_file_of_blank_lines_is_told_as_such_and_read_jsonl_reads_no_record(tmp_path: Path, text: str):
    path = tmp_path / "sink.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ReportError, match=r"sink\.jsonl: holds only blank lines, no report \(a report sink"):
        load_report_file(path)
    assert MetricsTracker.read_jsonl(path).entries() == []


def test_a_file_whose_only_line_is_cut_off_is_told_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "sink.jsonl"
    path.write_text(a_record()[:40], encoding="utf-8")  # a sink whose first write met a full disk
    for cut_lines in (False, True):
        with pytest.raises(ReportError, match=r"sink\.jsonl:1:\d+: not JSON: .*: line 1 is cut off .* holds no other"):
            load_report_file(path, cut_lines=cut_lines)
    assert main(["validate-report", str(path)]) == 1
    assert "line 1 is cut off" in capsys.readouterr().err
    with pytest.warns(UserWarning, match=r"sink\.jsonl:1: the line is cut off"):
        assert MetricsTracker.read_jsonl(path).entries() == []


@pytest.mark.parametrize("text", ['{"route": "\ud800"}', "\udcff", '{"a": 1}\ud83d'])
def test_parse_report_of_text_with_a_lone_surrogate_is_a_report_error(text: str):
    with pytest.raises(ReportError, match=r"half of a surrogate pair"):
        parse_report(text)


POLICY_TEXT = "version: 1\n" + "".join(f"# a comment that makes the text long: {n}\n" for n in range(300))


def test_yaml_text_given_to_attach_names_from_yaml_text_in_a_short_message():
    pipe = build_pipeline("sd")
    for load in (lambda: attach(pipe, POLICY_TEXT), lambda: HookPolicy.from_yaml(POLICY_TEXT)):
        with pytest.raises(PolicyError) as raised:
            load()
        message = str(raised.value)
        assert "HookPolicy.from_yaml_text(text)" in message
        assert len(message) < 400, len(message)
    assert HookPolicy.from_yaml_text(POLICY_TEXT).version == 1  # what the message says to do


def test_json_lines_given_to_read_jsonl_names_from_jsonl_in_a_short_message():
    text = a_record() * 40
    for read in (MetricsTracker.read_jsonl, load_report_file):
        with pytest.raises(ReportError) as raised:
            read(text)
        message = str(raised.value)
        assert "MetricsTracker.from_jsonl(text)" in message
        assert len(message) < 400, len(message)
    assert len(MetricsTracker.from_jsonl(text).entries()) == 40
