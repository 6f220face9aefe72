"""Deferred boundaries: the scheduler that runs a boundary once a pipeline has been idle long enough.

A policy's ``after_call: {idle: 2s}`` asks for the ``after_call`` actions to run only after the
pipeline has been idle for two seconds, and not at all when the next call starts before that.
The attachment schedules them here. :class:`ThreadScheduler` (the default) runs them on a daemon
timer thread; tests use :func:`use_scheduler` with a fake clock. The scheduler keeps nothing: each
run it starts belongs to a boundary runner, which cancels its own at interpreter exit and forgets
them in a forked child.

Examples:
    >>> ran = []
    >>> handle = scheduler().call_later(3600, lambda: ran.append(True))
    >>> handle.cancel()
    >>> ran
    []
"""

from __future__ import annotations

import contextlib
import threading
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


class ThreadScheduler:
    """Runs each deferred boundary on a daemon :class:`threading.Timer`, and keeps none of them."""

    def call_later(self, delay: float, function: Callable[[], None]) -> Handle:
        """Start a daemon timer that calls ``function`` after ``delay`` seconds."""
        timer = threading.Timer(delay, function)
        timer.daemon = True
        timer.start()
        return timer


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
