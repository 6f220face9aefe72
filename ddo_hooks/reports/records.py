"""The records of a report file: a report under its component name, with the envelope saying where it came from.

:class:`~ddo_hooks.reports.tracker.MetricsTracker` keeps them; this module reads them from JSON
Lines text (:func:`iter_entries`, :func:`read_entries`, :func:`read_reports`), each line validated,
and writes one as JSON. :mod:`~ddo_hooks.reports.tracker` re-exports its public names.

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> entry = Entry("host_cache_after_call", release_pytorch_host_cache(phase="after_call"))
    >>> import json
    >>> [e.component for e in read_entries(json.dumps(record_json(entry)))]
    ['host_cache_after_call']
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from pydantic import ValidationError

from ddo_hooks._diagnostics import json_error_sentence, show_value
from ddo_hooks.errors import ReportError
from ddo_hooks.reports.base import FROM_CHECKED_JSON
from ddo_hooks.reports.envelope import RecordEnvelope, ReportRecord
from ddo_hooks.reports.json_lines import beyond_json_limits, is_cut_line, text_lines
from ddo_hooks.reports.parse import parse_report

__all__ = [
    "MAX_COMPONENT_LENGTH",
    "RECORD_KEYS",
    "Entry",
    "RecordedReport",
    "component_problem",
    "entries_from_json",
    "iter_entries",
    "read_entries",
    "read_reports",
    "record_from_json",
    "record_json",
    "valid_component",
]

MAX_COMPONENT_LENGTH = 128
"""The longest component name."""

_COMPONENT_RE = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{MAX_COMPONENT_LENGTH - 1}}}$")

RecordedReport = tuple[str, Any]
"""A ``(component, report)`` pair, in recording order."""


class Entry(NamedTuple):
    """A record: the component, the report and where it came from (``None`` in files without envelopes)."""

    component: str
    report: Any
    envelope: RecordEnvelope | None = None


def valid_component(component: object) -> bool:
    """Whether ``component`` is a component name (see :func:`component_problem` for the rule)."""
    return isinstance(component, str) and _COMPONENT_RE.fullmatch(component) is not None


def component_problem(component: object) -> str:
    """What is wrong with a component name, and the rule (the real limit: 128 characters)."""
    rule = (
        "must be a non-empty name of letters, digits, '_', '.', '-', starting with a letter or digit, "
        f"at most {MAX_COMPONENT_LENGTH} characters (e.g. 'host_cache_before_transformer')"
    )
    if isinstance(component, str) and len(component) > MAX_COMPONENT_LENGTH:
        return f"{rule}; it has {len(component):,} characters"
    return rule


def record_json(entry: Entry) -> dict[str, Any]:
    """The JSON object of a record: ``{"component": ..., "report": ..., "envelope": ...}`` (no envelope: left out)."""
    record = {"component": entry.component, "report": entry.report.model_dump(mode="json")}
    if entry.envelope is not None:
        record["envelope"] = entry.envelope.model_dump(mode="json")
    return record


RECORD_KEYS = ({"component", "report"}, {"component", "report", "envelope"})
"""The keys a record may have (records written before envelopes existed have no ``envelope``)."""


def record_from_json(item: Any, where: str) -> Entry:
    """The record of a JSON object (:func:`record_json`'s), validated; ``where`` names it in messages (``line 3``).

    Raises:
        ReportError: Not a record: the message names ``where`` and the field path.
    """
    if not isinstance(item, dict) or set(item) not in RECORD_KEYS:
        raise ReportError(f"{where}: expected an object with 'component', 'report' and (optionally) 'envelope'")
    if not valid_component(item["component"]):
        component = item["component"]
        problem = component_problem(component).removeprefix("must be ")
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


def entries_from_json(text: str) -> list[Entry]:
    """The records of one JSON document ``{"records": [...]}`` (``MetricsTracker.to_json``'s), each validated.

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
    return [record_from_json(item, f"records[{i}]") for i, item in enumerate(data["records"])]


def read_reports(text: str) -> list[RecordedReport]:
    """Parse JSON Lines of ``{"component", "report"}`` records, validating each.

    A line cut off mid-record is an error here, as any line that is not JSON;
    :meth:`~ddo_hooks.reports.tracker.MetricsTracker.from_jsonl` leaves it out with a warning.

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
        >>> from ddo_hooks import MetricsTracker, release_pytorch_host_cache
        >>> tracker = MetricsTracker()
        >>> tracker.record(release_pytorch_host_cache(phase="after_call"), component="c")
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
            entry = record_from_json(item, f"line {number}")
        yield entry


def _checked_entry(line: str) -> Entry | None:
    """The record of a line as :func:`record_from_json` would read it, or ``None`` for the slow path to say why not.

    One pass of pydantic_core over the JSON text: strict JSON mode takes what strict Python mode
    takes from ``json.loads`` here, since every field a JSON string or array could fill laxly (the
    timestamp, the tuples of names) is lax in both.
    """
    try:
        record = ReportRecord.model_validate_json(line, context=FROM_CHECKED_JSON)
    except ValueError:  # ValidationError, for JSON it cannot read as for a record it refuses
        return None
    return Entry(record.component, record.report, record.envelope)
