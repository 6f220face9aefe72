"""Reading a file of reports, and saying exactly where an invalid one is wrong.

A report file is JSON Lines of ``{component, report}`` records (as ``ddo-hooks demo`` and
:meth:`~ddo_hooks.reports.tracker.MetricsTracker.to_jsonl` write), JSON Lines of bare reports
(one report per line, of either shape: DDO 0.1.0rc2 writes no JSON Lines itself, so a DDO host
writes each ``metrics.as_dict()`` as a line), a tracker JSON document
(:meth:`~ddo_hooks.reports.tracker.MetricsTracker.to_json`) or one bare report (of either shape).
The form is told from the first line (past any line cut off mid-record before it): a record has
``component`` and ``report``, a bare report ``route``. A line of JSON Lines cut off mid-record,
wherever it is, is an error, or, with ``cut_lines=True``, left out with a warning that names it
(:mod:`~ddo_hooks.reports.json_lines`). A file is read for what it holds, never judged by its
size (``/proc`` files say 0), and a file without a whole line is told as what it is: empty, blank
lines, or only lines cut off (what a report sink holds when its first write met a full disk); text
given where the path was expected names the function that reads text. When it does not validate,
:func:`~ddo_hooks.reports.file_problems.diagnose_report_file` names the place as
``file:line:col: key.path: problem``.

Examples:
    >>> text = '{"component": "x", "report": {"schema_version": 2}}'
    >>> print(diagnose_report_file("r.jsonl", text, "JSON Lines"))  # doctest: +ELLIPSIS
    r.jsonl:1:20: report.route: missing: every report names its route (... lists them)
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ddo_hooks._diagnostics import json_error_sentence, show_value
from ddo_hooks._moved import warn_renamed
from ddo_hooks._text_files import read_text_file
from ddo_hooks.errors import ReportError
from ddo_hooks.reports import REPORT_FILE_FORMS
from ddo_hooks.reports.file_problems import diagnose_report_file, json_positions
from ddo_hooks.reports.json_lines import beyond_json_limits, cut_line_warning, first_line, is_cut_line, text_lines
from ddo_hooks.reports.parse import parse_report
from ddo_hooks.reports.records import Entry, entries_from_json, iter_entries

__all__ = [
    "MAX_REPORT_FILE_BYTES",
    "REPORT_FILE_FORMS",
    "OpenReportFile",
    "ReportFile",
    "diagnose_report_file",
    "iter_report_lines",
    "json_positions",
    "load_report_file",
    "open_report_file",
]

MAX_REPORT_FILE_BYTES = 64 * 1024 * 1024
"""The largest report file read: 64 MiB (some 30,000 reports), checked before reading."""


# -- reading report files --------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFile:
    """A validated report file: its form and its records, in order.

    Attributes:
        path: The file, as given.
        form: ``"JSON Lines"``, ``"JSON Lines of bare reports"``, ``"tracker JSON"`` or ``"report JSON"``.
        entries: Each record's component (``None`` for a bare report), report and envelope
            (``None`` for files written before envelopes existed, and for a bare report).
        warnings: What was left out and why: each line cut off mid-record, when that was allowed.
    """

    path: str
    form: str
    entries: list[Entry]
    warnings: tuple[str, ...] = ()

    @property
    def records(self) -> list[tuple[str | None, Any]]:
        """``(component, report)`` pairs, in order."""
        return [(entry.component, entry.report) for entry in self.entries]


def _read_text(source: str) -> str:
    return read_text_file(
        source,
        kind="report",
        error=ReportError,
        max_bytes=MAX_REPORT_FILE_BYTES,
        directory_fix="pass a .jsonl or .json file",
        binary_fix=f"expected {REPORT_FILE_FORMS}",
        encoding_fix="save the reports as UTF-8 JSON",
        text_fix="pass the file's path, or read JSON Lines text with MetricsTracker.from_jsonl(text) (one report: "
        "parse_report(text))",
    )


def _no_report(source: str, text: str, cut: list[int]) -> str:
    """Why a file without a whole line of JSON holds no report: empty, blank lines, or only lines cut off (``cut``)."""
    if not text:
        return f"{source}: is empty; expected {REPORT_FILE_FORMS}"
    if not cut:
        return (
            f"{source}: holds only blank lines, no report (a report sink whose first write was cut short, e.g. by a "
            f"full disk, holds this); expected {REPORT_FILE_FORMS}"
        )
    lines = f"line {cut[0]} is" if len(cut) == 1 else f"lines {', '.join(map(str, cut))} are"
    told = (
        f"{lines} cut off (its writer stopped mid-line, e.g. in a crash or on a full disk), and the file holds no "
        f"other line, so no report was written whole; expected {REPORT_FILE_FORMS}"
    )
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return f"{source}:{e.lineno}:{e.colno}: not JSON: {json_error_sentence(e)}: {told}"
    except (ValueError, RecursionError):
        pass
    return f"{source}: {told}"  # never reached: a text of cut lines is no JSON


def _detect(source: str, text: str) -> tuple[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        try:  # told from the first whole line (a line cut off is left out or refused as the records are read)
            first = json.loads(first_line(text, past_cut_lines=True) or "")
        except json.JSONDecodeError:
            where = f"{source}:{e.lineno}:{e.colno}"
            raise ReportError(f"{where}: not JSON: {json_error_sentence(e)}; expected {REPORT_FILE_FORMS}") from e
        return ("JSON Lines of bare reports" if _bare_report(first) else "JSON Lines"), None
    if isinstance(data, dict) and "records" in data:
        return "tracker JSON", data
    if isinstance(data, dict) and {"component", "report"} & set(data):
        return "JSON Lines", data
    if not isinstance(data, dict):
        raise ReportError(
            f"{source}:1:1: a JSON {type(data).__name__} is not a report file; expected {REPORT_FILE_FORMS}"
        )
    if {"observation", "metrics"} <= set(data) and "route" not in data:
        raise ReportError(
            f"{source}: this is a record of DDO's metrics journal (observation {show_value(data['observation'])}), "
            "not a report: ddo_hooks reads the report under its 'metrics' (a DynamicOffloadMetrics.as_dict()); "
            f"expected {REPORT_FILE_FORMS}"
        )
    if "$schema" in data:
        raise ReportError(
            f"{source}: this is a JSON Schema, not a report file; a schema validates reports (e.g. with "
            f"check-jsonschema), and expected here is {REPORT_FILE_FORMS}"
        )
    return "report JSON", data


def _bare_report(item: Any) -> bool:
    """Whether the first line of JSON Lines is a bare report (it names a route), not a record."""
    return isinstance(item, dict) and not {"component", "report"} & set(item) and "route" in item


def iter_report_lines(text: str, *, on_cut_line: Callable[[int], None] | None = None) -> Iterator[Entry]:
    r"""Each line of JSON Lines of bare reports (either shape, each read by its own keys), validated when reached.

    Args:
        text: JSON Lines of bare reports.
        on_cut_line: As for :func:`~ddo_hooks.reports.records.iter_entries`: called with the number
            of each line cut off mid-record, which is then left out (``None``: such a line is an error).

    Raises:
        ReportError: A line is not a valid report; the message names the line and the shape it was read as
            (or, for JSON past Python's limits, the column and the limit).

    Examples:
        >>> line = ('{"schema_version": 1, "route": "pytorch_host_cache_release", '
        ...         '"configuration": {"enabled": false}, "setup": {"host_cache_release": '
        ...         '{"phase": "", "status": "disabled", "released": false, "elapsed_seconds": 0.0}}, '
        ...         '"runtime": {}}')
        >>> [type(entry.report).__name__ for entry in iter_report_lines(line + "\n" + line)]
        ['DDOHostCacheReleaseReport', 'DDOHostCacheReleaseReport']
    """
    for number, line in enumerate(text_lines(text), start=1):
        if not line.strip():
            continue
        try:
            report = parse_report(line)
        except ReportError as e:
            if on_cut_line is not None and is_cut_line(line):
                on_cut_line(number)
                continue
            _raise_past_limits(number, line)
            raise ReportError(f"line {number}: {e}") from e
        yield Entry(None, report)  # type: ignore[arg-type]  # a file without envelopes names no component


def _raise_past_limits(number: int, line: str) -> None:
    """Raise the error that names line ``number`` when Python's JSON reader refuses it for one of its limits."""
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return
    except (ValueError, RecursionError) as e:
        _, column, sentence = beyond_json_limits(line, e)
        raise ReportError(f"line {number}, column {column}: {sentence}") from e


def load_report_file(
    path: str | os.PathLike[str], *, cut_lines: bool = False, cut_last_line: bool | None = None
) -> ReportFile:
    """Read and validate a report file: JSON Lines, a tracker JSON document or one bare report.

    Args:
        path: The file.
        cut_lines: Leave out each line of JSON Lines cut off mid-record, wherever it is (its writer
            crashed, or the disk filled: :func:`~ddo_hooks.reports.json_lines.is_cut_line`), read the
            other records, and name each such line in ``warnings``; otherwise such a line is an error.
            A line that is complete JSON but not a valid record is an error either way.
        cut_last_line: The old name of ``cut_lines`` (it warns), from when only a last line was left out.

    Returns:
        The :class:`ReportFile`.

    Raises:
        ReportError: The file is missing, a directory or another non-regular file (a FIFO, a
            device), larger than :data:`MAX_REPORT_FILE_BYTES`, binary, not UTF-8, empty, of
            only blank lines or only lines cut off (each named so), JSON Lines text given for
            its path, not JSON, JSON past Python's limits (an integer of more than 4,300 digits,
            values nested too deeply), or holds an invalid record; the message says
            ``file:line:col: key.path: problem``.
    """
    if cut_last_line is not None:
        cut_lines = _old_cut_last_line("load_report_file", cut_last_line)
    opened = open_report_file(path, cut_lines=cut_lines)
    entries = list(opened.entries)
    return ReportFile(opened.path, opened.form, entries, tuple(opened.warnings))


def _old_cut_last_line(function: str, value: bool) -> bool:
    why = "a line cut off is left out wherever it is, not only the last"
    warn_renamed(f"{function}(cut_last_line=...)", f"{function}(cut_lines=...)", why)
    return value


@dataclass(frozen=True)
class OpenReportFile:
    """A report file whose text is read and checked, and whose records are validated one by one as they are read.

    What :func:`load_report_file` returns, without a list of every record: a command that keeps
    only a little of each record (``ddo-hooks summarize``) holds one validated record at a time.

    Attributes:
        path: The file, as given.
        form: ``"JSON Lines"``, ``"JSON Lines of bare reports"``, ``"tracker JSON"`` or ``"report JSON"``.
        entries: The records, each validated when it is reached (read them once); an invalid one
            raises the :class:`~ddo_hooks.errors.ReportError` that :func:`load_report_file` raises.
        warnings: What was left out and why: each line cut off mid-record, when that was allowed,
            added when ``entries`` passes it (for JSON Lines), so the list is whole once ``entries`` is.
    """

    path: str
    form: str
    entries: Iterator[Entry]
    warnings: list[str] = field(default_factory=list)


def open_report_file(
    path: str | os.PathLike[str],
    *,
    cut_lines: bool = False,
    cut_last_line: bool | None = None,
    empty_ok: bool = False,
) -> OpenReportFile:
    """Read a report file's text and check its form now; validate its records as they are read.

    Arguments and errors as for :func:`load_report_file`: the errors of the text and its form
    are raised here, those of a JSON Lines record when ``entries`` reaches it (those of the other
    forms, small documents, here).

    Args:
        path: The file.
        cut_lines: As for :func:`load_report_file`.
        cut_last_line: As for :func:`load_report_file`.
        empty_ok: A file without a whole line (empty, blank lines, or only lines cut off: what a
            report sink holds before its first whole write) opens as JSON Lines without records,
            each cut line named in ``warnings`` (with ``cut_lines``); ``False`` (the default): it is
            an error that says which of the three it is.
    """
    if cut_last_line is not None:
        cut_lines = _old_cut_last_line("open_report_file", cut_last_line)
    source = os.fspath(path)
    text = _read_text(source)
    warnings: list[str] = []
    if first_line(text, past_cut_lines=True) is None:  # no line holds a whole JSON value
        cut_off = [number for number, line in enumerate(text_lines(text), start=1) if line.strip()]
        if not empty_ok or (cut_off and not cut_lines):
            raise ReportError(_no_report(source, text, cut_off))
        return OpenReportFile(source, "JSON Lines", iter(()), [cut_line_warning(source, n) for n in cut_off])
    with _read_errors(source, text, None):
        form, data = _detect(source, text)
    if form in ("JSON Lines", "JSON Lines of bare reports"):
        cut = (lambda number: warnings.append(cut_line_warning(source, number))) if cut_lines else None
        read = iter_entries if form == "JSON Lines" else iter_report_lines
        located = _located(source, text, read(text, on_cut_line=cut), form, cut_lines)
        return OpenReportFile(source, form, _some(source, located), warnings)
    with _read_errors(source, text, form):
        bare = form != "tracker JSON"
        entries = [Entry(None, parse_report(data))] if bare else entries_from_json(text)  # type: ignore[arg-type]  # bare: no component
    return OpenReportFile(source, form, _some(source, entries), warnings)


def _located(source: str, text: str, entries: Iterator[Entry], form: str, cut_lines: bool) -> Iterator[Entry]:
    with _read_errors(source, text, form, cut_lines):
        yield from entries


def _some(source: str, entries: Iterable[Entry]) -> Iterator[Entry]:
    """``entries``, then an error when there were none."""
    count = 0
    for count, entry in enumerate(entries, start=1):  # noqa: B007 (the count is read below)
        yield entry
    if not count:
        raise ReportError(f"{source}: holds no reports; expected {REPORT_FILE_FORMS}")


@contextlib.contextmanager
def _read_errors(source: str, text: str, form: str | None, cut_lines: bool = False) -> Iterator[None]:
    """Say where an invalid record of a file of ``form`` is (``file:line:col``), or what JSON cannot be read."""
    try:
        try:
            yield
        except ReportError as e:
            if form is None:
                raise
            raise ReportError(diagnose_report_file(source, text, form, cut_lines=cut_lines) or f"{source}: {e}") from e
    except (RecursionError, ValueError) as e:  # nested too deeply, or a number too long to read
        if isinstance(e, ReportError):
            raise
        line, column, sentence = beyond_json_limits(text, e)
        raise ReportError(f"{source}:{line}:{column}: {sentence}") from e
