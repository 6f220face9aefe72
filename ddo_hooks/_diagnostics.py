"""Private helpers for users' text files: reading them, and saying where in them a problem is.

Both the policy loader and the report-file reader use these: :func:`read_text_file` turns every
way reading a file can fail into the caller's own error type, and the key-path helpers
(:data:`KeyPath`, :data:`Positions`, :func:`format_key_path`, :func:`nearest_position`,
:func:`where`) point a message at ``file:line:col: key.path``.

Examples:
    >>> from ddo_hooks.errors import PolicyError
    >>> read_text_file("no/such.yaml", kind="policy", error=PolicyError, directory_fix="",
    ...                binary_fix="", encoding_fix="")
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.PolicyError: no/such.yaml: no such policy file (looked for ...); check the path
    >>> format_key_path(("boundaries", "after_call", "actions", 1, "name"))
    'boundaries.after_call.actions[1].name'
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path

from ddo_hooks.errors import DDOError

__all__ = [
    "KeyPath",
    "Positions",
    "did_you_mean",
    "format_key_path",
    "nearest_position",
    "read_text_file",
    "show_value",
    "where",
]

KeyPath = tuple[str | int, ...]
"""A path of mapping keys and list indices from the top of a document."""

Positions = dict[KeyPath, tuple[int, int]]
"""Each key path mapped to the 1-based (line, column) of its key (or list item)."""


def read_text_file(
    path: str | os.PathLike[str],
    *,
    kind: str,
    error: type[DDOError],
    directory_fix: str,
    binary_fix: str,
    encoding_fix: str,
) -> str:
    """Read ``path`` as UTF-8 text (a leading byte-order mark is dropped).

    Args:
        path: The file.
        kind: What the file should be (``"policy"``, ``"report"``), for messages.
        error: The error type to raise.
        directory_fix: What to do when ``path`` is a directory.
        binary_fix: What to do when the file holds a NUL byte.
        encoding_fix: What to do when the file is not UTF-8.

    Raises:
        DDOError: Of type ``error``: missing, a directory, unreadable, binary or not UTF-8.
    """
    source = os.fspath(path)
    file = Path(source)
    try:
        raw = file.read_bytes()
    except FileNotFoundError as e:
        raise error(f"{source}: no such {kind} file (looked for {file.absolute()}); check the path") from e
    except OSError as e:
        if isinstance(e, IsADirectoryError) or file.is_dir():
            raise error(f"{source}: is a directory, not a {kind} file; {directory_fix}") from e
        raise error(f"{source}: cannot read the {kind} file: {e.strerror or e}") from e
    if (nul := raw.find(b"\x00")) >= 0:
        raise error(f"{source}: looks like a binary file (NUL byte at offset {nul}); {binary_fix}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        bad = f"byte {raw[e.start]:#04x} at offset {e.start}"
        raise error(f"{source}: is not UTF-8 text ({bad}); {encoding_fix}") from e


def format_key_path(path: KeyPath) -> str:
    """Write a key path as people read it: ``boundaries.after_call.actions[1].name``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<top>"


def nearest_position(positions: Positions, path: KeyPath) -> tuple[int, int] | None:
    """The position of ``path``, or of its closest ancestor that has one; ``None`` if none does."""
    for end in range(len(path), -1, -1):
        found = positions.get(tuple(path[:end]))
        if found is not None:
            return found
    return None


def where(source: str, positions: Positions, path: KeyPath) -> str:
    """``"source:line:col"`` for ``path`` (or its closest known ancestor), else just ``source``."""
    found = nearest_position(positions, path)
    return f"{source}:{found[0]}:{found[1]}" if found else source


def did_you_mean(value: object, choices: Sequence[str]) -> str | None:
    """The choice closest to a misspelt ``value`` (:mod:`difflib`), or ``None``.

    Examples:
        >>> did_you_mean("before_vea", ["before_transformer", "before_vae", "after_call"])
        'before_vae'
    """
    if not isinstance(value, str):
        return None
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    if not close:
        close = [c for c in choices if c.lower() == value.lower()]
    return close[0] if close else None


def show_value(value: object) -> str:
    """A short YAML-like rendering of a value for messages: ``null``, ``true``, ``'text'``, ``a list``.

    Examples:
        >>> show_value(None), show_value(True), show_value("cpu"), show_value([1])
        ('null', 'true', "'cpu'", 'a list')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, (str, int, float)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"a {type(value).__name__}"
