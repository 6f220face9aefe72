"""What a fork or the interpreter's exit must settle: the live objects that hold threads, locks or descriptors.

A forked child has only the thread that forked: a lock another thread of the parent held stays held
there, the parent's timer threads are gone, and an inotify descriptor would be shared with the parent.
At exit, a deferred boundary that has not run is recorded as not reached. Each object that must
settle something joins :data:`LIVE` (held weakly: a dropped object is not kept alive) with what it does
in a forked child and at exit; one fork handler and one exit handler, installed once here, call them.
Objects settle in no particular order: each one's settling stands alone.

Examples:
    >>> class Counter:
    ...     def __init__(self):
    ...         self.forks = 0
    ...         LIVE.join(self, after_fork=Counter.forked)
    ...     def forked(self):
    ...         self.forks += 1
    >>> counter = Counter()
    >>> counter in LIVE
    True
    >>> LIVE.leave(counter)
    >>> counter in LIVE
    False
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

__all__ = ["LIVE", "Live"]

T = TypeVar("T")
Settle = Callable[[Any], None]

_log = logging.getLogger("ddo_hooks")


class Live:
    """The objects that settle at a fork and at exit, held weakly (see the module's docstring)."""

    def __init__(self) -> None:
        self._objects: weakref.WeakKeyDictionary[Any, tuple[Settle | None, Settle | None]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __contains__(self, thing: object) -> bool:
        return thing in self._objects

    def __iter__(self) -> Iterator[Any]:
        with self._lock:
            return iter(list(self._objects))

    def join(
        self, thing: T, *, after_fork: Callable[[T], None] | None = None, at_exit: Callable[[T], None] | None = None
    ) -> None:
        """Settle ``thing`` for as long as it lives (or until :meth:`leave`).

        Args:
            thing: The object (held weakly).
            after_fork: Called with it in a forked child: new locks, no timers, no shared descriptors.
            at_exit: Called with it before the interpreter exits.
        """
        with self._lock:
            self._objects[thing] = (after_fork, at_exit)

    def leave(self, thing: object) -> None:
        """Stop settling ``thing`` (nothing happens where it never joined)."""
        with self._lock:
            self._objects.pop(thing, None)

    def settle(self, how: Literal["after_fork", "at_exit"]) -> None:
        """Settle each live object ``how``; one that fails is logged, and the others still settle.

        At exit or in a fresh child there is nobody to raise to.
        """
        if how == "after_fork":
            self._lock = threading.Lock()  # another thread of the parent may have held it at the fork
        with self._lock:
            pairs = list(self._objects.items())
        for thing, (after_fork, at_exit) in pairs:
            settle = after_fork if how == "after_fork" else at_exit
            try:
                if settle is not None:
                    settle(thing)
            except Exception:
                _log.warning("ddo_hooks: settling %r %s failed", thing, how.replace("_", " "), exc_info=True)


LIVE = Live()
"""The process's live objects: boundary runners, report trackers, the idle scheduler, the file watcher."""

atexit.register(LIVE.settle, "at_exit")
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: LIVE.settle("after_fork"))
