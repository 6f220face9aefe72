"""The ring: one fixed buffer on the device, the units copied into it in the order they run, copies under compute.

A *unit* is what runs as one piece (a transformer block): the tensors of it that stream, each at an
offset of its slot aligned to :data:`ALIGNMENT` bytes (PyTorch passes a weight's address alignment
into cuBLASLt's choice of kernel, so an unaligned view could compute other bits). :class:`Ring`
places each unit's slot where the last one ended, wrapping to the start rather than splitting a
tensor, and keeps two events per unit: ``ready``, recorded on the copy stream after the unit's
copies, which the compute stream waits for before the unit runs; ``consumed``, recorded on the
compute stream after the unit ran, which the copy stream waits for before anything is copied over
its slot. Nothing waits on the host.

The order comes from the runs themselves: each unit that begins is noted as the successor of the
one before it, so that the next units are known from the second time round (the next forward, the
next call: the last block's successor is the first). When a unit begins, up to ``lookahead`` of its
successors are copied in ahead, unless that would overwrite the running unit or one of them
(:meth:`Ring.begin`); a unit that begins without being in the ring (the first run, an order that
changed: blocks skipped by a cache, a forward doubled, another component in between) is copied then
and waited for, and the order learnt anew from there. Nothing of this is specific to CUDA: the
streams and events are a :class:`~ddo_hooks.streaming.transport.Transport`'s.

Examples:
    >>> import torch
    >>> from ddo_hooks.streaming.ordering import check_log
    >>> from ddo_hooks.streaming.transport import LoggedTransport
    >>> transport = LoggedTransport(torch.device("cpu"))
    >>> ring = Ring(transport, capacity=3 * 512, lookahead=1)
    >>> units = [ring.add(f"block{i}", [torch.full((256,), i, dtype=torch.uint8)]) for i in range(4)]
    >>> for _ in range(2):  # two forwards: the second one is copied ahead
    ...     for unit in units:
    ...         (weight,) = ring.begin(unit)
    ...         ring.end(unit)
    >>> int(weight[0]), check_log(transport.log)
    (3, [])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.streaming.transport import Transport

__all__ = ["ALIGNMENT", "Ring", "Unit", "aligned", "slot_layout"]

ALIGNMENT = 512
"""Every tensor in the ring starts at a multiple of this many bytes, as the caching allocator's blocks do."""


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to :data:`ALIGNMENT`."""
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def slot_layout(sources: Sequence[torch.Tensor]) -> tuple[list[int], int]:
    """Each source's offset in a slot (aligned), and the slot's size."""
    offsets, at = [], 0
    for source in sources:
        offsets.append(at)
        at += aligned(source.numel() * source.element_size())
    return offsets, at


def _contiguous(shape: torch.Size) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape``."""
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


@dataclass(eq=False)
class Unit:
    """One unit in the ring: what it copies, and where its bytes are now."""

    key: str
    sources: list[torch.Tensor]
    """The tensors it copies in, each to its view in the slot (same dtype and shape)."""
    ready: Any
    consumed: Any
    offsets: list[int] = field(default_factory=list)
    nbytes: int = 0
    slot: int | None = None
    """Where its bytes are in the ring, or ``None`` when they are not there."""
    views: list[torch.Tensor] = field(default_factory=list)
    load: int = 0
    """Which copy its bytes came by (a tag for the log)."""
    read: bool = False
    """Whether a compute read its bytes since they were copied in (then a copy over them waits for it)."""

    @property
    def span(self) -> tuple[int, int]:
        """Its slot as ``(start, end)`` byte offsets (only while it is in the ring)."""
        start = self.slot if self.slot is not None else 0
        return start, start + self.nbytes

    def ranges(self) -> tuple[tuple[int, int], ...]:
        """The addresses its views read, as ``(start, end)``."""
        return tuple((v.data_ptr(), v.data_ptr() + v.numel() * v.element_size()) for v in self.views)


class Ring:
    """The ring of one component (see the module's docstring).

    Args:
        transport: The device's streams and events.
        capacity: The ring's size in bytes (rounded up to :data:`ALIGNMENT`).
        lookahead: How many units ahead of the running one are copied in (at least 1).
        poison: Fill each slot with NaN before it is copied into (a check: a missing order shows).
    """

    def __init__(self, transport: Transport, capacity: int, lookahead: int, *, poison: bool = False) -> None:
        if lookahead < 1:
            raise InvalidArgumentError(f"lookahead={lookahead!r}: the ring copies at least 1 unit ahead")
        self.transport = transport
        self.capacity = aligned(capacity)
        self.lookahead = lookahead
        self.poison = poison
        self.buffer = transport.allocate(self.capacity)
        self._typed: dict[torch.dtype, torch.Tensor] = {}  # the buffer viewed as each dtype it holds
        self.units: list[Unit] = []
        self._occupants: list[Unit] = []
        self._head = 0
        self._loads = 0
        self._successor: dict[int, Unit] = {}  # by id of the unit before
        self._previous: Unit | None = None
        self._running: list[Unit] = []
        self.copied_bytes = 0
        """Bytes copied into the ring so far."""
        self.waited = 0
        """Units that began without being in the ring: copied then, and waited for."""

    def add(self, key: str, sources: list[torch.Tensor]) -> Unit:
        """A new unit that copies ``sources`` (tensors the device can copy from without the host waiting)."""
        transport = self.transport
        unit = Unit(key, [], transport.new_event(), transport.new_event())
        self.units.append(unit)
        self.relayout(unit, sources)
        return unit

    def relayout(self, unit: Unit, sources: list[torch.Tensor]) -> None:
        """Give ``unit`` other sources (fewer, once some became resident); its bytes leave the ring.

        Raises:
            InvalidArgumentError: Its slot would not fit in the ring.
        """
        if unit.slot is not None:
            self._evict(unit)
        offsets, nbytes = slot_layout(sources)
        if nbytes > self.capacity:
            raise InvalidArgumentError(
                f"{unit.key} needs {nbytes:,} bytes in the ring, which holds {self.capacity:,}: give the ring at "
                f"least {aligned(nbytes) * (self.lookahead + 1):,} bytes (ring_bytes), or leave ring_bytes to auto"
            )
        unit.sources, unit.offsets, unit.nbytes = list(sources), offsets, nbytes

    def remove(self, unit: Unit) -> None:
        """Take ``unit`` out of the ring for good (its module was collected)."""
        if unit.slot is not None:
            self._evict(unit)
        self.units.remove(unit)
        if unit in self._running:
            self._running.remove(unit)
        self._successor = {key: after for key, after in self._successor.items() if after is not unit}
        self._successor.pop(id(unit), None)
        if self._previous is unit:
            self._previous = None

    def running(self) -> list[Unit]:
        """The units that began and have not ended."""
        return list(self._running)

    # -- what the hooks call ---------------------------------------------------------------
    def begin(self, unit: Unit) -> list[torch.Tensor]:
        """``unit`` is about to run on the compute stream: its views in the ring, which it may read once this returns.

        Copies it in first if it is not in the ring (and makes the compute stream wait for that
        copy), then copies in up to ``lookahead`` of the units that came after it last time.
        """
        if self._previous is not None and self._previous is not unit:
            self._successor[id(self._previous)] = unit
        self._previous = unit
        if unit.slot is None:
            self.waited += 1
            if not self._load(unit, protect=self._running):
                raise RuntimeError(f"{unit.key} cannot be copied in beside the units running: the ring is too small")
        compute = self.transport.compute_stream()
        self.transport.wait(compute, unit.ready)
        self.transport.reading(compute, unit.load, unit.ranges, done=False)
        self._running.append(unit)
        self._copy_ahead(unit)
        return unit.views

    def end(self, unit: Unit) -> None:
        """``unit``'s kernels are all issued: copies over its slot wait for them from now on."""
        compute = self.transport.compute_stream()
        self.transport.reading(compute, unit.load, unit.ranges, done=True)
        self.transport.record(unit.consumed, compute)
        unit.read = True
        if unit in self._running:
            self._running.remove(unit)

    def close(self) -> None:
        """Order the freeing of the ring after every copy into it (on the compute stream, which owns it)."""
        done = self.transport.new_event()
        self.transport.record(done, self.transport.copy_stream)
        self.transport.wait(self.transport.compute_stream(), done)
        for unit in self._occupants:
            unit.slot, unit.views = None, []
        self._occupants.clear()
        self._typed.clear()

    # -- placing -------------------------------------------------------------------------------
    def _copy_ahead(self, unit: Unit) -> None:
        ahead: list[Unit] = []
        after = unit
        while len(ahead) < self.lookahead:
            after = self._successor.get(id(after))  # type: ignore[assignment]  # None ends the walk below
            if after is None or after is unit or after in ahead:
                break
            ahead.append(after)
        for coming in ahead:
            if coming.slot is None and not self._load(coming, protect=[*self._running, *ahead]):
                return  # the ring is full of units still to run: the rest are copied later

    def _load(self, unit: Unit, protect: Sequence[Unit]) -> bool:
        start = self._head if self._head + unit.nbytes <= self.capacity else 0
        end = start + unit.nbytes
        over = [o for o in self._occupants if o is not unit and o.span[0] < end and start < o.span[1]]
        if any(o in protect for o in over):
            return False
        for occupant in over:
            self._evict(occupant)
        transport, stream = self.transport, self.transport.copy_stream
        if self.poison:
            transport.fill(self.buffer[start:end], stream)
        self._loads += 1
        unit.slot, unit.load, unit.read = start, self._loads, False
        unit.views = self._views(unit, start)
        transport.copy(unit.views, unit.sources, stream, load=unit.load)
        transport.record(unit.ready, stream)
        self._occupants.append(unit)
        self._head = end
        self.copied_bytes += unit.nbytes
        return True

    def _views(self, unit: Unit, start: int) -> list[torch.Tensor]:
        """``unit``'s views in a slot at ``start``: one ``as_strided`` each (a quarter of slicing's host time)."""
        views = []
        for offset, source in zip(unit.offsets, unit.sources, strict=True):
            typed = self._typed.get(source.dtype)
            if typed is None:
                typed = self._typed[source.dtype] = self.buffer.view(source.dtype)
            at = typed.storage_offset() + (start + offset) // source.element_size()
            views.append(typed.as_strided(source.shape, _contiguous(source.shape), at))
        return views

    def _evict(self, unit: Unit) -> None:
        """Take ``unit``'s bytes out of the ring; a copy over them waits for the compute that read them."""
        if unit.read:
            self.transport.wait(self.transport.copy_stream, unit.consumed)
        unit.slot, unit.views, unit.read = None, [], False
        self._occupants.remove(unit)
