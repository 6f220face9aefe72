"""The policy's report sink: a JSON Lines file that each report is appended to, one whole line at a time.

A line is written with one ``write`` to the file opened for appending; if the write fails or is
short (a full disk), the file is cut back to its size before the write, so the file never holds
a partial line and the next report is not appended onto a fragment. A failure is a
:class:`~ddo_hooks.errors.ReportSinkError` that names the file and the fix. The policy's
``report_sink_failure`` decides what it does: ``raise`` ends the pipeline call with it;
``continue`` (the default) keeps the call going, keeps the failure in :attr:`ReportSink.failures`
(the last 100) and logs it once, so that a failed log write never costs the user the image.

The sink is a regular file (a missing one is created). A FIFO, a directory, a device (``/dev/null``,
``/dev/stdout`` when it is a terminal or a pipe) or a socket is refused: :meth:`ReportSink.probe`
refuses it at attach, and a write finding the path replaced by one fails like any other write.
The path is looked at with :func:`os.stat` before it is opened, and opened with ``O_NONBLOCK``, so
a FIFO whose reader went away never blocks a call; and only a regular file can be cut back after
a failed write, which is what keeps every line whole.

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
import logging
import os
import stat
import threading
from pathlib import Path
from typing import Literal

from ddo_hooks._diagnostics import special_file_kind
from ddo_hooks.errors import ReportSinkError

__all__ = ["MAX_FAILURES_KEPT", "ReportSink", "missing_folder"]

MAX_FAILURES_KEPT = 100
"""How many sink failures are kept in memory (the newest); :attr:`ReportSink.failure_count` counts all."""

_log = logging.getLogger("ddo_hooks")

# O_NONBLOCK: opening a FIFO that has no reader fails at once instead of waiting for one.
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)


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
    """

    def __init__(self, path: Path, *, on_failure: Literal["continue", "raise"]) -> None:
        self.path = path
        self.on_failure = on_failure
        self.failures: collections.deque[str] = collections.deque(maxlen=MAX_FAILURES_KEPT)
        self.failure_count = 0
        self._lock = threading.Lock()

    def probe(self) -> None:
        """Check that a line can be written now: append a newline, then cut the file back.

        Raises:
            ReportSinkError: The folder is missing, the path is not a regular file, or the file
                cannot be opened or written.
        """
        problem = missing_folder(self.path)
        if problem is not None:
            raise ReportSinkError(f"report_sink {str(self.path)!r}: {problem}")
        self._append(b"\n", keep=False)

    def write(self, line: str) -> bool:
        """Append ``line`` and a newline, whole or not at all.

        Returns:
            Whether the line was written (``False``: it failed and ``on_failure`` is ``continue``).

        Raises:
            ReportSinkError: The write failed and ``on_failure`` is ``raise``.
        """
        try:
            self._append(line.encode("utf-8") + b"\n", keep=True)
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

    def _append(self, data: bytes, *, keep: bool) -> None:
        with self._lock:
            try:
                self._check_regular(os.stat(self.path).st_mode)  # a special file is never opened
            except FileNotFoundError:
                pass  # created below
            except OSError as e:
                raise self._error("cannot be opened", e) from e
            try:
                fd = os.open(self.path, _FLAGS, 0o666)
            except OSError as e:  # also a FIFO put in its place since: ENXIO, never a wait for a reader
                raise self._error("cannot be opened", e) from e
            try:
                info = os.fstat(fd)
                self._check_regular(info.st_mode)
                size = info.st_size
                try:
                    written = os.write(fd, data)
                    if written != len(data):
                        raise OSError(f"only {written} of {len(data)} bytes were written (is the disk full?)")
                except OSError as e:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)  # never leave a partial line
                    raise self._error("cannot be written", e) from e
                if not keep:
                    os.ftruncate(fd, size)
            finally:
                os.close(fd)

    def _check_regular(self, mode: int) -> None:
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
