"""Giving back the resident pages of a component's weights that are clean views of its weights files.

``from_pretrained`` with a matching dtype leaves a component's CPU weights as views of the
safetensors files' private mappings: their pages count as ``RssFile``. While a page
is clean, ``madvise(MADV_DONTNEED)`` takes it out of the process, and the next read faults it back
in from the page cache (or the file), unchanged. A page that was written (a fused LoRA, an
in-place edit) became an anonymous copy-on-write page: dropping it would bring back the file's
bytes, so a component with any such page is left exactly as it is.

:func:`give_back_file_pages` finds every CPU storage of a module (its parameters and buffers, and
the CPU sources of its group-offloading groups), keeps those inside a private mapping of a regular
file (``/proc/self/maps``), checks every page of them in ``/proc/self/pagemap`` (present and not a
file page, or swapped: written), and only then drops them. It runs at a quiet boundary, under the
release slot, where nothing reads or writes the weights. Linux only; elsewhere it says so.

Examples:
    >>> import torch
    >>> pages = give_back_file_pages("linear", torch.nn.Linear(4, 4))
    >>> pages.outcome, pages.reason if sys.platform.startswith("linux") else "not_file_backed"
    ('left', 'not_file_backed')
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import functools
import mmap
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.reports.done_components import ComponentPages

__all__ = [
    "PAGE_SIZE",
    "Mapping",
    "give_back_file_pages",
    "in_file_view",
    "left_shared",
    "mapping_at",
    "mappings",
    "supported",
]

PAGE_SIZE = mmap.PAGESIZE
_SWAPPED, _FILE = 1 << 62, 1 << 61  # /proc/<pid>/pagemap bits (Documentation/admin-guide/mm); 63: present
_MADV_DONTNEED = 4


@dataclass(frozen=True)
class Mapping:
    """One line of ``/proc/self/maps``."""

    start: int
    end: int
    private_file: bool
    """A private mapping of a regular file (also one deleted since it was mapped)."""
    path: str = ""
    """The file's path as the kernel shows it, without its `` (deleted)`` mark."""
    offset: int = 0
    """Where in the file the mapping starts."""
    inode: int = 0
    """The mapped file's inode number."""
    deleted: bool = False
    """The file was deleted (or replaced by a rename) since it was mapped."""


@functools.cache  # once per process: neither the platform nor the pagemap's permissions change
def supported() -> str | None:
    """``None`` where pages can be given back here, else why not (the platform, an unreadable pagemap)."""
    if not sys.platform.startswith("linux"):
        return f"giving back file pages needs Linux's /proc/self/pagemap and madvise; this is {sys.platform}"
    try:
        with open("/proc/self/pagemap", "rb") as pagemap:
            pagemap.read(8)
    except OSError as e:
        return f"/proc/self/pagemap cannot be read here ({e.strerror or e})"
    if _madvise() is None:
        return "the C library has no madvise"
    return None


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]  # ctypes' function pointer type is private, and typeshed has it only as _ctypes.CFuncPtr
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    advise = getattr(libc, "madvise", None)
    if advise is not None:
        advise.argtypes, advise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return advise


@functools.lru_cache(maxsize=256)
def _regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


_DELETED = " (deleted)"


def mappings() -> list[Mapping]:
    """The process's mappings, sorted, each marked when it is a private mapping of a regular file.

    A file deleted or replaced by a rename since it was mapped still backs its mapping (the mapping
    holds its inode): ``/proc/self/map_files`` says whether that inode is a regular file.
    """
    found = []
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, _, end = fields[0].partition("-")
            path = fields[5].rstrip("\n") if len(fields) > 5 else ""
            deleted = path.endswith(_DELETED)
            path = path.removesuffix(_DELETED)
            private = fields[1][3] == "p" and path.startswith("/")
            regular = _mapped_regular(fields[0]) if deleted else _regular_file(path)
            found.append(Mapping(int(start, 16), int(end, 16), private and regular, path, int(fields[2], 16),
                                 int(fields[4]), deleted))  # fmt: skip
    return found


def _mapped_regular(span: str) -> bool:
    """Whether the mapping ``start-end`` maps a regular file, through ``/proc/self/map_files`` (its inode itself)."""
    try:
        return stat.S_ISREG(os.stat(f"/proc/self/map_files/{span}").st_mode)
    except OSError:
        return False


def mapping_at(mappings: list[Mapping]) -> Callable[[int, int], Mapping | None]:
    """A lookup of the private file mapping that holds ``size`` bytes at ``address`` whole, or ``None``."""
    starts = [m.start for m in mappings]

    def at(address: int, size: int) -> Mapping | None:
        index = bisect.bisect_right(starts, address) - 1
        if index < 0 or not mappings[index].private_file or address + size > mappings[index].end:
            return None
        return mappings[index]

    return at


def in_file_view(mappings: list[Mapping]) -> Callable[[int, int], bool]:
    """A test of whether ``size`` bytes at ``address`` lie inside one private mapping of a regular file."""
    at = mapping_at(mappings)
    return lambda address, size: at(address, size) is not None


def _storages(module: torch.nn.Module) -> dict[int, int]:
    """Each CPU storage the module's weights use, by address: its size in bytes."""
    tensors = [t.data for t in module.parameters()] + [t.data for t in module.buffers()]
    for group in diffusers_compat.offload_groups(module):
        tensors += [t for t in diffusers_compat.group_cpu_sources(group).values() if isinstance(t, torch.Tensor)]
    storages: dict[int, int] = {}
    for tensor in tensors:
        if tensor.device.type != "cpu" or tensor.layout is not torch.strided:
            continue
        storage = tensor.untyped_storage()
        if storage.nbytes():
            storages[storage.data_ptr()] = storage.nbytes()
    return storages


def _page_runs(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The whole pages that cover ``ranges``, merged: ``(first page address, end address)``."""
    runs: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        first, last = start - start % PAGE_SIZE, -(-end // PAGE_SIZE) * PAGE_SIZE
        if runs and first <= runs[-1][1]:
            runs[-1] = (runs[-1][0], max(runs[-1][1], last))
        else:
            runs.append((first, last))
    return runs


def _entries(pagemap: object, start: int, end: int) -> Iterator[torch.Tensor]:
    """The pagemap entries of the pages from ``start`` to ``end``, 65,536 at a time (as ``int64``)."""
    chunk = 1 << 16
    for page in range(start // PAGE_SIZE, end // PAGE_SIZE, chunk):
        count = min(chunk, end // PAGE_SIZE - page)
        pagemap.seek(page * 8)  # type: ignore[attr-defined]  # a file opened in binary mode, typed as an object by its caller
        yield torch.frombuffer(bytearray(pagemap.read(count * 8)), dtype=torch.int64)  # type: ignore[attr-defined]  # the same binary file: read() is there


def _census(runs: list[tuple[int, int]]) -> tuple[int, int]:
    """How many pages of ``runs`` are resident file pages, and how many were written (anonymous or swapped).

    Counted a chunk of entries at a time, not entry by entry: 1.38 GiB of pages are 362,000 entries.
    """
    resident = written = 0
    with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
        for start, end in runs:
            for entries in _entries(pagemap, start, end):
                more_resident, more_written = _count(entries)
                resident, written = resident + more_resident, written + more_written
    return resident, written


def _count(entries: torch.Tensor) -> tuple[int, int]:
    """How many of these pagemap entries (``int64``) are resident file pages, and how many were written.

    Written: swapped, or present and anonymous (a private file page once written is an anonymous copy).
    """
    present = entries < 0  # bit 63 is the sign bit of an int64
    swapped, file = (entries & _SWAPPED) != 0, (entries & _FILE) != 0
    return int((present & file & ~swapped).sum()), int((swapped | (present & ~file)).sum())


_count(torch.zeros(1 << 16, dtype=torch.int64))  # its kernels' code pages in now, not in a report's RssFile figures


def _left(name: str, reason: str, detail: str, file_bytes: int, other_bytes: int, started: float) -> ComponentPages:
    return ComponentPages(
        component=name,
        outcome="left",
        reason=reason,  # type: ignore[arg-type]  # the reasons a caller passes are a Literal's; the callers pass them as str
        detail=detail,
        file_bytes=file_bytes,
        other_bytes=other_bytes,
        resident_bytes=None,
        released_bytes=0,
        seconds=time.perf_counter() - started,
    )


def left_pinned(name: str, module: torch.nn.Module, mode: str) -> ComponentPages:
    """``module`` left as it is because ``pinned_copies.from_files`` pinned its weights (``register`` or ``stage``)."""
    how = "registered in place" if mode == "register" else "staged into exact-size slabs"
    detail = f"its weights were pinned from its files at attach ({how}), and its onloads read them until detach"
    return _left(name, "pinned_from_files", detail, 0, sum(_storages(module).values()), time.perf_counter())


def left_shared(name: str, module: torch.nn.Module, holder: str) -> ComponentPages:
    """``module`` left as it is because the attached pipeline ``holder`` holds it too."""
    detail = f"the attached {holder} holds it too, and its calls would pay for the page faults"
    return _left(name, "shared", detail, 0, sum(_storages(module).values()), time.perf_counter())


def _evict(ranges: list[tuple[int, int, Mapping | None]]) -> None:
    """``posix_fadvise(POSIX_FADV_DONTNEED)`` on the file span of the ranges of each mapping (its own inode).

    One span per mapping, from its first range's page to its last's: the kernel keeps any page, or
    large folio, that the advised range covers only in part, so advising tensor by tensor leaves most
    of them cached.
    """
    if not hasattr(os, "posix_fadvise"):
        return
    spans: dict[Mapping, tuple[int, int]] = {}
    for start, end, mapping in ranges:
        if mapping is not None:
            low, high = spans.get(mapping, (start, end))
            spans[mapping] = (min(low, start), max(high, end))
    for mapping, (start, end) in spans.items():
        path = f"/proc/self/map_files/{mapping.start:x}-{mapping.end:x}" if mapping.deleted else mapping.path
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # the pages are dropped from the process all the same; the cgroup's figure tells
        try:
            if os.fstat(fd).st_ino == mapping.inode:
                first = start - start % PAGE_SIZE
                offset = mapping.offset + first - mapping.start
                os.posix_fadvise(fd, offset, -(-(end - first) // PAGE_SIZE) * PAGE_SIZE, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def give_back_file_pages(
    name: str, module: torch.nn.Module, *, replaced_bytes: int = 0, evict: bool = False
) -> ComponentPages:
    """Drop the resident pages of ``module``'s weights that are clean views of its weights files.

    Dropped pages leave the process (``RssFile``), not the machine: they stay in the page cache,
    charged to the cgroup that read them, until the kernel reclaims them. ``evict`` also asks the
    kernel to drop them from the page cache (``posix_fadvise(POSIX_FADV_DONTNEED)`` on each file
    range; pages another process maps stay), so that they leave the cgroup's charge; the next use
    reads them from the disk again (major faults).

    Args:
        name: The component's name, for the report.
        module: The component.
        replaced_bytes: Bytes of copies just replaced by its file views
            (:func:`~ddo_hooks.release.file_views.rebind_to_files`), for the report.
        evict: Evict the ranges from the page cache too.

    Returns:
        What it gave back: ``released`` with the resident bytes dropped, or ``left`` (nothing
        changed) with the reason: ``not_file_backed`` (no weight is a view of a file: built in
        memory, converted at load, or pinned copies), ``modified`` (a page of its file views was
        written) or ``unsupported`` (not Linux, no pagemap).

    Raises:
        OSError: ``madvise`` failed (the pages already dropped are views of clean file pages, so
            nothing is lost; the error names the range).
    """
    started = time.perf_counter()
    storages = _storages(module)
    total = sum(storages.values())
    why = supported()
    if why is not None:
        return _left(name, "unsupported", why, 0, total, started)
    at = mapping_at(mappings())
    in_files = [(address, address + size) for address, size in storages.items() if at(address, size)]
    file_bytes = sum(end - start for start, end in in_files)
    other_bytes = total - file_bytes
    if not in_files:
        detail = f"none of its {total} bytes of CPU weights is a view of a weights file (built in memory, "
        detail += "converted when loaded, or offloaded to pinned copies)"
        return _left(name, "not_file_backed", detail, 0, other_bytes, started)
    runs = _page_runs(in_files)
    resident, written = _census(runs)
    if written:
        detail = f"{written} page(s) of its file-backed weights were written (e.g. a fused LoRA or an in-place edit): "
        detail += "dropping them would bring back the file's bytes, so it keeps every page"
        return _left(name, "modified", detail, file_bytes, other_bytes, started)
    advise = _madvise()
    for start, end in runs:
        if advise(start, end - start, _MADV_DONTNEED) != 0:  # type: ignore[misc]  # a ctypes function: mypy sees no signature to call
            error = ctypes.get_errno()
            raise OSError(error, f"madvise(MADV_DONTNEED) of {name}'s pages {start:#x}-{end:#x}: {os.strerror(error)}")
    if evict:
        _evict([(start, end, at(start, end - start)) for start, end in in_files])
    kept = f"; {other_bytes} bytes are not file views and stay" if other_bytes else ""
    if evict:
        kept += "; their file ranges were evicted from the page cache"
    if any((m := at(start, end - start)) is not None and m.deleted for start, end in in_files):
        kept += (
            "; its weights file was deleted or replaced since it was loaded (the pages come back from the file it read)"
        )
    if replaced_bytes:
        kept += f"; {replaced_bytes} bytes of copies of them were freed first"
    return ComponentPages(
        component=name,
        outcome="released",
        reason=None,
        detail=f"dropped {resident} resident page(s) of its {file_bytes} bytes of clean file-backed weights{kept}",
        file_bytes=file_bytes,
        other_bytes=other_bytes,
        replaced_bytes=replaced_bytes,
        resident_bytes=resident * PAGE_SIZE,
        released_bytes=resident * PAGE_SIZE,
        seconds=time.perf_counter() - started,
    )
