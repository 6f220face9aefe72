"""Opening a component's weights files safely: never blocking, never reading without bound.

:mod:`ddo_hooks.release.file_views` reads a component's folder: its index
(``*.safetensors.index.json``) names the files its weights come from. Whatever has that name is
opened without blocking (a FIFO's open would wait for a writer) and read only when it is a
regular file of at most :data:`MAX_INDEX_BYTES` (a link to ``/dev/zero`` would be read until
memory runs out); anything else is refused with a sentence that names the file and why
(:class:`Refused`).

Examples:
    >>> read_index("/dev/zero")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ddo_hooks.release.file_identity.Refused: /dev/zero is not a regular file (a character device): ...
"""

from __future__ import annotations

import json
import os
import stat

__all__ = ["MAX_INDEX_BYTES", "Refused", "open_regular", "read_index"]

MAX_INDEX_BYTES = 64 << 20
"""The most bytes an index is read for (64 MiB): a real one names each tensor once, and FLUX.1-dev's
transformer's holds 120 KB."""


class Refused(Exception):
    """A file that is not read: the sentence names it and says why."""


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str) -> int:
    """Open ``path`` read-only without blocking, and keep it open only when it is a regular file.

    The check is made on the opened descriptor (``fstat``), so it is the file that will be read.

    Returns:
        The descriptor; the caller closes it.

    Raises:
        Refused: It cannot be opened, or is not a regular file (a FIFO, a device, a folder).
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise Refused(f"{path} cannot be opened ({e.strerror or e}): it is not read") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        os.close(fd)
        raise Refused(f"{path} cannot be looked at ({e.strerror or e}): it is not read") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise Refused(f"{path} is not a regular file ({_kind(mode)}): it is not read")
    return fd


def read_index(path: str) -> list[str]:
    """The weights files a safetensors index names (its ``weight_map``'s values, each once, sorted).

    Raises:
        Refused: It is not a regular file, holds more than :data:`MAX_INDEX_BYTES`, or is not an
            index (not JSON, no ``weight_map``).
    """
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_INDEX_BYTES:
            raise Refused(f"{path} holds {size:,} bytes, more than an index may ({MAX_INDEX_BYTES:,}): it is not read")
        chunks, left = [], MAX_INDEX_BYTES + 1  # it may grow while it is read: never more than the bound
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:
            raise Refused(f"{path} grew past {MAX_INDEX_BYTES:,} bytes while it was read: it is not read")
    except OSError as e:
        raise Refused(f"{path} cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    try:
        shards = json.loads(b"".join(chunks))["weight_map"].values()
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise Refused(f"{path} cannot be read as an index ({e})".splitlines()[0]) from None
    return sorted({shard for shard in shards if isinstance(shard, str)})
