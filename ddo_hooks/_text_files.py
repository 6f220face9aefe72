"""Private: reading users' text files (policies, report files), each told as what it is.

:func:`read_text_file` turns every way reading a file can fail into the caller's own error type,
with the file and the fix. One rule: only a regular file is read (a FIFO, a socket or a device is
refused from its ``stat``, never opened), at most the caller's size, and whatever size the file
system says (``/proc`` files say 0); a path is told as what it is: missing, in a folder this user
may not search, a symbolic link that names nothing or loops, or the file's text given instead of
its path (:func:`looks_like_text`: the message shows its start and names the function that reads
text).

Examples:
    >>> from ddo_hooks.errors import PolicyError
    >>> read_text_file("no/such.yaml", kind="policy", error=PolicyError, max_bytes=1024,
    ...                directory_fix="", binary_fix="", encoding_fix="")
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.PolicyError: no/such.yaml: no such policy file (looked for ...); check the path
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ddo_hooks._diagnostics import show_repr
from ddo_hooks.errors import DdoHooksError

__all__ = ["broken_link", "looks_like_text", "read_text_file", "special_file_kind", "text_given_for_path"]


def read_text_file(
    path: str | os.PathLike[str],
    *,
    kind: str,
    error: type[DdoHooksError],
    max_bytes: int,
    directory_fix: str,
    binary_fix: str,
    encoding_fix: str,
    text_fix: str = "",
) -> str:
    """Read ``path`` as UTF-8 text (a leading byte-order mark is dropped), at most ``max_bytes`` of it.

    The path is checked with :func:`os.stat` before it is opened: only a regular file is read, so
    a FIFO, a socket or a device such as ``/dev/zero`` is refused at once instead of blocking or
    reading without end, and a file larger than ``max_bytes`` is refused before any byte is read.
    A size of 0 is not taken for an empty file (``/proc`` files say 0): the file is read. A path that
    names nothing and holds a line break, starts with ``{`` or is longer than a path may be is the
    file's text given instead of its path: the message shows its start and says ``text_fix``.

    Args:
        path: The file.
        kind: What the file should be (``"policy"``, ``"report"``), for messages.
        error: The error type to raise.
        max_bytes: The largest file accepted, in bytes.
        directory_fix: What to do when ``path`` is a directory.
        binary_fix: What to do when the file holds a NUL byte.
        encoding_fix: What to do when the file is not UTF-8.
        text_fix: What to do with text given where the path was expected (which function reads text).

    Raises:
        DdoHooksError: Of type ``error``: missing, a directory or another non-regular file, larger than
            ``max_bytes``, unreadable, binary or not UTF-8.
    """
    source = os.fspath(path)
    file = Path(source)
    try:
        info = os.stat(source)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        missing = isinstance(e, FileNotFoundError)
        if getattr(e, "errno", None) == errno.ENAMETOOLONG or (missing and looks_like_text(source)):
            raise error(text_given_for_path(source, kind, text_fix)) from e
        if (link := broken_link(source)) is not None:
            raise error(f"{source}: {link}; fix the link or give the {kind} file's own path") from e
        if missing:
            raise error(f"{source}: no such {kind} file (looked for {file.absolute()}); check the path") from e
        if isinstance(e, PermissionError):  # looking a name up needs only the folders' search permission
            raise error(
                f"{source}: cannot look for the {kind} file: a folder on its path may not be searched by this user "
                f"({e.strerror}); check the folders' permissions"
            ) from e
        raise error(f"{source}: cannot read the {kind} file: {getattr(e, 'strerror', None) or e}") from e
    if stat.S_ISDIR(info.st_mode):
        cause = IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), source)
        raise error(f"{source}: is a directory, not a {kind} file; {directory_fix}") from cause
    if not stat.S_ISREG(info.st_mode):
        what = special_file_kind(info.st_mode)
        raise error(f"{source}: is {what}, not a regular file; save the {kind} to a file and pass that file's path")
    if info.st_size > max_bytes:
        raise error(_too_large(source, kind, f"{info.st_size:,} bytes", max_bytes))
    try:
        descriptor = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with os.fdopen(descriptor, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):  # replaced since the check above
                raise error(f"{source}: is not a regular file; pass the path of a {kind} file")
            raw = stream.read(max_bytes + 1)
    except OSError as e:
        if isinstance(e, IsADirectoryError):
            raise error(f"{source}: is a directory, not a {kind} file; {directory_fix}") from e
        raise error(f"{source}: cannot read the {kind} file: {e.strerror or e}") from e
    if len(raw) > max_bytes:
        raise error(_too_large(source, kind, "more bytes", max_bytes))
    if (nul := raw.find(b"\x00")) >= 0:
        raise error(f"{source}: looks like a binary file (NUL byte at offset {nul}); {binary_fix}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        bad = f"byte {raw[e.start]:#04x} at offset {e.start}"
        raise error(f"{source}: is not UTF-8 text ({bad}); {encoding_fix}") from e


def broken_link(path: str) -> str | None:
    """What is wrong with ``path`` when it is a symbolic link that leads to no file: it names nothing, or loops.

    ``None`` when it is no link, or one that leads to a file (or cannot be looked at).

    Examples:
        >>> import os, tempfile
        >>> link = os.path.join(tempfile.mkdtemp(), "policy.yaml")
        >>> os.symlink("gone.yaml", link)
        >>> broken_link(link)
        "a symbolic link that names nothing (to 'gone.yaml')"
    """
    try:
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            return None
        target = os.readlink(path)
    except (OSError, ValueError):  # none, or one that cannot be looked at (ValueError: a NUL byte)
        return None
    try:
        os.stat(path)
    except FileNotFoundError:
        return f"a symbolic link that names nothing (to {target!r})"
    except OSError as e:
        return f"a symbolic link that loops (to {target!r}, and on without end)" if e.errno == errno.ELOOP else None
    return None


def looks_like_text(source: str) -> bool:
    r"""Whether ``source``, a path that names nothing, is a file's text given instead: a line break, or a ``{`` first.

    Examples:
        >>> looks_like_text("version: 1\nenabled: true\n"), looks_like_text(' {"a": 1}'), looks_like_text("p.yaml")
        (True, True, False)
    """
    return "\n" in source or "\r" in source or source.lstrip().startswith("{")


def text_given_for_path(source: str, kind: str, fix: str) -> str:
    r"""The message for ``kind`` text (policy, report) given where a file's path was expected: its start, and ``fix``.

    Examples:
        >>> print(text_given_for_path("version: 1\n" * 500, "policy", "load it with from_yaml_text"))
        'version: 1\nversion: 1\nversion: 1\nversion: 1\nversion:... (501 lines) is policy text, not ...
    """
    lines = f"{source.count(chr(10)) + 1:,} lines" if "\n" in source else f"{len(source):,} characters"
    return f"{show_repr(source)} ({lines}) is {kind} text, not the path of a {kind} file; {fix}"


def _too_large(source: str, kind: str, size: str, max_bytes: int) -> str:
    return (
        f"{source}: is {size}, more than a {kind} file may hold ({max_bytes:,} bytes); "
        f"check that this is the {kind} file you meant"
    )


def special_file_kind(mode: int) -> str:
    """What a file that is not a regular file or a directory is, from its ``st_mode``: ``a FIFO (named pipe)``, ..."""
    for test, what in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "a special file"
