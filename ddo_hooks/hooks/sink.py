"""The policy's report sink: a JSON Lines file that each report is appended to, one whole line at a time.

Several processes may share one sink (forked children, workers that load one policy): each line is
written with one ``write`` to the file opened with ``O_APPEND``, so lines of different writers never
interleave, and the sink never truncates the file, which would erase the lines another process
appended meanwhile. :meth:`ReportSink.probe` checks at attach that the file can be opened for
writing without writing to it. A write that fails or is short (a full disk) leaves the file as it
is: the failure is a :class:`~ddo_hooks.errors.ReportSinkError` that names the file and the fix,
and where part of the line reached the file, that cut line stays. So that only the cut line is
lost (readers leave it out and name it), every line starts on a line of its own, whichever writer
cut the line before it: the sink reads the file's last byte (``fstat``, then ``pread`` of the
descriptor it appends with) and starts its line with a newline when that byte is not one.

One rule makes that check and the append one step: each sink holds an exclusive ``flock`` on the
file from the check to the end of its write, so no other sink's append is still growing the file
when the last byte is read (without it, processes sharing a sink gained blank lines). A sink waits
for the lock at most :data:`LOCK_WAIT_S` (another process stopped while holding it, a file system
without locks, a system without ``fcntl`` such as Windows); past that it appends without it, as
before, so a call never hangs on its sink, and every reader of the project skips blank lines.
What remains: a sink that may append to the file but not read it (mode ``0o200``) sees only its
own cut lines.

A sink that runs for long never outgrows its readers: under the lock, a line that would take the
file past :data:`~ddo_hooks.reports.sink_files.ROTATE_BYTES` (32 MiB) first renames the file to the
next free ``reports.jsonl.N`` (``.1`` the oldest; nothing is deleted), and goes to a new file; a
sink that opened the old file before the rename finds it renamed once it holds the lock, and opens
the new one. :meth:`~ddo_hooks.reports.tracker.MetricsTracker.read_jsonl` and ``ddo-hooks
summarize``/``plot`` read the whole set (:func:`~ddo_hooks.reports.sink_files.sink_files`). A
rename that fails (a folder the process may not write) is logged once, and the line is appended.

The policy's ``report_sink_failure`` decides
what a failure does: ``raise`` ends the pipeline call with it; ``continue`` (the default) keeps the
call going, keeps the failure in :attr:`ReportSink.failures` (the last 100) and logs it once, so
that a failed log write never costs the user the image.

The sink is a regular file (a missing one is created). A symbolic link is refused (opened with
``O_NOFOLLOW``, so that nobody who can write the folder redirects the reports into another file),
as are a FIFO, a directory, a device (``/dev/null``, ``/dev/stdout`` when it is a terminal or a
pipe) or a socket: :meth:`ReportSink.probe` refuses them at attach, and a write finding the path
replaced by one fails like any other write. The path is looked at with :func:`os.lstat` before it
is opened, and opened with ``O_NONBLOCK``, so a FIFO whose reader went away never blocks a call.

Examples:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> sink = ReportSink(folder / "reports.jsonl", on_failure="continue")
    >>> sink.probe()
    >>> sink.write('{"component": "x"}')
    True
    >>> (folder / "reports.jsonl").read_text().splitlines()
    ['{"component": "x"}']
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from ddo_hooks._text_files import special_file_kind
from ddo_hooks.errors import ReportSinkError

if sys.platform != "win32":  # Windows has no flock: no lock and no rotation there (see the module's docstring)
    import fcntl

__all__ = ["LOCK_WAIT_S", "MAX_FAILURES_KEPT", "ReportSink", "missing_folder"]

LOCK_WAIT_S = 2.0
"""The longest a write waits for another sink's lock on the file before it appends without it."""

_REOPENS = 100  # a file renamed under a sink this many times in a row is appended to as it is

MAX_FAILURES_KEPT = 100
"""How many sink failures are kept in memory (the newest); :attr:`ReportSink.failure_count` counts all."""

_log = logging.getLogger("ddo_hooks")

# O_NONBLOCK: opening a FIFO that has no reader fails at once instead of waiting for one.
# O_NOFOLLOW: a symbolic link put in the sink's place is never followed.
# Read and write (O_RDWR): the sink reads the last byte before it appends (see the module's docstring).
_FLAGS = os.O_APPEND | os.O_CREAT
_FLAGS |= getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NOFOLLOW", 0)


def missing_folder(path: Path) -> str | None:
    """Why a report file cannot be made at ``path`` because of its folder, or ``None`` when it can.

    The policy's ``report_sink`` and the demo's ``--report`` both refuse a missing folder with this
    sentence, rather than creating folders anywhere a typo points.
    """
    if not path.parent.exists():
        return f"the folder {path.parent} does not exist; create it first"
    return None


class ReportSink:
    """A JSON Lines file the reports are appended to.

    Args:
        path: The file (created when missing; its folder must exist).
        on_failure: ``"continue"`` or ``"raise"`` (the policy's ``report_sink_failure``).
        rotate_bytes: The size the file does not grow past: the line that would take it past goes to
            a new file, the old one renamed ``path.N`` (see the module's docstring). ``None`` (the
            default): :data:`~ddo_hooks.reports.sink_files.ROTATE_BYTES`.
    """

    def __init__(
        self, path: Path, *, on_failure: Literal["continue", "raise"], rotate_bytes: int | None = None
    ) -> None:
        from ddo_hooks.reports.sink_files import ROTATE_BYTES  # here: the CLI's --help imports this module

        self.path = path
        self.on_failure = on_failure
        self.rotate_bytes = ROTATE_BYTES if rotate_bytes is None else rotate_bytes
        self._rotation_failed = False  # logged once
        self.failures: collections.deque[str] = collections.deque(maxlen=MAX_FAILURES_KEPT)
        self.failure_count = 0
        self._lock = threading.Lock()
        self._cut = False  # the last write left part of its line in the file (known without reading it)

    def probe(self) -> None:
        """Check that the file can be opened for appending now, without writing to it.

        Raises:
            ReportSinkError: The folder is missing, the path is a symbolic link or not a regular
                file, the file cannot be opened for writing, or the disk holding it has no free block.
        """
        problem = missing_folder(self.path)
        if problem is not None:
            raise ReportSinkError(f"report_sink {str(self.path)!r}: {problem}")
        with self._lock, self._opened() as (fd, _):
            try:
                free = os.fstatvfs(fd).f_bavail
            except (OSError, AttributeError):  # no statvfs here: the first write tells
                return
            if free == 0:
                raise self._error("cannot be written", OSError(28, "the disk holding it has no free block"))

    def write(self, line: str) -> bool:
        """Append ``line`` and a newline, whole or not at all.

        Returns:
            Whether the line was written (``False``: it failed and ``on_failure`` is ``continue``).

        Raises:
            ReportSinkError: The write failed and ``on_failure`` is ``raise``.
        """
        try:
            self._append(line.encode("utf-8") + b"\n")
        except ReportSinkError as e:
            if self.on_failure == "raise":
                raise
            self.note(e)
            return False
        return True

    def note(self, error: ReportSinkError) -> None:
        """Keep a failure in :attr:`failures` and log the first.

        For a failed write nobody is told of: with ``continue``, or with ``raise`` where no call
        could raise it (a deferred ``after_call``).
        """
        with self._lock:
            self.failures.append(str(error))
            self.failure_count += 1
            first = self.failure_count == 1
        if first:
            _log.warning("%s (the call goes on; further failures are only counted in sink_failures)", error)

    def after_fork(self) -> None:
        """In a forked child: a lock another thread of the parent held at the fork is never released there."""
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _opened(self) -> Iterator[tuple[int, bool]]:
        """The file, opened for appending (a special file or a link is never opened), and whether it can be read."""
        try:
            self._check_regular(os.lstat(self.path).st_mode)
        except FileNotFoundError:
            pass  # created below
        except OSError as e:
            raise self._error("cannot be opened", e) from e
        try:
            fd, readable = self._open()
        except OSError as e:  # also a FIFO or a link put in its place since: ENXIO or ELOOP, never a wait
            raise (self._linked() if e.errno == errno.ELOOP else self._error("cannot be opened", e)) from e
        try:
            self._check_regular(os.fstat(fd).st_mode)
            yield fd, readable
        finally:
            os.close(fd)

    def _open(self) -> tuple[int, bool]:
        try:
            return os.open(self.path, os.O_RDWR | _FLAGS, 0o666), True
        except PermissionError:  # may append but not read: only this sink's own cut lines are known
            return os.open(self.path, os.O_WRONLY | _FLAGS, 0o666), False

    def _append(self, data: bytes) -> None:
        with self._lock:
            for attempt in range(_REOPENS):
                with self._opened() as (fd, readable):
                    checked = _take_lock(fd) and attempt < _REOPENS - 1  # under the lock: renamed, or to rotate
                    if checked and (not _still_named(fd, self.path) or self._rotated(fd, len(data))):
                        continue  # renamed away (by this sink or another): the line goes to the new file
                    self._write_line(fd, readable, data)
                    return

    def _rotated(self, fd: int, size: int) -> bool:
        """Rename the file to the next free ``path.N`` when ``size`` more bytes would take it past ``rotate_bytes``."""
        from ddo_hooks.reports.sink_files import rotated_name, rotated_numbers

        current = os.fstat(fd).st_size
        if current == 0 or current + size <= self.rotate_bytes:
            return False
        number = max(rotated_numbers(self.path), default=0) + 1
        while os.path.lexists(rotated_name(self.path, number)):  # never over a file of that name
            number += 1
        try:
            os.rename(self.path, rotated_name(self.path, number))
        except OSError as e:
            if not self._rotation_failed:
                self._rotation_failed = True
                _log.warning(
                    "report_sink %r cannot be rotated (%s); it grows past %s bytes, which the readers refuse: "
                    "let the process rename files in its folder",
                    str(self.path),
                    e.strerror or e,
                    f"{self.rotate_bytes:,}",
                )
            return False
        return True

    def _write_line(self, fd: int, readable: bool, data: bytes) -> None:
        mid_line = _ends_mid_line(fd) if readable else None  # a line cut short there, by any writer
        if mid_line is None:  # cannot be told: only this sink's own cut line is known
            mid_line = self._cut
        if mid_line:  # this one starts on a line of its own
            data = b"\n" + data
        try:
            written = os.write(fd, data)
        except OSError as e:
            raise self._error("cannot be written", e) from e
        if written != len(data):
            self._cut = written > 0
            cut = OSError(f"only {written} of {len(data)} bytes were written (is the disk full?); the cut line is left")
            raise self._error("cannot be written", cut)
        self._cut = False

    def _linked(self) -> ReportSinkError:
        real = os.path.realpath(self.path)
        return ReportSinkError(
            f"report_sink {str(self.path)!r} is a symbolic link (to {real!r}), which is never followed: anyone "
            f"who can write its folder could redirect the reports; set report_sink to {real!r} itself"
        )

    def _check_regular(self, mode: int) -> None:
        if stat.S_ISLNK(mode):
            raise self._linked()
        if not stat.S_ISREG(mode):
            what = "a directory" if stat.S_ISDIR(mode) else special_file_kind(mode)
            raise ReportSinkError(
                f"report_sink {str(self.path)!r} is {what}, not a regular file; point report_sink at a regular "
                "file (a missing one is created), or set it to null for no sink"
            )

    def _error(self, what: str, e: OSError) -> ReportSinkError:
        reason = e.strerror or str(e)
        return ReportSinkError(
            f"report_sink {str(self.path)!r} {what}: {reason}; free space or point report_sink at a writable file"
        )


def _ends_mid_line(fd: int) -> bool | None:
    """Whether the file's last byte is not a newline: a line cut short there, by any writer sharing the file.

    ``None`` when it cannot be told (a read that fails, or no ``os.pread`` on this system).
    """
    try:
        size = os.fstat(fd).st_size
        return size > 0 and os.pread(fd, 1, size - 1) not in (b"\n", b"")
    except (OSError, AttributeError):
        return None


def _take_lock(fd: int) -> bool:
    """Take an exclusive ``flock`` on ``fd`` (released when it is closed), waiting at most :data:`LOCK_WAIT_S`.

    ``False`` when it is not taken: held past the wait, no locks on this file system, no ``fcntl``.
    """
    if sys.platform == "win32":
        return False
    deadline, pause = time.monotonic() + LOCK_WAIT_S, 0.0002
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        except OSError:  # ENOLCK, EOPNOTSUPP: no locks here
            return False


def _still_named(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (not renamed away since it was opened)."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except OSError:
        return False
