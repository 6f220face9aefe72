"""The report sink's lines: each starts on a line of its own, whichever writer sharing the file cut the one before.

A write cut short by a full disk leaves part of its line in the file (by design: the sink never
truncates a file that other processes append to). The next line, of this sink or of another one
on the same file (another process), must not be glued to it, or it is lost with it.
"""

from __future__ import annotations

import errno
import json
import os

import pytest

from ddo_hooks import MetricsTracker, release_pytorch_host_cache
from ddo_hooks.hooks.sink import ReportSink

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
