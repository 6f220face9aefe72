"""The one seam between the ring and the device: streams, events, copies, and a log of them for the CPU.

The ring (:mod:`~ddo_hooks.streaming.ring`) orders its copies and its reads only through a
:class:`Transport`: a copy stream, the compute stream, an event per unit for each direction
(``record`` on one stream, ``wait`` on another), and copies into the ring. :class:`CudaTransport` is
PyTorch's CUDA side (``torch.cuda.Stream``, ``torch.cuda.Event``, ``Tensor.copy_(non_blocking=True)``);
it has no ``synchronize``: nothing the ring does waits on the host. :class:`LoggedTransport` is the
CPU's: each copy runs at once (so outputs are computed from the right bytes whatever the order) and
every operation is logged, with the ring's own marks of where each unit's compute begins and ends, so
that :func:`~ddo_hooks.streaming.ordering.check_log` can prove over the log that the order *on a GPU*
would have been right: no read before its copy finished, no copy over a range before its last reader
finished.

Examples:
    >>> import torch
    >>> transport = LoggedTransport(torch.device("cpu"))
    >>> ring = transport.allocate(1024)
    >>> copy, compute = transport.copy_stream, transport.compute_stream()
    >>> ready = transport.new_event()
    >>> transport.copy([ring[:4]], [torch.ones(4, dtype=torch.uint8)], copy, load=1)
    >>> transport.record(ready, copy)
    >>> transport.wait(compute, ready)
    >>> [entry[0] for entry in transport.log]
    ['copy', 'record', 'wait']
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

Ranges = tuple[tuple[int, int], ...]
"""Byte ranges ``(start, end)`` of the device's memory."""

__all__ = ["CudaTransport", "LoggedTransport", "Transport", "overridden", "transport_for", "use_transport"]


class Transport(Protocol):
    """What the ring asks of a device: streams, events, copies; and marks for a log.

    Attributes:
        device: Where the ring and the resident weights live.
        copy_stream: The one stream every copy into the ring is issued on.
    """

    device: torch.device
    copy_stream: Any

    def compute_stream(self) -> Any:
        """The stream the module's kernels are issued on now (the current stream)."""
        ...

    def new_event(self) -> Any:
        """A new event (made at attach: none is made in steady state)."""
        ...

    def record(self, event: Any, stream: Any) -> None:
        """Record ``event`` on ``stream``: it completes when what was issued there before it has."""
        ...

    def wait(self, stream: Any, event: Any) -> None:
        """Make ``stream`` wait for the latest record of ``event`` (no host wait)."""
        ...

    def copy(self, targets: list[torch.Tensor], sources: list[torch.Tensor], stream: Any, *, load: int) -> None:
        """Copy each of ``sources`` into its target (its view in the ring) on ``stream``, tagged ``load``."""
        ...

    def fill(self, target: torch.Tensor, stream: Any) -> None:
        """Poison ``target`` (NaN in every 16-bit pattern and 32-bit float) on ``stream``, before it is copied into."""
        ...

    def reading(self, stream: Any, load: int, ranges: Callable[[], Ranges], *, done: bool) -> None:
        """A mark: the compute of the unit whose bytes came by ``load`` starts (``done``: ends) reading ``ranges()``.

        ``ranges`` is called only by a transport that logs (the hooks run it at every unit).
        """
        ...

    def allocate(self, nbytes: int) -> torch.Tensor:
        """The ring: ``nbytes`` bytes on :attr:`device` (``uint8``), made once, at attach."""
        ...

    def pinned(self, tensor: torch.Tensor) -> bool:
        """Whether the device can copy from ``tensor`` without the host waiting (page-locked or registered)."""
        ...

    def drain(self) -> None:
        """Wait on the host for every copy issued (never in steady state: only when sources go away)."""
        ...


class CudaTransport:
    """PyTorch's CUDA streams and events (see :class:`Transport`)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.copy_stream = torch.cuda.Stream(device)

    def compute_stream(self) -> Any:
        """``torch.cuda.current_stream`` of the device."""
        return torch.cuda.current_stream(self.device)

    def new_event(self) -> Any:
        """A ``torch.cuda.Event`` without timing (cheaper to record)."""
        return torch.cuda.Event()

    def record(self, event: Any, stream: Any) -> None:
        """``event.record(stream)``."""
        event.record(stream)

    def wait(self, stream: Any, event: Any) -> None:
        """``stream.wait_event(event)``."""
        stream.wait_event(event)

    def copy(self, targets: list[torch.Tensor], sources: list[torch.Tensor], stream: Any, *, load: int) -> None:
        """``target.copy_(source, non_blocking=True)`` for each pair, on ``stream`` (one stream switch a unit)."""
        with torch.cuda.stream(stream):
            for target, source in zip(targets, sources, strict=True):
                target.copy_(source, non_blocking=True)

    def fill(self, target: torch.Tensor, stream: Any) -> None:
        """Fill with ``0xFF`` bytes on ``stream``: a NaN as bf16, fp16 and fp32."""
        with torch.cuda.stream(stream):
            target.fill_(0xFF)

    def reading(self, stream: Any, load: int, ranges: Callable[[], Ranges], *, done: bool) -> None:
        """Nothing on a GPU: the events carry the order."""

    def allocate(self, nbytes: int) -> torch.Tensor:
        """One allocation of the caching allocator (512-byte aligned)."""
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def pinned(self, tensor: torch.Tensor) -> bool:
        """``tensor.is_pinned()``: true for the caching host allocator's blocks and for registered pages."""
        return bool(tensor.is_pinned())

    def drain(self) -> None:
        """``copy_stream.synchronize()``."""
        self.copy_stream.synchronize()


@dataclass(frozen=True)
class _Stream:
    name: str


@dataclass(frozen=True)
class _Event:
    number: int


@dataclass
class LoggedTransport:
    """The CPU's transport: copies run at once, and every operation is logged (see :mod:`ordering`).

    Each log entry is a tuple, in host order: ``("copy", stream, load, (start, end))``, ``("fill",
    stream, (start, end))``, ``("record", stream, event)``, ``("wait", stream, event)`` and ``("read",
    stream, load, ranges, done)``, ranges as byte offsets into the ring.

    Args:
        device: Where the ring is (the CPU in tests).
        pageable: The addresses of sources the device could not copy from without the host waiting;
            every other CPU tensor counts as pinned.
    """

    device: torch.device
    pageable: set[int] = field(default_factory=set)
    log: list[tuple[Any, ...]] = field(default_factory=list)
    copy_stream: Any = field(default=_Stream("copy"))
    _compute: Any = field(default=_Stream("compute"))
    _events: Any = field(default_factory=itertools.count)

    def compute_stream(self) -> Any:
        """The one compute stream of the log."""
        return self._compute

    def new_event(self) -> Any:
        """A numbered event."""
        return _Event(next(self._events))

    def record(self, event: Any, stream: Any) -> None:
        """Log it."""
        self.log.append(("record", stream.name, event.number))

    def wait(self, stream: Any, event: Any) -> None:
        """Log it."""
        self.log.append(("wait", stream.name, event.number))

    def copy(self, targets: list[torch.Tensor], sources: list[torch.Tensor], stream: Any, *, load: int) -> None:
        """Copy now, and log each ring range written."""
        for target, source in zip(targets, sources, strict=True):
            target.copy_(source)
            self.log.append(("copy", stream.name, load, self._range(target)))

    def fill(self, target: torch.Tensor, stream: Any) -> None:
        """Fill now, and log it."""
        target.fill_(0xFF)
        self.log.append(("fill", stream.name, self._range(target)))

    def reading(self, stream: Any, load: int, ranges: Callable[[], Ranges], *, done: bool) -> None:
        """Log the mark."""
        self.log.append(("read", stream.name, load, ranges(), done))

    def allocate(self, nbytes: int) -> torch.Tensor:
        """A CPU tensor, aligned as the caching allocator's blocks are (512 bytes)."""
        ring = torch.empty(nbytes + 512, dtype=torch.uint8, device=self.device)
        skip = -ring.data_ptr() % 512
        return ring[skip : skip + nbytes]

    def pinned(self, tensor: torch.Tensor) -> bool:
        """Every CPU tensor but those at an address in :attr:`pageable`."""
        return tensor.data_ptr() not in self.pageable

    def drain(self) -> None:
        """Log it: a host wait for the copy stream."""
        self.log.append(("drain", self.copy_stream.name))

    def _range(self, target: torch.Tensor) -> tuple[int, int]:
        return target.data_ptr(), target.data_ptr() + target.numel() * target.element_size()


_OVERRIDE: contextvars.ContextVar[Callable[[torch.device], Transport] | None] = contextvars.ContextVar(
    "ddo_hooks_transport", default=None
)


def transport_for(device: torch.device) -> Transport:
    """The transport of ``device``: :class:`CudaTransport` on CUDA, else :class:`LoggedTransport`.

    A test may install another (:func:`use_transport`).
    """
    factory = _OVERRIDE.get()
    if factory is not None:
        return factory(device)
    return CudaTransport(device) if device.type == "cuda" else LoggedTransport(device)


def overridden() -> bool:
    """Whether a test installed a transport (:func:`use_transport`): then no CUDA device is needed."""
    return _OVERRIDE.get() is not None


@contextlib.contextmanager
def use_transport(factory: Callable[[torch.device], Transport]) -> Iterator[None]:
    """Make every ring made inside the block, in this thread or task, use ``factory(device)``'s transport.

    The CPU tests' seam: a logged transport where the GPU machine has CUDA's.
    """
    token = _OVERRIDE.set(factory)
    try:
        yield
    finally:
        _OVERRIDE.reset(token)
