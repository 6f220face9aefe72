"""The process-wide phase guard: no release beside loading, a pipeline call, or another release.

PyTorch's pinned host allocator is one per process, so the guard is too, and so is its one
rule: **a release runs only where no component is loading, no call of an attached pipeline is in
progress (other than the call whose own quiet point it is) and no other release runs.** Code
that loads components, runs a pipeline call or runs a denoising loop holds a *section*; a
release holds the *release slot*. A release requested while a section is open, or while
another release runs, is refused with :class:`~ddo_hooks.errors.BoundaryRefusedError`. A
boundary of a call runs inside :func:`quiet_point` of that call's own section, which is then
not counted. A section opened while a release runs waits for it to finish (a release takes well
under a second), so the two never overlap.

The phase hooks open sections for you. Hosts that load components themselves mark it:

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> from ddo_hooks.release import guard
    >>> from ddo_hooks.errors import BoundaryRefusedError
    >>> with guard.section("loading", "my_loader"):
    ...     try:
    ...         release_pytorch_host_cache(enabled=True, phase="manual")
    ...     except BoundaryRefusedError as e:
    ...         print(e.reason)
    loading
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from ddo_hooks.errors import BoundaryRefusedError, InvalidArgumentError

__all__ = [
    "Section",
    "SectionKind",
    "boundary_slot",
    "busy_reason",
    "enter",
    "exit",
    "quiet_point",
    "releasing",
    "section",
]

SectionKind = Literal["loading", "denoising", "inference"]
"""``loading``: components load, move or are re-hooked. ``denoising``: a denoising loop runs.
``inference``: a pipeline call is in progress (from its start to its end)."""

_REASONS = {"loading": "loading", "denoising": "denoising", "inference": "inference_in_progress"}
_PRIORITY = ("loading", "denoising", "inference")  # the reason reported when several sections are open
_VERBS = {
    "loading": "is loading components",
    "denoising": "is inside a denoising loop",
    "inference": "is running a pipeline call",
}


@dataclass(eq=False)
class Section:
    """An open section; pass it back to :func:`exit`."""

    kind: SectionKind
    owner: str
    thread: int
    closed: bool = False


_condition = threading.Condition()
_open: list[Section] = []
_release_thread: int | None = None
_boundary_held = False  # the slot is held by boundary_slot(): the holder's own releases run in it
_quiet = threading.local()  # .section: the section whose quiet point this thread is at


def enter(kind: SectionKind, owner: str) -> Section:
    """Open a section; waits while a release runs in another thread.

    Args:
        kind: ``"loading"``, ``"denoising"`` or ``"inference"``.
        owner: Who holds it (a pipeline or loader name), for messages.

    Raises:
        InvalidArgumentError: ``kind`` is not a section kind.
        BoundaryRefusedError: The calling thread is itself releasing (an action that loads
            inside a release would deadlock).
    """
    if kind not in _REASONS:
        raise InvalidArgumentError(f"guard section kind must be 'loading', 'denoising' or 'inference', got {kind!r}")
    me = threading.get_ident()
    with _condition:
        if _release_thread == me:
            raise BoundaryRefusedError(
                "release_in_progress", f"cannot open a {kind} section for {owner} inside a host-cache release"
            )
        _condition.wait_for(lambda: _release_thread is None)
        held = Section(kind, owner, me)
        _open.append(held)
        return held


def exit(held: Section) -> None:
    """Close a section opened by :func:`enter`; closing twice is a no-op."""
    with _condition:
        if not held.closed:
            held.closed = True
            _open.remove(held)


@contextlib.contextmanager
def section(kind: SectionKind, owner: str) -> Iterator[Section]:
    """Hold a section for the duration of a ``with`` block (closed on error too)."""
    held = enter(kind, owner)
    try:
        yield held
    finally:
        exit(held)


def busy_reason() -> tuple[str, str] | None:
    """Why a release would be refused right now, as ``(reason, sentence)``, or ``None``."""
    with _condition:
        return None if _nested() else _busy_locked()


def _busy_locked() -> tuple[str, str] | None:
    if _release_thread is not None:
        return "release_in_progress", "another host-cache release is running"
    exempt = getattr(_quiet, "section", None)
    held = [s for s in _open if s is not exempt]
    for kind in _PRIORITY:
        for section in held:
            if section.kind == kind:
                return _REASONS[kind], f"{section.owner} {_VERBS[kind]}"
    return None


@contextlib.contextmanager
def quiet_point(own: Section | None) -> Iterator[None]:
    """Mark the calling thread as at a quiet point of the call that holds ``own``.

    Inside the block, ``own`` (the call's ``inference`` section) does not make the process busy
    for releases requested by this thread; every other section still does. ``None`` exempts
    nothing (a host's request outside any call).
    """
    previous = getattr(_quiet, "section", None)
    _quiet.section = own
    try:
        yield
    finally:
        _quiet.section = previous


@contextlib.contextmanager
def releasing() -> Iterator[None]:
    """Take the release slot, or refuse at once if the process is not quiet.

    Inside :func:`boundary_slot` of the same thread the slot is held already, and a release runs in it.

    Raises:
        BoundaryRefusedError: A section is open or another release runs; ``reason`` says which.
    """
    if _nested():
        yield
        return
    with _taken(boundary=False):
        yield


@contextlib.contextmanager
def boundary_slot() -> Iterator[None]:
    """Take the release slot for every action of a boundary, or refuse at once as :func:`releasing` does.

    The boundary's own releases run inside it; nothing else of the process starts a section or a
    release until it ends. A boundary requested inside another boundary's slot is refused
    (``release_in_progress``).

    Raises:
        BoundaryRefusedError: A section is open or another release or boundary runs; its message is
            the sentence that says why, which the boundary's refusal report carries as its detail.
    """
    with _taken(boundary=True):
        yield


def _nested() -> bool:
    with _condition:
        return _boundary_held and _release_thread == threading.get_ident()


@contextlib.contextmanager
def _taken(*, boundary: bool) -> Iterator[None]:
    global _release_thread, _boundary_held
    with _condition:
        busy = _busy_locked()
        if busy is not None:
            reason, sentence = busy
            raise BoundaryRefusedError(reason, sentence if boundary else f"host-cache release refused: {sentence}")
        _release_thread, _boundary_held = threading.get_ident(), boundary
    try:
        yield
    finally:
        with _condition:
            _release_thread, _boundary_held = None, False
            _condition.notify_all()


def _after_fork_in_child() -> None:
    """Start over in a forked child, where only the forking thread lives.

    Sections and a release slot that other threads of the parent held would never be given back
    there, and the condition's lock may have been held at the fork.
    """
    global _condition, _release_thread, _boundary_held
    me = threading.get_ident()
    _condition = threading.Condition()
    _open[:] = [held for held in _open if held.thread == me]
    if _release_thread != me:
        _release_thread, _boundary_held = None, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
