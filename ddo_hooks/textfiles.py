"""Reading a user's text file (a policy, a file of reports) with errors that say what is wrong.

Examples:
    >>> from ddo_hooks.errors import PolicyError
    >>> read_text_file("no/such.yaml", kind="policy", error=PolicyError, directory_fix="",
    ...                binary_fix="", encoding_fix="")
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.PolicyError: no/such.yaml: no such policy file (looked for ...); check the path
"""

from __future__ import annotations

import os
from pathlib import Path

from ddo_hooks.errors import DDOError

__all__ = ["read_text_file"]


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
