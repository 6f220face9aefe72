"""The two ways of pinning a component's weights from their files, and the files they read.

:mod:`ddo_hooks.release.from_files` decides what to pin and where each weight lies in its file
(:class:`Located`); this module pins it: :func:`register` maps the files again, shared and read-only, and
registers those pages in place (``cudaHostRegister``, no copy), and :func:`stage` copies the weights into
exact-size slabs, dropping each file page once copied. Both open each file once and check it on the opened
descriptor (:func:`open_files`): a regular file, the inode the weights map, holding every view's bytes. What they
did is a :class:`Pinned`, which says how to undo it; ``register`` keeps its files open (:attr:`Pinned.files`), so
that a rewrite in place of the pages it pinned is told at the next call.
"""

from __future__ import annotations

import mmap
import os
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ddo_hooks.release import allocator as _allocator
from ddo_hooks.release import file_pages
from ddo_hooks.release.pinned_copies import Component, Left, Stored, refuse
from ddo_hooks.release.slabs import plan_slabs
from ddo_hooks.release.weights_files import HeldFile, Refused

__all__ = ["Located", "Pinned", "register", "stage"]

FromFilesMode = Literal["register", "stage"]
"""How a component is pinned from its files: in place (``register``) or into exact-size slabs (``stage``)."""


@dataclass
class Pinned:
    """What :func:`register` or :func:`stage` did to one component, and how to undo it."""

    mode: FromFilesMode
    restore: list[tuple[Stored, torch.Tensor]]
    """Each storage moved, and the view it was before."""
    finalizer: weakref.finalize | None = None
    """``register``: unregisters the ranges (when the component is collected, or when it is unpinned)."""
    files: tuple[HeldFile, ...] = ()
    """``register``: each file whose pages are registered, held open (the inode they are): a rewrite in place
    would change them under the weights."""
    slabs: tuple[int, ...] = ()
    """``stage``: the slabs' sizes."""


@dataclass(frozen=True)
class Located:
    """Where a view's bytes are in its file."""

    mapping: file_pages.Mapping
    offset: int
    nbytes: int


def open_files(name: str, located: list[Located]) -> dict[str, HeldFile]:
    """Each file the weights map, held open (:class:`~ddo_hooks.release.weights_files.HeldFile`), by path.

    Checked on the opened descriptor (``fstat``): it must be the regular file the weights map (the
    mapping's inode) and still hold every view's bytes, since a file truncated since the load would
    make ``mmap`` fail, or kill the process (``SIGBUS``) where a view past its end is read. The
    caller closes them (:func:`_close`), or keeps them to judge later changes by.

    Raises:
        Left: ``file_changed``, naming the file and the fix (nothing is left open).
    """
    opened: dict[str, HeldFile] = {}
    needed: dict[str, int] = {}
    for where in located:
        needed[where.mapping.path] = max(needed.get(where.mapping.path, 0), where.offset + where.nbytes)
    try:
        for path, need in needed.items():
            try:
                opened[path] = held = HeldFile(path)  # without blocking: a FIFO never waits
            except Refused as e:
                raise refuse("file_changed", f"{name}'s weights file {e}; load the pipeline again") from None
            if held.key[1] != next(w.mapping.inode for w in located if w.mapping.path == path):
                raise refuse("file_changed", f"{name}'s weights file {path} was replaced while it was opened; "
                                             "load the pipeline again")  # fmt: skip
            if held.size < need:
                raise refuse("file_changed", f"{name}'s weights file {path} was truncated since it was loaded: it "
                                             f"holds {held.size:,} bytes, its weights need {need:,}; load the "
                                             "pipeline again")  # fmt: skip
    except Left:
        _close(opened)
        raise
    return opened


def _close(opened: dict[str, HeldFile]) -> None:
    for held in opened.values():
        held.close()


def _switch(component: Component, targets: list[torch.Tensor]) -> list[tuple[Stored, torch.Tensor]]:
    """Point each storage at its target (cannot fail halfway); what each was, for :func:`unpin_from_files`."""
    from ddo_hooks.release.repack import switch

    before = [(entry, entry.tensor) for entry in component.stored]
    switch(component, targets)
    return before


def register(
    name: str, module: torch.nn.Module, component: Component, located: list[Located]
) -> tuple[Pinned, int, str]:
    """Map the files again, shared and read-only, and register the weights' pages in place."""
    opened = open_files(name, located)  # held open while registered: a rewrite in place would change the pages
    try:
        return _register_held(name, module, component, located, opened)
    except Left:
        _close(opened)
        raise


def _register_held(
    name: str, module: torch.nn.Module, component: Component, located: list[Located], opened: dict[str, HeldFile]
) -> tuple[Pinned, int, str]:
    """:func:`register` with the files opened; on a refusal the caller closes them."""
    backend = _allocator.backend()
    maps: dict[str, mmap.mmap] = {}
    for path, file in opened.items():
        try:
            maps[path] = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)  # shared: the page cache's own pages
        except (ValueError, OSError) as e:  # an empty file, or one truncated right now
            raise refuse("file_changed", f"{name}'s weights file {path} cannot be mapped now ({e}): load the "
                                         "pipeline again") from None  # fmt: skip
    views: list[torch.Tensor] = []
    spans: dict[str, list[tuple[int, int]]] = {path: [] for path in maps}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "the given buffer is not writable": read-only on purpose
        for entry, where in zip(component.stored, located, strict=True):
            if where.offset % entry.tensor.element_size():
                raise refuse(
                    "unsupported_tensor", f"{name}'s {where.mapping.path} holds a weight at an unaligned offset"
                )
            try:
                raw = torch.frombuffer(
                    maps[where.mapping.path], dtype=torch.uint8, count=entry.nbytes, offset=where.offset
                )
            except ValueError as e:  # the file is shorter than the mapping needs: truncated since it was opened
                raise refuse("file_changed", f"{name}'s weights file {where.mapping.path} no longer holds its "
                                             f"weights ({e}): load the pipeline again") from None  # fmt: skip
            view = raw.view(entry.tensor.dtype).view(entry.tensor.shape)
            views.append(view)
            spans[where.mapping.path].append((view.data_ptr(), view.data_ptr() + entry.nbytes))
    runs = [run for path in maps for run in file_pages._page_runs(spans[path])]
    done: list[int] = []
    try:
        for start, end in runs:
            backend.register(start, end - start)
            done.append(start)
    except Exception as e:
        _unregister(backend, done)
        raise refuse("pin_failed", f"registering {name}'s weights in place failed: {e}".splitlines()[0]) from e
    held = tuple(opened.values())
    restore = _switch(component, views)
    pinned = Pinned("register", restore, files=held)
    pinned.finalizer = weakref.finalize(module, _unregister, backend, done, (list(maps.values()), held))
    pinned.finalizer.atexit = False  # at exit the process's registrations go with it
    total = sum(end - start for start, end in runs)
    files = ", ".join(sorted(os.path.basename(p) for p in maps))
    return pinned, total, f"{len(views)} weights registered in place in {files}: {total:,} bytes, no copy"


def _unregister(backend: Any, starts: list[int], keep: Any = None) -> None:
    """Unregister each range (``keep``: the mappings, which must outlive the registration)."""
    for start in starts:
        backend.unregister(start)


def stage(name: str, module: torch.nn.Module, component: Component, located: list[Located]) -> tuple[Pinned, int, str]:
    """Copy the weights into exact-size slabs, one slab at a time, dropping each copied range's pages."""
    from ddo_hooks.release.repack import pin_slabs

    plan = plan_slabs([entry.nbytes for entry in component.stored])
    opened = open_files(name, located)
    try:
        targets = pin_slabs(
            plan,
            component.stored,
            lambda index: _drop_pages(component.stored[index].tensor, located[index], opened),
        )
    except RuntimeError as e:  # out of pinned memory: nothing has changed (the dropped pages come back on use)
        raise refuse("pin_failed", f"pinning {name}'s slabs failed: {e}".splitlines()[0]) from e
    finally:
        _close(opened)
    restore = _switch(component, targets)
    detail = f"{len(targets)} weights staged into {len(plan.slabs)} slabs, each file page dropped once copied"
    return Pinned("stage", restore, slabs=tuple(slab.size for slab in plan.slabs)), plan.capacity, detail


def _drop_pages(source: torch.Tensor, where: Located, opened: dict[str, HeldFile]) -> None:
    """Take a copied view's pages out of the process, then out of the page cache (they are read again on use)."""
    nbytes = source.numel() * source.element_size()
    advise = file_pages._madvise()
    for start, end in file_pages._page_runs([(source.data_ptr(), source.data_ptr() + nbytes)]):
        if advise is not None:
            advise(start, end - start, file_pages._MADV_DONTNEED)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(opened[where.mapping.path].fileno(), where.offset, nbytes, os.POSIX_FADV_DONTNEED)
