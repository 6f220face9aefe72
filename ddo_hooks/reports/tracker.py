"""``MetricsTracker``: validated reports kept by component, in order.

A record holds a report of either shape: ddo_hooks' own, or DDO's (``diffusers-dynamic-offloader``'s
``DynamicOffloadMetrics``, validated by :mod:`ddo_hooks.reports.ddo`), each written as its own
``model_dump`` and read back by the rule of :func:`~ddo_hooks.reports.parse.report_shape`.

Examples:
    >>> from ddo_hooks import MetricsTracker, release_pytorch_host_cache
    >>> tracker = MetricsTracker()
    >>> report = release_pytorch_host_cache(phase="before_transformer")
    >>> tracker.record(report, component="host_cache_before_transformer")
    >>> tracker.components()
    ('host_cache_before_transformer',)
    >>> MetricsTracker.from_jsonl(tracker.to_jsonl()).reports() == tracker.reports()
    True
"""

from __future__ import annotations

import collections
import json
import os
import threading
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ddo_hooks._diagnostics import show_repr
from ddo_hooks.errors import InvalidArgumentError, ReportError
from ddo_hooks.ledger import LEDGER, Settles
from ddo_hooks.reports.atomic_file import replace_with_text
from ddo_hooks.reports.envelope import RecordEnvelope
from ddo_hooks.reports.json_lines import cut_line_warning, first_line, looks_like_a_path, text_lines
from ddo_hooks.reports.parse import ANY_REPORT_TYPES
from ddo_hooks.reports.records import (
    MAX_COMPONENT_LENGTH,
    Entry,
    RecordedReport,
    component_problem,
    entries_from_json,
    iter_entries,
    read_entries,
    read_reports,
    record_json,
    valid_component,
)

__all__ = [
    "MAX_COMPONENT_LENGTH",
    "MAX_RECORDS",
    "Entry",
    "MetricsTracker",
    "RecordedReport",
    "first_line",
    "iter_entries",
    "read_entries",
    "read_reports",
    "text_lines",
]

MAX_RECORDS = 100_000
"""The most records a tracker with a bound (``max_records``) or an attachment (``keep_reports``) keeps.

Each one is a pydantic object: an executed release report with its envelope took about 12 KB of
Python memory when measured (a no-op one about 4 KB), so the bound is about 1.2 GB. A longer
history belongs on disk, in the policy's ``report_sink``."""


class MetricsTracker:
    """Keeps validated reports (of either shape) by component, in the order they were recorded.

    Thread-safe. Serializes to JSON (one document) and JSON Lines (one
    ``{"component": ..., "report": ..., "envelope": ...}`` object per line; the envelope says
    where the report came from, see :mod:`ddo_hooks.reports.envelope`) and loads both back with
    validation.

    Args:
        max_records: Keep at most this many records, the newest (older ones are dropped and
            counted in :attr:`evicted`), from 0 to :data:`MAX_RECORDS`; ``None`` keeps every
            record. The tracker an attachment makes for itself keeps the policy's ``keep_reports``.

    Raises:
        InvalidArgumentError: ``max_records`` is not ``None`` or an int from 0 to :data:`MAX_RECORDS`.
    """

    def __init__(self, *, max_records: int | None = None) -> None:
        if max_records is not None and (
            isinstance(max_records, bool) or not isinstance(max_records, int) or not 0 <= max_records <= MAX_RECORDS
        ):
            raise InvalidArgumentError(
                f"max_records={show_repr(max_records)} must be None (keep every record) or an int from 0 to "
                f"{MAX_RECORDS:,}; keep fewer in memory, or keep them all with None"
            )
        self._lock = threading.Lock()
        LEDGER.write(self, settles=Settles(after_fork=MetricsTracker._new_lock))
        self._records: collections.deque[Entry] = collections.deque(maxlen=max_records)
        self.max_records = max_records
        self.evicted = 0
        """How many records were dropped to keep :attr:`max_records`."""

    def _new_lock(self) -> None:
        """In a forked child: another thread of the parent may have held the lock at the fork."""
        self._lock = threading.Lock()

    def record(self, report: BaseModel, *, component: str, envelope: RecordEnvelope | None = None) -> None:
        """Record one report under a component name.

        Args:
            report: A report model of either shape: ddo_hooks' (for example from
                :func:`release_pytorch_host_cache`) or DDO's own (``parse_report(metrics)``).
            component: Where it belongs, e.g. ``"host_cache_before_transformer"``: a letter or
                digit then up to 127 of letters, digits, ``_ . -``.
            envelope: Where and when it was recorded (attachments pass one; ``None`` for none).

        Raises:
            InvalidArgumentError: ``report`` is not a report model or ``component`` is malformed.
        """
        if not isinstance(report, ANY_REPORT_TYPES):
            raise InvalidArgumentError(
                f"record expects a report model (of either shape), got {type(report).__name__}; "
                "pass the report returned by release_pytorch_host_cache (or ddo_hooks.parse_report(data), which "
                "also reads DDO's own DynamicOffloadMetrics)"
            )
        if not valid_component(component):
            raise InvalidArgumentError(f"component={show_repr(component)} {component_problem(component)}")
        with self._lock:
            if self.max_records is not None and len(self._records) == self.max_records:
                self.evicted += 1
            self._records.append(Entry(component, report, envelope))

    def record_ddo_metrics(self, report: BaseModel, *, component: str, envelope: RecordEnvelope | None = None) -> None:
        """The old name of :meth:`record` ("DDO" names the other package); it warns, and goes in 0.2."""
        from ddo_hooks._moved import warn_old

        warn_old("MetricsTracker.record_ddo_metrics")
        self.record(report, component=component, envelope=envelope)

    def drain(self, *, run_id: str | None = None) -> list[Entry]:
        """Return every record, in order, and forget them (e.g. after writing them elsewhere).

        Args:
            run_id: Only the records of this run (an attachment's :attr:`~ddo_hooks.Attachment.run_id`);
                the others stay.
        """
        with self._lock:
            if run_id is None:
                drained = list(self._records)
                self._records.clear()
                return drained
            drained = [e for e in self._records if e.envelope is not None and e.envelope.run_id == run_id]
            if drained:
                kept = [e for e in self._records if e.envelope is None or e.envelope.run_id != run_id]
                self._records.clear()
                self._records.extend(kept)
            return drained

    def clear(self) -> None:
        """Forget every record."""
        self.drain()

    def records(self) -> list[RecordedReport]:
        """All ``(component, report)`` pairs in recording order."""
        with self._lock:
            return [(entry.component, entry.report) for entry in self._records]

    def entries(self) -> list[Entry]:
        """All records in recording order, with their envelopes."""
        with self._lock:
            return list(self._records)

    def reports(self, component: str | None = None) -> list[Any]:
        """The reports in recording order, all of them or one component's."""
        return [r for c, r in self.records() if component is None or c == component]

    def components(self) -> tuple[str, ...]:
        """Component names in order of first appearance."""
        return tuple(dict.fromkeys(c for c, _ in self.records()))

    def to_json(self) -> str:
        """One JSON document: ``{"records": [{"component": ..., "report": ...}, ...]}``."""
        return json.dumps({"records": [record_json(entry) for entry in self.entries()]}, indent=2)

    def to_jsonl(self) -> str:
        """JSON Lines: one ``{"component": ..., "report": ...}`` object per line."""
        return "".join(json.dumps(record_json(entry)) + "\n" for entry in self.entries())

    def write_jsonl(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_jsonl` to ``path`` and return the path.

        The file is replaced atomically (:func:`~ddo_hooks.reports.atomic_file.replace_with_text`):
        a failed write never leaves a truncated file where a valid one was. The temporary file
        beside it has a random name and is created exclusively, so a symbolic link planted in the
        folder never redirects the write into another file.

        Raises:
            NotRegularFile: ``path`` is a symbolic link, a FIFO, a device (``/dev/null``) or a folder:
                it is left as it was (an ``OSError``).
            OSError: The file could not be written (the target is left as it was).
        """
        return replace_with_text(path, self.to_jsonl())

    @classmethod
    def from_records(cls, records: Iterable[RecordedReport | Entry]) -> MetricsTracker:
        """A tracker holding ``records``: ``(component, report)`` pairs or entries (each validated as recorded)."""
        tracker = cls()
        for component, report, *envelope in records:
            tracker.record(report, component=component, envelope=envelope[0] if envelope else None)
        return tracker

    @classmethod
    def from_json(cls, text: str) -> MetricsTracker:
        """Load what :meth:`to_json` wrote, validating every report.

        Raises:
            ReportError: Not JSON, JSON past Python's limits (an integer of more than 4,300 digits,
                values nested too deeply; the line and column are named), not the expected shape, or
                an invalid report (the record's index and the field path are named). Given a file's
                path instead of its text, it says so.
        """
        _refuse_a_path(text, "from_json", "MetricsTracker.from_json(Path({path}).read_text(encoding='utf-8'))")
        return cls.from_records(entries_from_json(text))

    @classmethod
    def from_jsonl(cls, text: str) -> MetricsTracker:
        r"""Load what :meth:`to_jsonl` wrote, validating every line (blank lines are skipped).

        A line cut off mid-record, wherever it is (its writer crashed, or the disk filled: see
        :func:`~ddo_hooks.reports.json_lines.is_cut_line`), is left out with a warning naming it;
        any other bad line raises :class:`~ddo_hooks.errors.ReportError`.

        Raises:
            ReportError: A line is not JSON (and not a cut one), is JSON past Python's limits or is
                not a valid record; the message names the line. Given a file's path instead of its
                text (``"run.jsonl"``), it says to read the file with :meth:`read_jsonl`.

        Examples:
            >>> import warnings
            >>> from ddo_hooks import release_pytorch_host_cache
            >>> tracker = MetricsTracker()
            >>> tracker.record(release_pytorch_host_cache(phase="after_call"), component="c")
            >>> line = tracker.to_jsonl()
            >>> with warnings.catch_warnings(record=True) as caught:
            ...     warnings.simplefilter("always")
            ...     read = MetricsTracker.from_jsonl(line + line[:30] + "\n" + line)
            >>> len(read.entries()), str(caught[0].message)[:36]
            (2, '<jsonl>:2: the line is cut off (not ')
        """
        _refuse_a_path(text, "from_jsonl", "MetricsTracker.read_jsonl({path})")
        cut: list[int] = []
        tracker = cls.from_records(iter_entries(text, on_cut_line=cut.append))
        for number in cut:
            warnings.warn(cut_line_warning("<jsonl>", number), stacklevel=2)
        return tracker

    @classmethod
    def read_jsonl(cls, path: str | os.PathLike[str]) -> MetricsTracker:
        """Load the file that :meth:`write_jsonl` wrote, validating every line: :meth:`from_jsonl` of a file.

        The files a report sink rotated away from ``path`` (``path.1``, ``path.2``, ...: see
        :mod:`~ddo_hooks.reports.sink_files`) are read first, oldest first, so that a sink reads whole.
        A file is read whatever size it says (``/proc`` files say 0). A file without a record (empty,
        blank lines, what a sink holds before its first whole write) is an empty tracker. A line cut
        off mid-record is left out with a warning that names ``file:line``, as :meth:`from_jsonl` does.

        Raises:
            ReportError: The file is missing, not a regular file, larger than 64 MiB, binary or not
                UTF-8, is JSON Lines text rather than a path (read text with :meth:`from_jsonl`),
                holds another form of report file (read it with
                :func:`~ddo_hooks.reports.files.load_report_file`), or a line is not a valid record:
                the message says ``file:line:col: key.path: problem``.

        Examples:
            >>> import pathlib, tempfile
            >>> from ddo_hooks import release_pytorch_host_cache
            >>> tracker = MetricsTracker()
            >>> tracker.record(release_pytorch_host_cache(phase="after_call"), component="c")
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     path = tracker.write_jsonl(pathlib.Path(folder) / "run.jsonl")
            ...     MetricsTracker.read_jsonl(path).reports() == tracker.reports()
            True
        """
        from ddo_hooks.reports.sink_files import sink_files

        tracker = cls()
        for file in sink_files(path):
            for entry in _file_entries(file):
                tracker.record(entry.report, component=entry.component, envelope=entry.envelope)
        return tracker


def _file_entries(path: Path) -> Iterator[Entry]:
    """The records of one JSON Lines file of records, a line cut off left out with a warning (``read_jsonl``)."""
    from ddo_hooks.reports.files import open_report_file  # it reads trackers: imported when used

    opened = open_report_file(path, cut_lines=True, empty_ok=True)  # empty: what write_jsonl writes of no records
    if opened.form != "JSON Lines":
        raise ReportError(
            f"{opened.path}: holds {opened.form}, not JSON Lines of records (as write_jsonl writes them); read "
            "it with ddo_hooks.reports.files.load_report_file(path), which reads every form of report file"
        )
    yield from opened.entries
    for warning in opened.warnings:
        warnings.warn(warning, stacklevel=3)


def _refuse_a_path(text: object, method: str, reader: str) -> None:
    """Refuse a file's path given where its text was expected, saying how to read the file."""
    if isinstance(text, os.PathLike) or (isinstance(text, str) and looks_like_a_path(text)):
        path = os.fspath(text).strip()
        raise ReportError(
            f"{method} reads JSON text, and {path!r} looks like a file's path; read the file with "
            + reader.format(path=repr(path))
        )
