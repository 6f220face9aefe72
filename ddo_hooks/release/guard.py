"""The process-wide phase guard: no release while loading, denoising, or releasing.

PyTorch's pinned host allocator is one per process, so the guard is too. Code that loads
components or runs a denoising loop holds a *section*; a release holds the *release slot*.
A release requested while any section is open, or while another release runs, is refused
with :class:`~ddo_hooks.errors.BoundaryRefusedError`. A section opened while a release runs
waits for it to finish (a release takes well under a second), so the two never overlap.

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
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from ddo_hooks.errors import BoundaryRefusedError, InvalidArgumentError

__all__ = ["Section", "SectionKind", "busy_reason", "enter", "exit", "releasing", "section"]

SectionKind = Literal["loading", "denoising"]


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


def enter(kind: SectionKind, owner: str) -> Section:
    """Open a section; waits while a release runs in another thread.

    Args:
        kind: ``"loading"`` or ``"denoising"``.
        owner: Who holds it (a pipeline or loader name), for messages.

    Raises:
        InvalidArgumentError: ``kind`` is not a section kind.
        BoundaryRefusedError: The calling thread is itself releasing (an action that loads
            inside a release would deadlock).
    """
    if kind not in ("loading", "denoising"):
        raise InvalidArgumentError(f"guard section kind must be 'loading' or 'denoising', got {kind!r}")
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
        return _busy_locked()


def _busy_locked() -> tuple[str, str] | None:
    if _release_thread is not None:
        return "release_in_progress", "another host-cache release is running"
    for held in _open:
        verb = "loading components" if held.kind == "loading" else "inside a denoising loop"
        return held.kind, f"{held.owner} is {verb}"
    return None


@contextlib.contextmanager
def releasing() -> Iterator[None]:
    """Take the release slot, or refuse at once if the process is not quiet.

    Raises:
        BoundaryRefusedError: A section is open or another release runs; ``reason`` says which.
    """
    global _release_thread
    with _condition:
        busy = _busy_locked()
        if busy is not None:
            reason, sentence = busy
            raise BoundaryRefusedError(reason, f"host-cache release refused: {sentence}")
        _release_thread = threading.get_ident()
    try:
        yield
    finally:
        with _condition:
            _release_thread = None
            _condition.notify_all()
