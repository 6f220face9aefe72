"""The report sink's lines: each starts on a line of its own, whichever writer sharing the file cut the one before.

A write cut short by a full disk leaves part of its line in the file (by design: the sink never
truncates a file that other processes append to). The next line, of this sink or of another one
on the same file (another process), must not be glued to it, or it is lost with it. Processes
sharing a sink take turns (a lock from the look at the last byte to the end of the append), so none
adds a blank line; and a sink that runs for long rotates before it outgrows its readers, which read
the rotated set.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import subprocess
import sys

import pytest

from ddo_hooks import MetricsTracker, release_pytorch_host_cache
from ddo_hooks.cli import main
from ddo_hooks.hooks import sink as sink_module
from ddo_hooks.hooks.sink import ReportSink
from ddo_hooks.reports.files import MAX_REPORT_FILE_BYTES, load_report_file
from ddo_hooks.reports.sink_files import ROTATE_BYTES, sink_files

REPORT = release_pytorch_host_cache(phase="after_call").model_dump(mode="json")


def record(n: int) -> str:
    return json.dumps({"component": f"c{n}", "report": REPORT})


def cut_short(monkeypatch: pytest.MonkeyPatch, keep: int | None = None) -> None:
    """The next writes of this process put only part of their bytes in the file, as write(2) does on a full disk."""
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[: len(data) // 2 if keep is None else keep]))


def test_a_line_another_writer_cut_is_ended_before_this_writers_line(tmp_path, monkeypatch):
    path = tmp_path / "shared.jsonl"
    a = ReportSink(path, on_failure="continue")  # two processes' sinks on one file
    b = ReportSink(path, on_failure="continue")
    assert a.write(record(1)) is True
    with monkeypatch.context() as full_disk:
        cut_short(full_disk)
        assert a.write(record(2)) is False  # its cut line is left in the file
    assert b.write(record(3)) is True  # another writer, which never saw the cut
    assert a.write(record(4)) is True
    lines = path.read_text().splitlines()
    assert lines == [record(1), record(2)[: len(record(2) + "\n") // 2], record(3), record(4)]  # no blank line
    with pytest.warns(UserWarning, match=r"^<jsonl>:2: the line is cut off"):
        read = MetricsTracker.from_jsonl(path.read_text())
    assert read.components() == ("c1", "c3", "c4")  # every line reported written is read


def test_a_line_cut_just_before_its_newline_is_ended_too(tmp_path, monkeypatch):
    path = tmp_path / "shared.jsonl"
    a, b = ReportSink(path, on_failure="continue"), ReportSink(path, on_failure="continue")
    with monkeypatch.context() as full_disk:
        cut_short(full_disk, keep=len(record(1)))  # all but the newline
        assert a.write(record(1)) is False
    assert b.write(record(2)) is True
    assert path.read_text() == record(1) + "\n" + record(2) + "\n"


def test_a_sink_that_may_not_read_its_file_still_ends_its_own_cut_line(tmp_path, monkeypatch):
    """Without read permission the sink cannot see how the file ends: it knows only its own cut lines."""
    path = tmp_path / "write-only.jsonl"
    real_open = os.open

    def no_read(file, flags, *args):  # a file this process may append to but not read (mode 0o200)
        if flags & os.O_ACCMODE == os.O_RDWR:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, flags, *args)

    monkeypatch.setattr(os, "open", no_read)
    sink = ReportSink(path, on_failure="continue")
    sink.probe()
    with monkeypatch.context() as full_disk:
        cut_short(full_disk)
        assert sink.write(record(1)) is False
    assert sink.write(record(2)) is True
    assert path.read_text().splitlines()[1:] == [record(2)]


# -- several processes on one sink, and a sink that runs for long ------------------------------------------

WRITER = """
import json, sys
from pathlib import Path
from ddo_hooks.hooks.sink import ReportSink
sink = ReportSink(Path(sys.argv[1]), on_failure="raise")
record = json.loads(sys.argv[2])
for i in range(int(sys.argv[3])):
    record["component"] = f"w{sys.argv[4]}_{i}"
    sink.write(json.dumps(record))
"""


def long_record(n: int, size: int = 20_000) -> str:
    """A valid record of about ``size`` bytes: an append of it spans several pages, as the issue's long lines did."""
    report = json.loads(json.dumps(REPORT))
    report["setup"]["host_cache_release"]["detail"] = "x" * size
    return json.dumps({"component": f"c{n}", "report": report})


def test_processes_appending_to_one_sink_leave_no_blank_line(tmp_path):
    """Before the lock, 4 x 100 records of 20 KB gained about 19 blank lines: the last byte was read mid-append."""
    path = tmp_path / "shared.jsonl"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), long_record(0), "100", str(w)]) for w in range(4)
    ]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0, 0, 0]
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [n for n, line in enumerate(lines[:-1], start=1) if not line.strip()] == []
    assert len(MetricsTracker.read_jsonl(path).entries()) == 400


def test_a_sink_rotates_before_it_outgrows_what_its_readers_read(tmp_path):
    path = tmp_path / "reports.jsonl"
    line = record(10)  # every record here is as long
    sink = ReportSink(path, on_failure="raise", rotate_bytes=10 * (len(line) + 1))
    for n in range(10, 35):
        assert sink.write(record(n)) is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports.jsonl", "reports.jsonl.1", "reports.jsonl.2"]
    sizes = [(tmp_path / name).stat().st_size for name in ("reports.jsonl.1", "reports.jsonl.2", "reports.jsonl")]
    assert sizes == [10 * (len(line) + 1), 10 * (len(line) + 1), 5 * (len(line) + 1)]
    assert sink_files(path) == [tmp_path / "reports.jsonl.1", tmp_path / "reports.jsonl.2", path]
    assert ROTATE_BYTES * 2 <= MAX_REPORT_FILE_BYTES  # room for the lines of a sink that could not take the lock


def test_read_jsonl_and_summarize_read_a_sinks_rotated_files_oldest_first(tmp_path, capsys):
    path = tmp_path / "reports.jsonl"
    sink = ReportSink(path, on_failure="raise", rotate_bytes=3 * (len(record(0)) + 1))
    for n in range(8):
        sink.write(record(n))
    assert MetricsTracker.read_jsonl(path).components() == tuple(f"c{n}" for n in range(8))
    assert main(["summarize", str(path)]) == 0
    out = capsys.readouterr().out
    read = re.findall(r"^(\S+): (\d) reports", out, re.MULTILINE)
    assert read == [(f"{path}.1", "3"), (f"{path}.2", "3"), (str(path), "2")], out
    path.unlink()  # just rotated, the next line not written yet: the rotated files are the sink
    assert MetricsTracker.read_jsonl(path).components() == tuple(f"c{n}" for n in range(6))
    path.touch()  # what attach leaves (it opens the sink without writing): no record yet, no error
    assert main(["summarize", str(path)]) == 0
    assert MetricsTracker.read_jsonl(path).components() == tuple(f"c{n}" for n in range(6))


def test_a_sink_that_waited_while_another_rotated_writes_to_the_new_file(tmp_path, monkeypatch):
    path = tmp_path / "reports.jsonl"
    size = len(record(0)) + 1
    a = ReportSink(path, on_failure="raise", rotate_bytes=2 * size)
    b = ReportSink(path, on_failure="raise", rotate_bytes=2 * size)
    a.write(record(1))
    b.write(record(2))
    real_flock = fcntl.flock
    rotated_first: list[bool] = []

    def a_rotates_first(fd, operation):  # b has opened the file; a rotates it before b takes the lock
        if not rotated_first and operation & fcntl.LOCK_EX:
            rotated_first.append(True)
            a.write(record(3))
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", a_rotates_first)
    b.write(record(4))
    assert (tmp_path / "reports.jsonl.1").read_text().splitlines() == [record(1), record(2)]
    assert path.read_text().splitlines() == [record(3), record(4)]


def test_a_lock_held_past_the_wait_costs_no_report(tmp_path, monkeypatch):
    """A process that holds the lock too long (stopped in a debugger) never stops a call: the line is appended."""
    path = tmp_path / "reports.jsonl"
    monkeypatch.setattr(sink_module, "LOCK_WAIT_S", 0.01)
    with open(path, "a") as holder:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        assert ReportSink(path, on_failure="raise").write(record(1)) is True
    assert path.read_text().splitlines() == [record(1)]


@pytest.mark.parametrize("blank", ["\n", "\n\n", "  \n", "\r\n"])
def test_every_reader_skips_the_blank_lines_an_older_sink_left(tmp_path, capsys, blank):
    path = tmp_path / "reports.jsonl"
    path.write_text(blank + record(1) + "\n" + blank + record(2) + "\n" + blank, newline="")
    assert MetricsTracker.read_jsonl(path).components() == ("c1", "c2")
    assert MetricsTracker.from_jsonl(path.read_text()).components() == ("c1", "c2")
    assert [entry.component for entry in load_report_file(path).entries] == ["c1", "c2"]
    assert main(["validate-report", str(path)]) == 0
    assert main(["summarize", str(path)]) == 0
    assert "Traceback" not in capsys.readouterr().err
