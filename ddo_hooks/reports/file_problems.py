"""Saying exactly where an invalid report file is wrong: ``file:line:col: key.path: problem``.

:func:`diagnose_report_file` is what :mod:`~ddo_hooks.reports.files` calls when a file does not
validate: it reads the file again, slowly, for the place of the first invalid record, and names it
with the key path of each problem (:func:`json_positions` finds where each key of a JSON document is).

Examples:
    >>> text = '{"component": "x", "report": {"schema_version": 2}}'
    >>> print(diagnose_report_file("r.jsonl", text, "JSON Lines"))  # doctest: +ELLIPSIS
    r.jsonl:1:20: report.route: missing: every report names its route (... lists them)
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from pydantic import ValidationError

from ddo_hooks._diagnostics import (
    KeyPath,
    Positions,
    format_key_path,
    json_error_sentence,
    nearest_position,
    show_repr,
    show_value,
)
from ddo_hooks.reports.base import explain_error, model_at
from ddo_hooks.reports.ddo.routes import DDO_REPORT_ADAPTER, DDO_ROUTE_TYPES
from ddo_hooks.reports.envelope import RecordEnvelope
from ddo_hooks.reports.json_lines import beyond_json_limits, is_cut_line
from ddo_hooks.reports.parse import REPORT_ADAPTER, ROUTE_TYPES, report_shape
from ddo_hooks.reports.records import RECORD_KEYS, component_problem, valid_component

__all__ = ["diagnose_report_file", "json_positions"]

_WS = re.compile(r"[ \t\n\r]*")


def _after_space(text: str, i: int) -> int:
    """The index of the first character at or after ``i`` that is not JSON whitespace."""
    space = _WS.match(text, i)
    return i if space is None else space.end()


def json_positions(text: str) -> Positions:
    r"""The 1-based (line, column) of every key path of a valid JSON document (keys, list items).

    Examples:
        >>> json_positions('{"a": [1,\n {"b": 2}]}')[("a", 1, "b")]
        (2, 3)
    """
    offsets: dict[KeyPath, int] = {}
    scan = json.JSONDecoder().raw_decode

    def value(i: int, path: KeyPath) -> int:
        i = _after_space(text, i)
        offsets.setdefault(path, i)
        opener = text[i]
        if opener not in "[{":
            return scan(text, i)[1]
        i, index = i + 1, 0
        while True:
            i = _after_space(text, i)
            if text[i] in "]}":
                return i + 1
            if text[i] == ",":
                i += 1
                continue
            if opener == "{":
                key, end = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]  # typeshed leaves out json.decoder.scanstring
                offsets[(*path, key)] = i
                i = value(text.index(":", end) + 1, (*path, key))
            else:
                i, index = value(i, (*path, index)), index + 1

    with contextlib.suppress(ValueError, IndexError, RecursionError):
        value(0, ())  # the caller validated the document; positions found before a failure still help
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    positions: Positions = {}
    for path, offset in offsets.items():
        line = next(n for n in range(len(starts), 0, -1) if starts[n - 1] <= offset)
        positions[path] = (line, offset - starts[line - 1] + 1)
    return positions


def _report_problems(data: Any, positions: Positions, prefix: KeyPath) -> list[tuple[tuple[int, int], str]]:
    """The problems of a report (bare or a record's): validated as the shape it is read as."""
    ddo = report_shape(data) == "ddo"
    adapter, types = (DDO_REPORT_ADAPTER, DDO_ROUTE_TYPES) if ddo else (REPORT_ADAPTER, ROUTE_TYPES)
    try:
        adapter.validate_python(data)
        return []
    except ValidationError as e:
        errors = e.errors(include_url=False)
    found = []
    shape = " (of DDO's shape)" if ddo else ""
    for item in errors:
        model, loc = model_at(item["loc"], types)
        if item["type"].startswith("union_tag"):
            loc = ("route",)
        path = (*prefix, *loc)
        message = explain_error(item, model, loc).removeprefix("Value error, ")
        if ddo and item["type"] == "union_tag_invalid":
            message = message.replace("a route of ddo_hooks' reports", "a route of DDO's shape that ddo_hooks reads")
        where = nearest_position(positions, path) or (1, 1)
        found.append((where, f"{format_key_path(path)}: {message}{shape}"))
    return found


def _record_problems(item: Any, positions: Positions, prefix: KeyPath) -> list[tuple[tuple[int, int], str]]:
    where = nearest_position(positions, prefix) or (1, 1)
    if not isinstance(item, dict) or set(item) not in RECORD_KEYS:
        got = f"keys {_listed(item)}" if isinstance(item, dict) else f"a JSON {type(item).__name__}"
        name = format_key_path(prefix) if prefix else "record"
        wanted = "'component', 'report' and (optionally) 'envelope'"
        return [(where, f"{name}: expected an object with {wanted}, got {got}")]
    problems = _report_problems(item["report"], positions, (*prefix, "report"))
    if item.get("envelope") is not None:
        try:
            RecordEnvelope.model_validate(item["envelope"])
        except ValidationError as e:
            for error in e.errors(include_url=False):
                path = (*prefix, "envelope", *error["loc"])
                message = explain_error(error).removeprefix("Value error, ")
                problems.append((nearest_position(positions, path) or where, f"{format_key_path(path)}: {message}"))
    component = item["component"]
    if not problems and not valid_component(component):
        path = (*prefix, "component")
        message = f"component={show_repr(component)} {component_problem(component)}"
        problems = [(nearest_position(positions, path) or where, f"{format_key_path(path)}: {message}")]
    return problems


def _listed(keys: dict[str, Any], most: int = 5) -> str:
    shown = ", ".join(show_value(key) for key in list(keys)[:most])
    return f"{shown} and {len(keys) - most} more" if len(keys) > most else shown


def diagnose_report_file(source: str, text: str, form: str, *, cut_lines: bool = False) -> str:
    """Say where a report file that failed validation is wrong, for people.

    Args:
        source: The file name, as messages show it.
        text: Its text.
        form: ``"JSON Lines"``, ``"JSON Lines of bare reports"``, ``"tracker JSON"`` or ``"report JSON"``.
        cut_lines: Pass over the lines of JSON Lines cut off mid-record, as the reader that was
            allowed to leave them out did (:func:`~ddo_hooks.reports.json_lines.is_cut_line`).

    Returns:
        ``file:line:col: key.path: problem`` lines for the first invalid record (one line per
        problem), or ``""`` when nothing is found to be wrong.
    """
    if form in ("JSON Lines", "JSON Lines of bare reports"):
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                if cut_lines and is_cut_line(line):
                    continue
                return (
                    f"{source}:{number}:{e.colno}: not JSON: {json_error_sentence(e)}; each line holds one JSON object"
                )
            except (ValueError, RecursionError) as e:  # past one of Python's limits
                _, column, sentence = beyond_json_limits(line, e)
                return f"{source}:{number}:{column}: {sentence}"
            positions = json_positions(line)
            if form == "JSON Lines":
                problems = _record_problems(item, positions, ())
            else:
                problems = _report_problems(item, positions, ())
            if problems:
                return "\n".join(f"{source}:{number}:{col}: {message}" for (_, col), message in problems)
        return ""
    data, positions = json.loads(text), json_positions(text)
    if form == "report JSON":
        problems = _report_problems(data, positions, ())
    elif not isinstance(data.get("records"), list):
        problems = [(nearest_position(positions, ("records",)) or (1, 1), "records: expected a list of records")]
    else:
        problems = []
        for index, item in enumerate(data["records"]):
            problems = problems or _record_problems(item, positions, ("records", index))
    return "\n".join(f"{source}:{line}:{col}: {message}" for (line, col), message in problems)
