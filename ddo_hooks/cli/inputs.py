"""The files the commands read: report files opened one at a time, and a file of the other kind.

``summarize`` and ``plot`` read report files with :func:`read_reports`: each file is opened when
it is reached and its records validated as they are read, so that only what a command keeps of a
record stays in memory; a file given twice, or a copy of one, is read once. A report sink's file
is read with the files the sink rotated away from it, oldest first
(:func:`~ddo_hooks.reports.sink_files.sink_files`). A policy given where
reports are expected (or the other way round) is refused with the command that reads it
(:func:`other_kind`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import filecmp
import gc
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ddo_hooks.errors import DdoHooksError

__all__ = ["cycle_collector_off", "looks_like", "other_kind", "read_reports"]


def other_kind(error: DdoHooksError, path: str, kind: str, command: str) -> DdoHooksError:
    """``error``, or one saying the file looks like a {kind} file and which command reads it."""
    if looks_like(path) != kind:
        return error
    what = "a file of reports" if kind == "report" else "a hook policy"
    return type(error)(
        f"{path}: this looks like {what}, not a {'policy' if kind == 'report' else 'report file'};\n"
        f"  check it with: ddo-hooks {command} {path}"
    )


def looks_like(path: str) -> str | None:
    """``"report"`` or ``"policy"`` when the file's first object has the keys of one, else ``None``."""
    import json

    from ddo_hooks._text_files import read_text_file
    from ddo_hooks.errors import ReportError

    try:
        text = read_text_file(
            path, kind="input", error=ReportError, max_bytes=64 * 1024 * 1024,
            directory_fix="", binary_fix="", encoding_fix="",
        )  # fmt: skip
    except DdoHooksError:
        return None
    first = next((line for line in text.splitlines() if line.strip()), "")
    for candidate in (text, first):
        try:
            data = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(data, dict) and {"component", "report", "schema_version", "route", "records"} & set(data):
            return "report"
    from ddo_hooks.policy.yaml_loader import load_yaml

    try:
        data, _ = load_yaml(text)
    except DdoHooksError:
        return None
    if isinstance(data, dict) and {"version", "boundaries", "release"} & set(data):
        return "policy"
    return None


def read_reports(paths: Sequence[str], *, rotated: bool = False) -> Iterator[Any]:
    """Each report file, opened when it is reached (its records validated as they are read).

    With ``rotated``, each path stands for its report sink's set: the files rotated away from it
    (``path.1``, ``path.2``, ...), oldest first, then the path itself; a file of such a set that
    holds no record yet (the sink's new file: empty, or its first line cut off) adds none.

    A file given twice, or a file whose bytes are those of a file given before (a copy), is read
    once, with a warning: records without an envelope cannot be told apart, so they would count
    twice. A policy given instead is refused with the command that reads it. A line cut off
    mid-record, anywhere in a JSON Lines file, is left out with a warning naming it, printed when
    the reading passes it.
    """
    from ddo_hooks.reports.files import open_report_file
    from ddo_hooks.reports.sink_files import sink_files

    given: list[tuple[str, os.stat_result]] = []
    named: list[tuple[str, bool]] = []  # each file, and whether it is one of a sink's several
    for name in paths:
        files = sink_files(name) if rotated else [Path(name)]
        named += [(name if file == Path(name) else str(file), len(files) > 1) for file in files]
    for path, of_a_set in named:
        same = _same_as(path, given)
        if same is not None:
            print(f"warning: {path}: {same}; read once, so that its records count once", file=sys.stderr)
            continue
        try:
            opened = open_report_file(path, cut_lines=True, empty_ok=of_a_set)
        except DdoHooksError as e:
            raise other_kind(e, path, "policy", "validate-policy") from e
        yield dataclasses.replace(opened, entries=_entries_of(opened.entries, opened.warnings, path))


def _same_as(path: str, given: list[tuple[str, os.stat_result]]) -> str | None:
    """How ``path`` repeats a file given before (the same file, or its bytes), or ``None``; adds it to ``given``."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # opening it says what is wrong
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    for earlier, seen in given:
        if os.path.samestat(info, seen):
            return f"the same file as {earlier}, given twice"
    for earlier, seen in given:  # only files of one size can hold the same bytes
        if info.st_size == seen.st_size and filecmp.cmp(path, earlier, shallow=False):
            return f"the same bytes as {earlier} (a copy)"
    given.append((path, info))
    return None


def _entries_of(entries: Iterator[Any], warnings: list[str], path: str) -> Iterator[Any]:
    """``entries``, each warning (a line cut off, left out) printed when it is added, before what follows it."""
    shown = 0

    def show() -> None:
        nonlocal shown
        for warning in warnings[shown:]:
            print(f"warning: {warning}", file=sys.stderr)
        shown = len(warnings)

    try:
        for entry in entries:
            show()
            yield entry
    except DdoHooksError as e:
        show()
        raise other_kind(e, path, "policy", "validate-policy") from e
    show()


@contextlib.contextmanager
def cycle_collector_off() -> Iterator[None]:
    """Python's cycle collector off, then as it was.

    ``summarize`` keeps one small row per record and makes no reference cycles (validating 10,000
    records leaves none to collect), but the collector would scan the rows kept, again and again
    as they accumulate: a seventh of the time for 100,000 records.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
