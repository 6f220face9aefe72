"""A component's weights files: finding them, opening them safely, and telling whether they changed.

:mod:`ddo_hooks.release.file_views` reads the folder a component was loaded from
(:func:`folder_of`): its index (``*.safetensors.index.json``) names the files its weights come from,
else the standard single file, else each regular ``*.safetensors`` file (:func:`named_files`). Whatever
has the index's name is
opened without blocking (a FIFO's open would wait for a writer) and read only when it is a
regular file of at most :data:`MAX_INDEX_BYTES` (a link to ``/dev/zero`` would be read until
memory runs out); anything else is refused with a sentence that names the file and why
(:class:`Refused`).

A component whose copies were freed reads its files through views of their mappings; the mapping
holds the inode it mapped, whatever its path names later. :class:`HeldFile` keeps that inode open
and judges change by it, whatever its names: a rewrite in place of the inode they read is always
one; a new file renamed over the path, the file renamed away or given another link changes nothing
the views read, and is no change (:meth:`HeldFile.changed` says how it tells them apart, and
:meth:`HeldFile.moved` whether the path still leads to the file).

Examples:
    >>> read_index("/dev/zero")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ddo_hooks.release.weights_files.Refused: /dev/zero is not a regular file (a character device): ...
"""

from __future__ import annotations

import glob
import json
import logging
import os
import stat
import weakref
from typing import Any

import torch

from ddo_hooks import _moved
from ddo_hooks.ledger import LEDGER
from ddo_hooks.release import file_pages, file_watch

__all__ = [
    "MAX_INDEX_BYTES",
    "FileIdentity",
    "HeldFile",
    "Refused",
    "folder_of",
    "identity",
    "named_files",
    "note_files",
    "open_regular",
    "read_index",
]

_log = logging.getLogger("ddo_hooks")

MAX_INDEX_BYTES = 64 << 20
"""The most bytes an index is read for (64 MiB): a real one names each tensor once, and FLUX.1-dev's
transformer's holds 120 KB."""


class Refused(Exception):
    """A file that is not read, or not used: the sentence names it and says why.

    Attributes:
        reason: As a done component's report says it (``not_file_backed``, ``modified``, ``file_changed``).
    """

    def __init__(self, detail: str, reason: str = "not_file_backed") -> None:
        super().__init__(detail)
        self.reason = reason


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


FileIdentity = tuple[int, int, int, int, int]
"""A file's device, inode, size, modification time and change time (ns): what changes when it is rewritten or
replaced. The change time is the kernel's: a copy that sets the modification time back (``cp -p``, ``rsync -t
--inplace``, ``os.utime``) still moves it."""


def _identity(info: os.stat_result) -> FileIdentity:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def identity(path: str) -> FileIdentity | None:
    """The identity of the file ``path`` names now (one ``stat``); ``None`` when there is none."""
    try:
        return _identity(os.stat(path))
    except OSError:
        return None


class HeldFile:
    """A weights file held open: the inode a component's views read, and its identity when it was opened.

    The descriptor is closed by :meth:`close`, or when the object is collected (it holds no
    module: what holds it decides how long it lives).
    """

    def __init__(self, path: str) -> None:
        """Open ``path`` (see :func:`open_regular`).

        Raises:
            Refused: It cannot be opened, or is not a regular file.
        """
        fd = open_regular(path)
        self.path = path
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)
        self._events = file_watch.watch(fd)  # before the identity: nothing done after it is missed
        info = os.fstat(fd)
        self.identity = _identity(info)
        self._links = info.st_nlink

    @property
    def key(self) -> tuple[int, int]:
        """The device and inode: the file itself, whatever its path names."""
        return self.identity[0], self.identity[1]

    def fileno(self) -> int:
        """The descriptor (for ``mmap`` and ``posix_fadvise``); it stays this object's to close."""
        return self._fd

    @property
    def size(self) -> int:
        """Its size now (``fstat``)."""
        return os.fstat(self._fd).st_size

    def changed(self) -> str | None:
        """``None`` while the inode holds what it held when opened; else the path and what changed.

        One ``fstat`` of the held descriptor, whatever the path names now. Its size or modification time
        moved: rewritten. Its change time alone moved: a rewrite whose modification time was set back
        (``cp -p``, ``rsync -t --inplace``), or only a new name (a link, a rename, a file renamed over the
        path), which the kernel tells apart (:mod:`~ddo_hooks.release.file_watch`): a write to the inode
        is a rewrite; a link, an unlink or a rename is none, and is counted from. Where the kernel cannot
        tell (no ``inotify``, events lost) or only the attributes changed with every name as it was (a
        time set back after a write through a shared mapping, which raises no event), a moved change time
        is taken as a rewrite.
        """
        if not self._closer.alive:
            return None
        info = os.fstat(self._fd)
        now = _identity(info)
        if now[2] != self.identity[2]:
            return f"{self.path} (rewritten in place since: it holds {now[2]:,} bytes, not {self.identity[2]:,})"
        if now[3] != self.identity[3]:
            return f"{self.path} (rewritten in place since: its modification time moved)"
        if now[4] == self.identity[4]:
            return None  # nothing can set a change time back: nothing was done to the inode
        seen = None if self._events is None else self._events.seen()
        if seen is None or seen & file_watch.MODIFIED:
            renamed_only = False
        else:  # an attribute changed while its names are as they were: a time set back?
            renamed_only = not (seen & file_watch.ATTRIB and info.st_nlink == self._links and self.moved() is None)
        if not renamed_only:
            return f"{self.path} (rewritten in place since, or its attributes changed: its change time moved)"
        self.identity, self._links = now, info.st_nlink  # a new name only: counted from here
        if self._events is not None:
            self._events.reset()
        if (moved := self.moved()) is not None:
            _log.warning("ddo_hooks: %s: no change of the weights, nothing to do", moved)
        return None

    def moved(self) -> str | None:
        """``None`` while the path names this file; else what it names now (the file was renamed away or replaced).

        The component keeps reading the file it opened, so this is no change of its weights.
        """
        now = identity(self.path)
        if now is not None and now[:2] == self.key:
            return None
        what = "nothing" if now is None else "another file"
        return f"{self.path} names {what} now; the weights keep reading the file opened at attach (inode {self.key[1]})"

    def check_views(self, tensors: dict[str, torch.Tensor]) -> None:
        """Check that the file's ``tensors`` (views, as safetensors loads them) map this inode, and fit in it.

        A view past the file's end kills the process when it is read (``SIGBUS``).

        Raises:
            Refused: ``modified`` (the path named another file when it was loaded) or ``file_changed``
                (truncated since it was opened).
        """
        at = file_pages.mapping_at(file_pages.mappings())
        need = 0
        for tensor in tensors.values():
            nbytes = tensor.numel() * tensor.element_size()
            mapping = at(tensor.data_ptr(), max(nbytes, 1))
            if mapping is None:
                continue  # read into memory: nothing of the file is read later
            if mapping.inode != self.identity[1]:
                raise Refused(f"{self.path} was replaced while it was read; it keeps its copies", "modified")
            need = max(need, mapping.offset + tensor.data_ptr() - mapping.start + nbytes)
        if self.size < need:
            detail = f"{self.path} holds {self.size:,} bytes, fewer than its tensors need ({need:,}): it was truncated"
            raise Refused(detail + " while it was read; it keeps its copies (load the pipeline again)", "file_changed")

    def close(self) -> None:
        """Close the descriptor (a second call does nothing)."""
        if self._events is not None:
            self._events.close()
        self._closer()

    def __repr__(self) -> str:
        return f"<HeldFile {self.path} {'open' if self._closer.alive else 'closed'}>"


def folder_of(module: torch.nn.Module) -> str | None:
    """The folder ``from_pretrained`` loaded ``module`` from (transformers' ``name_or_path``, diffusers' config)."""
    config = getattr(module, "config", None)
    path = getattr(module, "name_or_path", None) or getattr(config, "_name_or_path", None)
    return path if isinstance(path, str) and os.path.isdir(path) else None


_STANDARD = ("diffusion_pytorch_model.safetensors", "model.safetensors")
"""The single weights files diffusers and transformers save."""


def named_files(folder: str) -> list[str]:
    """The files ``folder``'s weights come from.

    Those its index names; else the standard single file; else each regular ``*.safetensors`` file
    (a stray file, a folder or a FIFO of that name, is never listed).

    Raises:
        Refused: Its index is not a regular file of at most :data:`MAX_INDEX_BYTES`, or not an index.
    """
    indexes = sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors.index.json")))
    if indexes:
        return [os.path.join(folder, shard) for shard in read_index(indexes[0])]
    standard = [os.path.join(folder, file) for file in _STANDARD if os.path.isfile(os.path.join(folder, file))]
    found = standard or sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors")))
    return [path for path in found if _regular(path)]


def _regular(path: str) -> bool:
    """Whether ``path`` is a regular file now (looked at each time: a file can be replaced by a FIFO)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def note_files(pipeline: Any) -> None:
    """Remember the identity of each model component's weights files now (at attach): one ``stat`` per file.

    A component noted by an earlier attachment keeps that note: its copies are what it loaded then.
    """
    for module in getattr(pipeline, "components", {}).values():
        if isinstance(module, torch.nn.Module) and LEDGER.read(module).noted is None:
            folder = folder_of(module)
            try:
                paths = [] if folder is None else named_files(folder)
            except Refused:
                paths = []
            LEDGER.write(module, noted={path: identity(path) for path in paths})


def __getattr__(name: str) -> Any:
    return _moved.old_attribute(__name__, name)
