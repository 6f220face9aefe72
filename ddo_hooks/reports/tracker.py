"""``MetricsTracker``: validated DDO reports kept by component, in order.

A record holds a report of either shape: ddo_hooks' own, or DDO's (``diffusers-dynamic-offloader``'s
``DynamicOffloadMetrics``, validated by :mod:`ddo_hooks.reports.ddo`), each written as its own
``model_dump`` and read back by the rule of :func:`~ddo_hooks.reports.parse.report_shape`.

Examples:
    >>> from ddo_hooks import MetricsTracker, release_pytorch_host_cache
    >>> tracker = MetricsTracker()
    >>> report = release_pytorch_host_cache(phase="before_transformer")
    >>> tracker.record_ddo_metrics(report, component="host_cache_before_transformer")
    >>> tracker.components()
    ('host_cache_before_transformer',)
    >>> MetricsTracker.from_jsonl(tracker.to_jsonl()).reports() == tracker.reports()
    True
"""

from __future__ import annotations

import collections
import json
import os
import re
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

from ddo_hooks._diagnostics import json_error_sentence, show_repr, show_value
from ddo_hooks.errors import InvalidArgumentError, ReportError
from ddo_hooks.reports.atomic_file import replace_with_text
from ddo_hooks.reports.base import FROM_CHECKED_JSON
from ddo_hooks.reports.envelope import RecordEnvelope, ReportRecord
from ddo_hooks.reports.json_lines import beyond_json_limits, cut_line_warning, first_line, is_cut_line, text_lines
from ddo_hooks.reports.parse import ANY_REPORT_TYPES, parse_report

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

MAX_COMPONENT_LENGTH = 128
"""The longest component name."""

_COMPONENT_RE = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{MAX_COMPONENT_LENGTH - 1}}}$")

MAX_RECORDS = 100_000
"""The most records a tracker with a bound (``max_records``) or an attachment (``keep_reports``) keeps.

Each one is a pydantic object: an executed release report with its envelope took about 12 KB of
Python memory when measured (a no-op one about 4 KB), so the bound is about 1.2 GB. A longer
history belongs on disk, in the policy's ``report_sink``."""

RecordedReport = tuple[str, Any]
"""A ``(component, report)`` pair, in recording order."""


class Entry(NamedTuple):
    """A record: the component, the report and where it came from (``None`` in files without envelopes)."""

    component: str
    report: Any
    envelope: RecordEnvelope | None = None


_TRACKERS: weakref.WeakSet[MetricsTracker] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for tracker in list(_TRACKERS):  # another thread of the parent may have held the lock at the fork
        tracker._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class MetricsTracker:
    """Keeps validated DDO reports by component, in the order they were recorded.

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
        _TRACKERS.add(self)
        self._records: collections.deque[Entry] = collections.deque(maxlen=max_records)
        self.max_records = max_records
        self.evicted = 0
        """How many records were dropped to keep :attr:`max_records`."""

    def record_ddo_metrics(self, report: BaseModel, *, component: str, envelope: RecordEnvelope | None = None) -> None:
        """Record one report under a component name.

        Args:
            report: A report model of either shape: ddo_hooks' (for example from
                :func:`release_pytorch_host_cache`) or DDO's own (``parse_report(metrics)``).
            component: Where it belongs, e.g. ``"host_cache_before_transformer"``: a letter or
                digit then up to 127 of letters, digits, ``_ . -``.
            envelope: Where and when it was recorded (attachments pass one; ``None`` for none).

        Raises:
            InvalidArgumentError: ``report`` is not a DDO report or ``component`` is malformed.
        """
        if not isinstance(report, ANY_REPORT_TYPES):
            raise InvalidArgumentError(
                f"record_ddo_metrics expects a DDO report model, got {type(report).__name__}; "
                "pass the report returned by release_pytorch_host_cache (or ddo_hooks.parse_report(data), which "
                "also reads DDO's own DynamicOffloadMetrics)"
            )
        if not _valid_component(component):
            raise InvalidArgumentError(f"component={show_repr(component)} {_component_problem(component)}")
        with self._lock:
            if self.max_records is not None and len(self._records) == self.max_records:
                self.evicted += 1
            self._records.append(Entry(component, report, envelope))

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
        return json.dumps({"records": [_record_json(entry) for entry in self.entries()]}, indent=2)

    def to_jsonl(self) -> str:
        """JSON Lines: one ``{"component": ..., "report": ...}`` object per line."""
        return "".join(json.dumps(_record_json(entry)) + "\n" for entry in self.entries())

    def write_jsonl(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_jsonl` to ``path`` and return the path.

        The file is replaced atomically (:func:`~ddo_hooks.reports.atomic_file.replace_with_text`):
        a failed write never leaves a truncated file where a valid one was. The temporary file
        beside it has a random name and is created exclusively, so a symbolic link planted in the
        folder never redirects the write into another file; a ``path`` that is a symbolic link is
        itself replaced, and the file it pointed to is left as it was.

        Raises:
            OSError: The file could not be written (the target is left as it was).
        """
        return replace_with_text(path, self.to_jsonl())

    @classmethod
    def from_records(cls, records: Iterable[RecordedReport | Entry]) -> MetricsTracker:
        """A tracker holding ``records``: ``(component, report)`` pairs or entries (each validated as recorded)."""
        tracker = cls()
        for component, report, *envelope in records:
            tracker.record_ddo_metrics(report, component=component, envelope=envelope[0] if envelope else None)
        return tracker

    @classmethod
    def from_json(cls, text: str) -> MetricsTracker:
        """Load what :meth:`to_json` wrote, validating every report.

        Raises:
            ReportError: Not JSON, JSON past Python's limits (an integer of more than 4,300 digits,
                values nested too deeply; the line and column are named), not the expected shape, or
                an invalid report (the record's index and the field path are named).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ReportError(f"not JSON: line {e.lineno}, column {e.colno}: {json_error_sentence(e)}") from e
        except (ValueError, RecursionError) as e:  # past one of Python's limits
            row, column, sentence = beyond_json_limits(text, e)
            raise ReportError(f"line {row}, column {column}: {sentence}") from e
        if not isinstance(data, dict) or not isinstance(data.get("records"), list):
            raise ReportError('expected a JSON object {"records": [...]}')
        return cls.from_records(_record_from_json(item, f"records[{i}]") for i, item in enumerate(data["records"]))

    @classmethod
    def from_jsonl(cls, text: str) -> MetricsTracker:
        r"""Load what :meth:`to_jsonl` wrote, validating every line (blank lines are skipped).

        A line cut off mid-record, wherever it is (its writer crashed, or the disk filled: see
        :func:`~ddo_hooks.reports.json_lines.is_cut_line`), is left out with a warning naming it;
        any other bad line raises :class:`~ddo_hooks.errors.ReportError`.

        Raises:
            ReportError: A line is not JSON (and not a cut one), is JSON past Python's limits or is
                not a valid record; the message names the line.

        Examples:
            >>> import warnings
            >>> from ddo_hooks import release_pytorch_host_cache
            >>> tracker = MetricsTracker()
            >>> tracker.record_ddo_metrics(release_pytorch_host_cache(phase="after_call"), component="c")
            >>> line = tracker.to_jsonl()
            >>> with warnings.catch_warnings(record=True) as caught:
            ...     warnings.simplefilter("always")
            ...     read = MetricsTracker.from_jsonl(line + line[:30] + "\n" + line)
            >>> len(read.entries()), str(caught[0].message)[:36]
            (2, '<jsonl>:2: the line is cut off (not ')
        """
        cut: list[int] = []
        tracker = cls.from_records(iter_entries(text, on_cut_line=cut.append))
        for number in cut:
            warnings.warn(cut_line_warning("<jsonl>", number), stacklevel=2)
        return tracker


def _valid_component(component: object) -> bool:
    return isinstance(component, str) and _COMPONENT_RE.fullmatch(component) is not None


def _component_problem(component: object) -> str:
    """What is wrong with a component name, and the rule (the real limit: 128 characters)."""
    rule = (
        "must be a non-empty name of letters, digits, '_', '.', '-', starting with a letter or digit, "
        f"at most {MAX_COMPONENT_LENGTH} characters (e.g. 'host_cache_before_transformer')"
    )
    if isinstance(component, str) and len(component) > MAX_COMPONENT_LENGTH:
        return f"{rule}; it has {len(component):,} characters"
    return rule


def _record_json(entry: Entry) -> dict[str, Any]:
    record = {"component": entry.component, "report": entry.report.model_dump(mode="json")}
    if entry.envelope is not None:
        record["envelope"] = entry.envelope.model_dump(mode="json")
    return record


RECORD_KEYS = ({"component", "report"}, {"component", "report", "envelope"})
"""The keys a record may have (records written before envelopes existed have no ``envelope``)."""


def _record_from_json(item: Any, where: str) -> Entry:
    if not isinstance(item, dict) or set(item) not in RECORD_KEYS:
        raise ReportError(f"{where}: expected an object with 'component', 'report' and (optionally) 'envelope'")
    if not _valid_component(item["component"]):
        component = item["component"]
        problem = _component_problem(component).removeprefix("must be ")
        raise ReportError(f"{where}.component: {show_value(component)} is not a component name: it must be {problem}")
    try:
        report = parse_report(item["report"])
    except ReportError as e:
        raise ReportError(f"{where}.report: {e}") from e
    envelope = None
    if item.get("envelope") is not None:
        try:
            envelope = RecordEnvelope.model_validate(item["envelope"])
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors(include_url=False))
            raise ReportError(f"{where}.envelope: not a valid record envelope: {problems}") from e
    return Entry(item["component"], report, envelope)


def read_reports(text: str) -> list[RecordedReport]:
    """Parse JSON Lines of ``{"component", "report"}`` records, validating each.

    A line cut off mid-record is an error here, as any line that is not JSON;
    :meth:`MetricsTracker.from_jsonl` leaves it out with a warning.

    Raises:
        ReportError: A line is not JSON, is JSON past Python's limits (an integer of more than
            4,300 digits, values nested too deeply) or is not a valid record; the message names
            the line (and the column, for JSON that cannot be read).
    """
    return [(entry.component, entry.report) for entry in read_entries(text)]


def read_entries(text: str) -> list[Entry]:
    """Parse JSON Lines of records, with their envelopes, validating each (see :func:`read_reports`)."""
    return list(iter_entries(text))


def iter_entries(text: str, *, on_cut_line: Callable[[int], None] | None = None) -> Iterator[Entry]:
    r"""Each record of JSON Lines, validated when it is reached (see :func:`read_reports`).

    A caller may keep what it needs of each record and let the rest go. A line is validated as a
    :class:`~ddo_hooks.reports.envelope.ReportRecord` straight from its JSON text by pydantic_core,
    with :data:`~ddo_hooks.reports.base.FROM_CHECKED_JSON`; a line that this fast path does not
    accept is read again exactly as before (``json.loads``, then each check in turn), which accepts
    it or raises the error that names its line. The fast parser accepts no text that ``json.loads``
    refuses and refuses more (a lone surrogate, an integer of more than 4,300 digits, nesting deeper
    than 200), so every line is accepted or refused as before (``tests/test_fuzz.py`` compares the two).

    Args:
        text: JSON Lines of records.
        on_cut_line: Called with the number of each line cut off mid-record
            (:func:`~ddo_hooks.reports.json_lines.is_cut_line`), which is then left out; ``None``
            (the default): such a line is an error, as any other line that is not JSON.

    Raises:
        ReportError: A line is not JSON, is JSON past Python's limits or is not a valid record;
            the message names the line.

    Examples:
        >>> from ddo_hooks import release_pytorch_host_cache
        >>> tracker = MetricsTracker()
        >>> tracker.record_ddo_metrics(release_pytorch_host_cache(phase="after_call"), component="c")
        >>> [entry.component for entry in iter_entries(tracker.to_jsonl() + "\n" + tracker.to_jsonl())]
        ['c', 'c']
    """
    for number, line in enumerate(text_lines(text), start=1):
        if not line.strip():
            continue
        entry = _checked_entry(line)
        if entry is None:
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                if on_cut_line is not None and is_cut_line(line):
                    on_cut_line(number)
                    continue
                raise ReportError(f"line {number}, column {e.colno}: not JSON: {json_error_sentence(e)}") from e
            except (ValueError, RecursionError) as e:  # past one of Python's limits
                _, column, sentence = beyond_json_limits(line, e)
                raise ReportError(f"line {number}, column {column}: {sentence}") from e
            entry = _record_from_json(item, f"line {number}")
        yield entry


def _checked_entry(line: str) -> Entry | None:
    """The record of a line as :func:`_record_from_json` would read it, or ``None`` for the slow path to say why not.

    One pass of pydantic_core over the JSON text: strict JSON mode takes what strict Python mode
    takes from ``json.loads`` here, since every field a JSON string or array could fill laxly (the
    timestamp, the tuples of names) is lax in both.
    """
    try:
        record = ReportRecord.model_validate_json(line, context=FROM_CHECKED_JSON)
    except ValueError:  # ValidationError, for JSON it cannot read as for a record it refuses
        return None
    return Entry(record.component, record.report, record.envelope)
