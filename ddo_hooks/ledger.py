"""What was done to each object, in one weak table: the one place ddo_hooks keeps per-object state.

Three things are done to a component's weights that must be known later (at a call's start, at a
boundary, at detach): its weights files' identity noted at attach
(:func:`~ddo_hooks.release.weights_files.note_files`), its copies replaced by views of its files
(:func:`~ddo_hooks.release.file_views.rebind_to_files`), its weights pinned from its files
(:func:`~ddo_hooks.release.from_files.pin_from_files`); and of an offload group, its copies moved into
slabs (:func:`~ddo_hooks.release.repack.repack_pinned_copies`). Two are done to a pipeline: it is attached
(:func:`~ddo_hooks.attach`), and its signal hooks are installed, its class swapped for one whose ``__call__``
signals (:mod:`~ddo_hooks.hooks.signals`); and that class is made once for the pipeline's own class. Each
is a field of the object's :class:`Entry` in :data:`LEDGER`, keyed weakly by the object: a dropped component
or pipeline is not kept alive, and its entry goes with it. Three verbs: :meth:`Ledger.read` (an empty entry
for an object never written, or one that cannot be weakly referenced), :meth:`Ledger.write`,
:meth:`Ledger.erase` (the field's old value; the entry goes once it holds nothing); and
:meth:`Ledger.holders`, every object with a field set.

An object that holds threads, locks or descriptors writes what a fork and the interpreter's exit must settle
of it (``settles``): a forked child has only the thread that forked, so a lock another thread of the parent
held stays held there, the parent's timer threads are gone, and an inotify descriptor would be shared with
the parent; at exit, a deferred boundary that has not run is recorded as not reached. One fork handler and
one exit handler, installed here, call :meth:`Ledger.settle`: each object settles on its own, in no
particular order.

Examples:
    >>> import torch
    >>> ledger, module = Ledger(), torch.nn.Linear(2, 2)
    >>> ledger.write(module, noted={})
    >>> ledger.read(module).noted, ledger.erase(module, "noted"), len(ledger)
    ({}, {}, 0)
    >>> ledger.read(object()).pinned is None  # nothing written, nothing kept
    True
    >>> ledger.write(module, settles=Settles(after_fork=print))
    >>> ledger.holders("settles") == [(module, Settles(after_fork=print))]
    True
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

__all__ = ["LEDGER", "Entry", "Ledger", "Settles"]

Field = Literal["noted", "rebound", "pinned", "repacked", "attached", "signals", "call_class", "settles"]

_log = logging.getLogger("ddo_hooks")


class Settles(NamedTuple):
    """What a fork and the interpreter's exit do to an object: each called with it (``None``: nothing)."""

    after_fork: Callable[[Any], None] | None = None
    """In a forked child: new locks, no timers, no shared descriptors."""
    at_exit: Callable[[Any], None] | None = None
    """Before the interpreter exits."""


@dataclass
class Entry:
    """What was done to one object (``None``: not that).

    The modules that write a field own its type (the ledger imports none of them: they import it).
    """

    noted: dict[str, Any] | None = None
    """Its weights files, each with its :class:`~ddo_hooks.release.weights_files.FileIdentity` at attach: a copy
    that differs from a file changed since is told from an edit of the copy. Kept across attachments: its copies
    are what it loaded then."""
    rebound: Any = None
    """Its copies replaced by views of its files (``release_done_components``' ``stable_files``): a
    :class:`~ddo_hooks.release.file_views.Rebound`."""
    pinned: Any = None
    """Its weights pinned from its files (``pinned_copies.from_files``): a
    :class:`~ddo_hooks.release.file_pins.Pinned`."""
    repacked: bool | None = None
    """An offload group whose copies live in slabs already (``True``; its key is the group, not a module)."""
    attached: Any = None
    """A pipeline's :class:`~ddo_hooks.hooks.attachment.Attachment`: a second attach is refused."""
    signals: Any = None
    """A pipeline's installed :class:`~ddo_hooks.hooks.signals.PipelineSignals`, which its ``__call__`` runs."""
    call_class: type | None = None
    """A pipeline class's subclass whose ``__call__`` signals, made once (its key is the class)."""
    settles: Settles | None = None
    """What a fork and the exit settle of an object that holds threads, locks or descriptors: a boundary
    runner, a report tracker, the file watcher."""


class Ledger:
    """Each object's :class:`Entry`, held weakly (see the module's docstring)."""

    def __init__(self) -> None:
        self._entries: weakref.WeakKeyDictionary[Any, Entry] = weakref.WeakKeyDictionary()
        self._lock = threading.RLock()  # re-entrant: a finalizer run by a collection inside may write it

    def __len__(self) -> int:
        return len(self._entries)

    def holders(self, field: Field) -> list[tuple[Any, Any]]:
        """Each object whose ``field`` is set, with its value (a snapshot: the table may change meanwhile)."""
        with self._lock:
            entries = list(self._entries.items())
        return [(key, value) for key, entry in entries if (value := getattr(entry, field)) is not None]

    def read(self, module: Any) -> Entry:
        """``module``'s entry; an empty one, not kept, where nothing was written."""
        try:
            return self._entries.get(module) or Entry()
        except TypeError:  # not weakly referable: nothing can have been written
            return Entry()

    def write(self, module: Any, **fields: Any) -> None:
        """Set ``fields`` of ``module``'s entry (made on first write).

        Raises:
            TypeError: ``module`` cannot be weakly referenced, or a field is not one of :class:`Entry`'s.
        """
        unknown = [name for name in fields if name not in _FIELDS]
        if unknown:
            raise TypeError(f"the ledger has no field {unknown[0]!r}: {', '.join(_FIELDS)}")
        with self._lock:
            entry = self._entries.setdefault(module, Entry())
            for name, value in fields.items():
                setattr(entry, name, value)

    def erase(self, module: Any, field: Field) -> Any:
        """Clear ``field`` of ``module``'s entry and give its old value (``None`` where it was not set)."""
        with self._lock:
            try:
                entry = self._entries.get(module)
            except TypeError:
                return None
            if entry is None:
                return None
            old = getattr(entry, field)
            setattr(entry, field, None)
            if all(getattr(entry, name) is None for name in _FIELDS):
                del self._entries[module]
            return old

    def settle(self, how: Literal["after_fork", "at_exit"]) -> None:
        """Settle each object that wrote ``settles``, ``how``; one that fails is logged, and the others still settle.

        At exit or in a fresh child there is nobody to raise to.
        """
        if how == "after_fork":
            self._lock = threading.RLock()  # another thread of the parent may have held it at the fork
        for thing, settles in self.holders("settles"):
            settle = settles.after_fork if how == "after_fork" else settles.at_exit
            try:
                if settle is not None:
                    settle(thing)
            except Exception:
                _log.warning("ddo_hooks: settling %r %s failed", thing, how.replace("_", " "), exc_info=True)


_FIELDS = tuple(f.name for f in dataclasses.fields(Entry))

LEDGER = Ledger()
"""The process's ledger: every attachment's pipeline and components, and every object a fork or the exit settles."""

atexit.register(LEDGER.settle, "at_exit")
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: LEDGER.settle("after_fork"))
