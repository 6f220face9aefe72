r"""A report sink's files: the one it appends to, and those it rotated away, oldest first.

A report sink (the policy's ``report_sink``, :mod:`ddo_hooks.hooks.sink`) never grows past what
the readers read (:data:`~ddo_hooks.reports.files.MAX_REPORT_FILE_BYTES`, 64 MiB): before a line
would take the file past :data:`ROTATE_BYTES` (32 MiB, some 5,000 calls of three boundaries), the
sink renames the file to the next free number, ``reports.jsonl.1``, then ``reports.jsonl.2``, ...
(the lowest number is the oldest; none is ever deleted or renamed again), and the next line starts
a new ``reports.jsonl``. :meth:`~ddo_hooks.reports.tracker.MetricsTracker.read_jsonl`,
``ddo-hooks summarize`` and ``ddo-hooks plot`` read the whole set, oldest first
(:func:`sink_files`); ``validate-report`` checks the one file it is given.

Examples:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("reports.jsonl", "reports.jsonl.10", "reports.jsonl.2", "reports.jsonl.bak"):
    ...     _ = (folder / name).write_text("")
    >>> [path.name for path in sink_files(folder / "reports.jsonl")]
    ['reports.jsonl.2', 'reports.jsonl.10', 'reports.jsonl']
    >>> rotated_name(folder / "reports.jsonl", 3).name
    'reports.jsonl.3'
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["ROTATE_BYTES", "rotated_name", "rotated_numbers", "sink_files"]

ROTATE_BYTES = 32 * 1024 * 1024
"""The size a sink's file does not grow past (32 MiB, half of what a reader reads): the next line goes to a new file.

Half, so that lines appended by a sink that could not take the lock (which rotates nothing) still
leave the file readable."""


def rotated_name(path: str | os.PathLike[str], number: int) -> Path:
    """The name of the ``number``-th file rotated away from the sink at ``path``: ``reports.jsonl.3``."""
    path = Path(path)
    return path.with_name(f"{path.name}.{number}")


def rotated_numbers(path: str | os.PathLike[str]) -> list[int]:
    """The numbers of the files rotated away from the sink at ``path``, lowest (oldest) first."""
    path = Path(path)
    pattern = re.compile(re.escape(path.name) + r"\.([1-9][0-9]{0,17})")
    try:
        names = os.listdir(path.parent)
    except OSError:  # no folder, or one that cannot be listed: reading the sink says what is wrong
        return []
    return sorted(int(match.group(1)) for name in names if (match := pattern.fullmatch(name)) is not None)


def sink_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files of the sink at ``path``, oldest first: those rotated away, then ``path`` (when it exists).

    ``path`` alone when nothing was rotated away (then also when it does not exist, so that reading
    it says so).
    """
    path = Path(path)
    rotated = [rotated_name(path, number) for number in rotated_numbers(path)]
    if not rotated or os.path.lexists(path):
        return [*rotated, path]
    return rotated
