"""Users' text files (policies, report files): only regular files, never more than the documented size."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ddo_hooks.cli import main
from ddo_hooks.errors import DdoHooksError, PolicyError, ReportError
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.reports.files import MAX_REPORT_FILE_BYTES, load_report_file

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
