"""What happened to an open file since a point: the kernel's own account (Linux ``inotify``), for :class:`HeldFile`.

A file's change time moves when its bytes are rewritten, and also when it only gains or loses a name (``ln``,
``mv``, a new file renamed over its path): ``stat`` alone cannot tell a rename from a rewrite whose modification
time was set back (``cp -p``, ``rsync -t --inplace``). The kernel can: a ``write``, ``truncate`` or
``fallocate`` of the inode raises ``IN_MODIFY`` on it, whatever its names; a link or an unlink raises
``IN_ATTRIB``, a rename ``IN_MOVE_SELF``. :func:`watch` asks for those events on the inode an open descriptor
holds (through ``/proc/self/fd``, so a path replaced meanwhile is never watched instead), and
:meth:`Watch.seen` says which arrived since. Writes through another process's shared mapping raise no event
(``inotify(7)``); they move the modification time, which :class:`HeldFile` compares itself.

One ``inotify`` instance serves the process; it is read only when asked (never by a thread of its own), and
events it could not keep (its queue overflowed), a watch the kernel dropped, or a forked child (which shares
the parent's queue) make :meth:`Watch.seen` answer ``None``: unknown, which the caller takes as a change.
Where there is no ``inotify`` (not Linux, no ``/proc``, the user's watch limit reached), :func:`watch`
returns ``None``.

Examples:
    >>> import os, tempfile
    >>> path = tempfile.mkstemp()[1]
    >>> fd = os.open(path, os.O_RDONLY)
    >>> events = watch(fd)
    >>> events is None or events.seen() == 0
    True
    >>> with open(path, "ab") as f:
    ...     _ = f.write(b"new")
    >>> events is None or bool(events.seen() & MODIFIED)
    True
    >>> os.close(fd); os.unlink(path)
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import struct
import sys
import threading
import weakref

from ddo_hooks.ledger import LEDGER, Settles

__all__ = ["ATTRIB", "MODIFIED", "MOVED", "Watch", "watch"]

MODIFIED = 0x002
"""``IN_MODIFY``: the inode's bytes were written, truncated or extended."""
ATTRIB = 0x004
"""``IN_ATTRIB``: its metadata changed (a link made or removed, its times or permissions set)."""
MOVED = 0x800
"""``IN_MOVE_SELF``: it was renamed."""
_DELETE_SELF, _OVERFLOW, _IGNORED = 0x400, 0x4000, 0x8000
_MASK = MODIFIED | ATTRIB | MOVED | _DELETE_SELF
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name: none for a watched file)


class Watch:
    """The events of one inode since the watch was made or last :meth:`reset`."""

    def __init__(self, watcher: _Watcher, wd: int) -> None:
        self._watcher = watcher
        self._wd = wd
        self._mask = 0
        self._lost = False
        self._closer = weakref.finalize(self, watcher.forget, wd, weakref.ref(self))

    def seen(self) -> int | None:
        """The events seen since (``MODIFIED | ATTRIB | MOVED`` bits), or ``None`` where some may be lost."""
        self._watcher.drain()
        return None if self._lost else self._mask

    def reset(self) -> None:
        """Count from now on."""
        self._watcher.drain()
        self._mask = 0

    def close(self) -> None:
        """Stop watching (a second call does nothing)."""
        self._closer()

    def _note(self, mask: int) -> None:
        if mask & (_OVERFLOW | _IGNORED):
            self._lost = True
        self._mask |= mask


class _Watcher:
    """The process's ``inotify`` instance and who listens to each watch."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        self._lock = threading.Lock()
        self._listeners: dict[int, list[weakref.ref[Watch]]] = {}

    def add(self, fd: int) -> Watch | None:
        wd = self._libc.inotify_add_watch(self._fd, f"/proc/self/fd/{fd}".encode(), _MASK)
        if wd < 0:
            return None
        with self._lock:
            self._read()  # events of this inode from before now are not this watch's
            watched = Watch(self, wd)
            self._listeners.setdefault(wd, []).append(weakref.ref(watched))
        return watched

    def drain(self) -> None:
        with self._lock:
            self._read()

    def forget(self, wd: int, ref: weakref.ref[Watch]) -> None:
        with self._lock:
            left = [other for other in self._listeners.get(wd, ()) if other is not ref and other() is not None]
            if left:
                self._listeners[wd] = left
            elif self._listeners.pop(wd, None) is not None and self._fd >= 0:
                self._libc.inotify_rm_watch(self._fd, wd)  # the same inode's other watches share this one

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 65536)
            except (BlockingIOError, OSError):
                return
            for offset in _offsets(data):
                wd, mask, _, _ = _EVENT.unpack_from(data, offset)
                everyone = (ref for refs in self._listeners.values() for ref in refs)  # a lost queue: all
                for ref in list(everyone if wd < 0 else self._listeners.get(wd, ())):
                    if (listener := ref()) is not None:
                        listener._note(mask)

    def leave_parent(self) -> None:
        """In a forked child: the queue is the parent's too, so nothing read here can be trusted.

        Every watch is lost, the child closes its copy of the queue, and its next watch makes its own.
        """
        for refs in self._listeners.values():
            for ref in refs:
                if (listener := ref()) is not None:
                    listener._lost = True
        self._listeners.clear()
        fd, self._fd = self._fd, -1
        with contextlib.suppress(OSError):
            os.close(fd)
        _watcher.cache_clear()


def _offsets(data: bytes) -> list[int]:
    found, at = [], 0
    while at + _EVENT.size <= len(data):
        found.append(at)
        at += _EVENT.size + _EVENT.unpack_from(data, at)[3]
    return found


def watch(fd: int) -> Watch | None:
    """Watch the inode ``fd`` holds open; ``None`` where the kernel offers no ``inotify`` here."""
    watcher = _watcher()
    return None if watcher is None else watcher.add(fd)


@functools.cache  # the process's one inotify queue, made at the first watch
def _watcher() -> _Watcher | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    made = _Watcher(libc, fd)
    LEDGER.write(made, settles=Settles(after_fork=_Watcher.leave_parent))
    return made
