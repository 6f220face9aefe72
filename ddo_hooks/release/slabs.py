"""Where pinned copies go when they are repacked: a few slabs whose sizes are powers of two.

PyTorch's caching host allocator rounds every pinned block up to a power of two, so a copy of
2.1 MiB owns 4 MiB. Copies placed back to back in slabs that are already powers of two own what
they need, plus the slabs' unused tails. :func:`plan_slabs` decides the slabs and where each
copy goes; it is pure arithmetic, with no torch in it.

Each slab is filled first-fit in decreasing size. Its size is the largest power of two not above
what remains (capped at ``max_slab``), or the power of two that holds the largest remaining
copy when that is more; several caps are tried and the plan with the fewest bytes wins.

Examples:
    >>> plan = plan_slabs([3 << 20, 3 << 20, 2 << 20, 1 << 20, 4096])
    >>> [slab.size // 1024 for slab in plan.slabs]  # KiB
    [8192, 1024, 4]
    >>> plan.capacity - plan.needed  # bytes beyond the copies: in the slabs
    0
    >>> plan.rounded - plan.needed  # ... and in one block each
    2097152
    >>> rounded_size(3 << 20) >> 20  # what the copy owns on its own
    4
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ALIGNMENT",
    "LARGE_ALIGNMENT",
    "LARGE_COPY_BYTES",
    "MAX_SLAB_BYTES",
    "MIN_SLAB_BYTES",
    "Slab",
    "SlabPlan",
    "plan_slabs",
    "rounded_size",
]

ALIGNMENT = 64
"""Each copy starts at a multiple of this many bytes (a cache line; any dtype's alignment) ..."""
LARGE_ALIGNMENT = 4096
"""... and a copy of :data:`LARGE_COPY_BYTES` or more at a multiple of a page (slabs are filled largest first)."""
LARGE_COPY_BYTES = 1024**2
"""Copies from this size on start on a page boundary."""
MIN_SLAB_BYTES = 4096
"""The smallest slab planned (a page): tiny tails share one instead of owning a block each."""
MAX_SLAB_BYTES = 2 * 1024**3
"""The largest slab planned (the largest cap tried)."""


def rounded_size(nbytes: int) -> int:
    """The bytes the caching host allocator owns for a block of ``nbytes``: the next power of two."""
    return 1 << max(nbytes - 1, 0).bit_length()


def _aligned(nbytes: int) -> int:
    """``nbytes`` padded so that, placed largest first, every copy starts at its alignment."""
    alignment = LARGE_ALIGNMENT if nbytes >= LARGE_COPY_BYTES else ALIGNMENT
    return -(-nbytes // alignment) * alignment


@dataclass(frozen=True)
class Slab:
    """One slab: its size (a power of two), the ``(copy index, byte offset)`` of each copy in it, its unused bytes."""

    size: int
    placements: tuple[tuple[int, int], ...]
    free: int


@dataclass(frozen=True)
class SlabPlan:
    """Slabs for a set of copies.

    Attributes:
        slabs: The slabs, largest first.
        needed: The copies' own bytes (their sum).
        capacity: The slabs' bytes (their sum): what the allocator will own for them.
        rounded: What the copies own one block each (each size rounded up to a power of two).
    """

    slabs: tuple[Slab, ...]
    needed: int
    capacity: int
    rounded: int

    def placement(self) -> dict[int, tuple[int, int]]:
        """Each copy index's ``(slab index, byte offset)``."""
        return {index: (n, offset) for n, slab in enumerate(self.slabs) for index, offset in slab.placements}


def _fill(items: list[tuple[int, int]], max_slab: int) -> list[Slab]:
    """First-fit-decreasing slabs for ``items`` (``(aligned size, index)``, largest first)."""
    slabs: list[Slab] = []
    remaining = items
    while remaining:
        total = sum(size for size, _ in remaining)
        largest = rounded_size(remaining[0][0])
        size = max(largest, min(max_slab, 1 << (total.bit_length() - 1)), MIN_SLAB_BYTES)
        used, placed, rest = 0, [], []
        for item, index in remaining:
            if used + item <= size:
                placed.append((index, used))
                used += item
            else:
                rest.append((item, index))
        slabs.append(Slab(size, tuple(placed), size - used))
        remaining = rest
    return slabs


def plan_slabs(sizes: Sequence[int], *, max_slab: int = MAX_SLAB_BYTES) -> SlabPlan:
    """Plan slabs for copies of ``sizes`` bytes (copy ``i`` has ``sizes[i]`` bytes; zero-sized ones get no place).

    Args:
        sizes: Each copy's bytes.
        max_slab: The largest slab to plan (a power of two); smaller caps are tried too.

    Returns:
        The plan with the least capacity (then the fewest slabs).

    Raises:
        ValueError: A size is negative, or ``max_slab`` is not a power of two.

    Examples:
        >>> plan_slabs([]).capacity
        0
        >>> plan_slabs([100]).slabs[0].size == MIN_SLAB_BYTES  # one tiny copy: the smallest slab
        True
    """
    if any(size < 0 for size in sizes):
        raise ValueError("a copy cannot have a negative size")
    if max_slab <= 0 or max_slab & (max_slab - 1):
        raise ValueError(f"max_slab must be a power of two, got {max_slab}")
    items = sorted(((_aligned(size), index) for index, size in enumerate(sizes) if size > 0), reverse=True)
    needed = sum(sizes)
    rounded = sum(rounded_size(size) for size in sizes if size > 0)
    best: list[Slab] = []
    cap = max_slab
    while True:
        slabs = _fill(items, cap)
        if not best or (sum(s.size for s in slabs), len(slabs)) < (sum(s.size for s in best), len(best)):
            best = slabs
        if cap <= MIN_SLAB_BYTES:
            break
        cap //= 2
    return SlabPlan(tuple(best), needed, sum(slab.size for slab in best), rounded)
