r"""Writing a file whole or not at all, and never through a link someone else put in the folder.

:func:`replace_with_text` writes the text to a new temporary file beside the target, syncs it,
then renames it over the target (:func:`os.replace`): a reader sees the old file or the new one,
never a part, and a failed write leaves the old file as it was. The temporary file has a name no
one can guess (random) and is created exclusively, without following a link (``O_CREAT | O_EXCL |
O_NOFOLLOW``): in a folder that others can write (``/tmp``), a symbolic link planted at the name
the writer will use cannot redirect the write into another file. A target that is itself a
symbolic link is replaced (the link, not the file it points to, which is left as it was).

Examples:
    >>> import pathlib, tempfile
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "run.jsonl"
    >>> replace_with_text(target, '{"a": 1}\n') == target, target.read_text()
    (True, '{"a": 1}\n')
    >>> [p.name for p in target.parent.iterdir()]  # no temporary file is left
    ['run.jsonl']
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["replace_with_text"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_ATTEMPTS = 100


def replace_with_text(path: str | os.PathLike[str], text: str) -> Path:
    """Replace the file at ``path`` with ``text`` (UTF-8) atomically, and return the path.

    The new file gets the permissions a new file gets (``0o666`` less the umask).

    Raises:
        OSError: The temporary file cannot be created or written (a full disk, a folder that
            cannot be written), or cannot be renamed over the target (a directory); the target is
            left as it was, and the temporary file is removed.
    """
    target = Path(path)
    data = memoryview(text.encode("utf-8"))
    descriptor, temporary = _create_beside(target)
    try:
        try:
            while data:
                data = data[os.write(descriptor, data) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
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
