r"""Writing a file whole or not at all, and never through a link someone else put in the folder.

:func:`replace_with_text` writes the text to a new temporary file beside the target, syncs it,
then renames it over the target (:func:`os.replace`): a reader sees the old file or the new one,
never a part, and a failed write leaves the old file as it was. The temporary file has a name no
one can guess (random) and is created exclusively, without following a link (``O_CREAT | O_EXCL |
O_NOFOLLOW``): in a folder that others can write (``/tmp``), a symbolic link planted at the name
the writer will use cannot redirect the write into another file.

Every file the project writes goes through here (a report file, the demo's ``--report``, a plot),
under one rule: the target is a regular file or nothing yet. A symbolic link, a FIFO, a device
(``/dev/null``, ``/dev/full``), a socket or a folder at the output name is refused
(:class:`NotRegularFile`, naming what it is) and left as it was: a rename over it would replace a
device node with a regular file, and writing through a link would write wherever it points. The
policy's ``report_sink``, which appends instead, refuses the same paths
(:mod:`ddo_hooks.hooks.sink`).

Examples:
    >>> import os, pathlib, tempfile
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "run.jsonl"
    >>> replace_with_text(target, '{"a": 1}\n') == target, target.read_text()
    (True, '{"a": 1}\n')
    >>> [p.name for p in target.parent.iterdir()]  # no temporary file is left
    ['run.jsonl']
    >>> os.mkfifo(target.parent / "pipe")
    >>> replace_with_text(target.parent / "pipe", "")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ddo_hooks.reports.atomic_file.NotRegularFile: .../pipe is a FIFO (named pipe), not a regular ...
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from ddo_hooks._text_files import special_file_kind

__all__ = ["NotRegularFile", "check_target", "replace_with_bytes", "replace_with_text"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_ATTEMPTS = 100


class NotRegularFile(OSError):
    """The output name holds something that is not a regular file (a link, a FIFO, a device, a folder)."""


def check_target(path: str | os.PathLike[str]) -> Path:
    """Check that ``path`` names a regular file or nothing (its link, if any, is not followed), and return it.

    Raises:
        NotRegularFile: It is a symbolic link, a folder, a FIFO, a device or a socket.
    """
    target = Path(path)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError:
        return target  # cannot be looked at: the write says why
    if stat.S_ISREG(mode):
        return target
    if stat.S_ISLNK(mode):
        what = f"a symbolic link (to {os.path.realpath(target)}), which is never written through"
        fix = "give the path it points to"
    else:
        what = "a folder" if stat.S_ISDIR(mode) else special_file_kind(mode)
        what += ", not a regular file: ddo_hooks writes only regular files (a missing one is created)"
        fix = "give another path"
    raise NotRegularFile(f"{target} is {what}; {fix}")


def replace_with_text(path: str | os.PathLike[str], text: str) -> Path:
    """Replace the file at ``path`` with ``text`` (UTF-8), as :func:`replace_with_bytes` does."""
    return replace_with_bytes(path, text.encode("utf-8"))


def replace_with_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace the regular file at ``path`` with ``data`` atomically (or create it), and return the path.

    The new file gets the permissions a new file gets (``0o666`` less the umask).

    Raises:
        NotRegularFile: The path names a link or anything but a regular file (:func:`check_target`).
        OSError: The temporary file cannot be created or written (a full disk, a folder that
            cannot be written), or cannot be renamed over the target; the target is left as it
            was, and the temporary file is removed.
    """
    target = check_target(path)
    left = memoryview(data)
    descriptor, temporary = _create_beside(target)
    try:
        try:
            while left:
                left = left[os.write(descriptor, left) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        check_target(target)  # looked at again right before the rename: nothing took its place meanwhile
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_folder(target.parent)
    return target


def _create_beside(target: Path) -> tuple[int, str]:
    """A new file in ``target``'s folder, under a random name, created exclusively (never through a link)."""
    for _ in range(_ATTEMPTS):
        temporary = os.path.join(target.parent, f".{target.name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(temporary, _CREATE, 0o666), temporary
        except FileExistsError:  # taken (by anything, a link too): another name
            continue
    raise FileExistsError(f"{target}: no free name for a temporary file beside it after {_ATTEMPTS} tries")


def _sync_folder(folder: Path) -> None:
    """Sync the folder, so that the rename is on disk too (where the system allows it)."""
    with contextlib.suppress(OSError, AttributeError):
        descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
