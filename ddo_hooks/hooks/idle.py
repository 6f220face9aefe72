"""Deferred boundaries: the scheduler that runs a boundary once a pipeline has been idle long enough.

A policy's ``after_call: {idle: 2s}`` asks for the ``after_call`` actions to run only after the
pipeline has been idle for two seconds, and not at all when the next call starts before that.
The attachment schedules them here. :class:`ThreadScheduler` (the default) runs them on a daemon
timer thread; tests use :func:`use_scheduler` with a fake clock. Pending runs are cancelled at
interpreter exit; a forked child starts with none.

Examples:
    >>> ran = []
    >>> handle = scheduler().call_later(3600, lambda: ran.append(True))
    >>> handle.cancel()
    >>> ran
    []
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

__all__ = ["Handle", "Scheduler", "ThreadScheduler", "scheduler", "use_scheduler"]


class Handle(Protocol):
    """A scheduled run."""

    def cancel(self) -> None:
        """Cancel it; a run that already started finishes."""
        ...


class Scheduler(Protocol):
    """What the attachment needs to defer a boundary."""

    def call_later(self, delay: float, function: Callable[[], None]) -> Handle:
        """Run ``function`` once, ``delay`` seconds from now, unless cancelled."""
        ...


_PENDING: weakref.WeakSet[threading.Timer] = weakref.WeakSet()


class ThreadScheduler:
    """Runs each deferred boundary on a daemon :class:`threading.Timer`."""

    def call_later(self, delay: float, function: Callable[[], None]) -> Handle:
        """Start a daemon timer that calls ``function`` after ``delay`` seconds."""
        timer = threading.Timer(delay, function)
        timer.daemon = True
        _PENDING.add(timer)
        timer.start()
        return timer


@atexit.register
def _cancel_pending() -> None:
    for timer in list(_PENDING):
        timer.cancel()


if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's timer threads
    os.register_at_fork(after_in_child=_PENDING.clear)


_SCHEDULER: Scheduler = ThreadScheduler()


def scheduler() -> Scheduler:
    """The scheduler attachments defer their boundaries with."""
    return _SCHEDULER


@contextlib.contextmanager
def use_scheduler(replacement: Scheduler) -> Iterator[Scheduler]:
    """Use ``replacement`` inside the block (tests: a fake clock instead of timer threads)."""
    global _SCHEDULER
    previous, _SCHEDULER = _SCHEDULER, replacement
    try:
        yield replacement
    finally:
        _SCHEDULER = previous
