"""One small, explicit fake of the allocator seam (`ddo_hooks.release.allocator.HostAllocatorBackend`).

A CPU machine has no CUDA host allocator, so the executed path of the release core is tested
through this fake. It records every call, in order, into ``calls`` (a list the test may share
with other recorders, such as a wrapped ``gc.collect``), and its release call really moves the
cached bytes out of its owned counter, so the before and after snapshots differ.

It also pins, as the caching host allocator does: ``pinned_empty`` hands out ordinary CPU memory
that it counts as pinned, owning the size rounded up to a power of two; the block is live while
any tensor holds its storage and cached once none does, until a release.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from ddo_hooks.release.allocator import EntryPoint

MiB = 1 << 20

HANG_SECONDS = 120
"""How long a test waits for another thread before it calls it a hang (never a performance bound)."""

ENTRY_POINT_NAME = "fake._host_emptyCache"
ACCELERATOR_ENTRY_POINT_NAME = "fake._accelerator_emptyHostCache"


@dataclass
class FakeHostAllocator:
    """A fake host allocator and CUDA state, with knobs for every branch of the release core.

    Attributes:
        calls: Every call, in order, e.g. ``"synchronize(1)"``, ``"release"``.
        version: What ``torch_version()`` says (decides whether the active counter is trusted).
        entry: ``"present"`` (like ``torch._C._host_emptyCache`` alone), ``"absent"`` (no entry
            point: the build is unsupported), ``"requires_lazy_init"`` (like
            ``torch._C._accelerator_emptyHostCache`` alone) or ``"both"`` (torch 2.12-2.14 CUDA
            builds: the accelerator one after lazy init, else the direct one).
        cuda_flag: The Python-side flag ``torch.cuda.is_initialized()``.
        bad_fork: Whether this is a forked child of a CUDA process.
        devices: How many CUDA devices are visible.
        current: The current CUDA device.
        contexts: The devices that have a primary context.
        cached_bytes: Free (releasable) pinned bytes; the release moves them out.
        live_bytes: Pinned bytes held by tensors; the release keeps them.
        host_allocs: ``num_host_alloc``: how many blocks the allocator ever allocated.
        layout: The raw stats key layout: ``"2.10+"`` or ``"2.7-2.9"``.
        reported_active: Overrides the reported active counter (e.g. the torch 2.11 bug).
        raw_stats: Returned as the raw stats instead of the computed counters when set.
        stats_unreadable: ``raw_host_stats()`` returns ``None`` (torch < 2.7).
        stats_error: Raised by the stats reads numbered in ``failing_stats_reads`` (1-based;
            ``None`` means every read).
        synchronize_error: Raised by ``synchronize``.
        release_error: Raised by the release call.
        release_entered: Set when the release call starts.
        release_gate: When set, the release call waits for this event (at most 10 s).
        pinned_total: Bytes pinned since the "process" started (the owned counter's ``allocated``).
        pin_micros: Microseconds spent pinning since then (``host_alloc_time.total``).
        pin_counters: Whether the raw stats report those two and ``num_host_alloc`` at all.
        pin_error: Raised by a pin, once ``pins_before_error`` pins have succeeded.
        owned_peak: The most pinned bytes owned (live and cached) right after a pin.
    """

    calls: list[str] = field(default_factory=list)
    version: str = "2.13.0"
    entry: Literal["present", "absent", "requires_lazy_init", "both"] = "present"
    cuda_flag: bool = True
    bad_fork: bool = False
    devices: int = 2
    current: int = 0
    contexts: set[int] = field(default_factory=lambda: {0, 1})
    cached_bytes: int = 4 * MiB
    live_bytes: int = 1 * MiB
    host_allocs: int = 2
    layout: Literal["2.10+", "2.7-2.9"] = "2.10+"
    reported_active: Any = None
    raw_stats: dict[str, Any] | None = None
    stats_unreadable: bool = False
    stats_error: Exception | None = None
    failing_stats_reads: frozenset[int] | None = None
    synchronize_error: Exception | None = None
    release_error: Exception | None = None
    release_entered: threading.Event = field(default_factory=threading.Event)
    release_gate: threading.Event | None = None
    pinned_total: int = 5 * MiB
    pin_micros: int = 1000
    pin_counters: bool = True
    stats_reads: int = field(default=0, init=False)
    pin_error: Exception | None = None
    pins_before_error: int = 0  # how many pins succeed before pin_error is raised
    owned_peak: int = 0  # the most pinned bytes owned (live + cached) right after a pin
    blocks: dict[int, int] = field(default_factory=dict, init=False)  # live pinned blocks: start -> bytes
    registered: dict[int, int] = field(default_factory=dict, init=False)  # registered ranges: start -> bytes
    register_error: Exception | None = None

    def pin(self, nbytes: int, micros: int, blocks: int = 1) -> None:
        """Pin ``nbytes`` more in ``blocks`` blocks, as an onload after a release does; they stay cached."""
        self.cached_bytes += nbytes
        self.pinned_total += nbytes
        self.pin_micros += micros
        self.host_allocs += blocks

    def torch_version(self) -> str:
        self.calls.append("torch_version")
        return self.version

    def entry_point(self, *, lazy_init_done: bool) -> EntryPoint | str:
        self.calls.append("entry_point")
        if self.entry == "absent":
            return f"torch {self.version} exposes no host-cache release entry point (torch >= 2.5 does)"
        if self.entry == "requires_lazy_init" or (self.entry == "both" and lazy_init_done):
            return EntryPoint(ACCELERATOR_ENTRY_POINT_NAME, self._release, requires_lazy_init=True)
        return EntryPoint(ENTRY_POINT_NAME, self._release)

    def raw_host_stats(self) -> dict[str, Any] | None:
        self.calls.append("raw_host_stats")
        self.stats_reads += 1
        if self.stats_error is not None and (
            self.failing_stats_reads is None or self.stats_reads in self.failing_stats_reads
        ):
            raise self.stats_error
        if self.stats_unreadable:
            return None
        if self.raw_stats is not None:
            return self.raw_stats
        owned = self.cached_bytes + self.live_bytes
        active = self.live_bytes if self.reported_active is None else self.reported_active
        if self.layout == "2.7-2.9":
            return {
                "reserved_bytes": {"current": owned, "peak": owned, "allocated": owned, "freed": 0},
                "allocated_bytes": {"current": active, "peak": active, "allocated": active, "freed": 0},
                "num_host_alloc": self.host_allocs,
                "num_host_free": 0,
            }
        stats = {
            "allocated_bytes": {"current": owned, "peak": owned, "allocated": self.pinned_total, "freed": 0},
            "active_bytes": {"current": active, "peak": active, "allocated": active, "freed": 0},
            "allocations": {"current": self.host_allocs, "peak": self.host_allocs},
            "num_host_alloc": self.host_allocs,
            "num_host_free": 0,
            "host_alloc_time": {"total": self.pin_micros, "max": 0, "min": 0, "count": self.host_allocs, "avg": 0},
        }
        if not self.pin_counters:
            del stats["num_host_alloc"], stats["host_alloc_time"]
            del stats["allocated_bytes"]["allocated"]
        return stats

    def in_bad_fork(self) -> bool:
        self.calls.append("in_bad_fork")
        return self.bad_fork

    def cuda_initialized(self) -> bool:
        self.calls.append("cuda_initialized")
        return self.cuda_flag

    def device_count(self) -> int:
        self.calls.append("device_count")
        return self.devices

    def current_device(self) -> int:
        self.calls.append("current_device")
        return self.current

    def has_primary_context(self, index: int) -> bool:
        self.calls.append(f"has_primary_context({index})")
        return index in self.contexts

    def synchronize(self, index: int) -> None:
        self.calls.append(f"synchronize({index})")
        if self.synchronize_error is not None:
            raise self.synchronize_error

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        self.calls.append("is_pinned")
        start = tensor.untyped_storage().data_ptr()
        if start in self.blocks and tensor.untyped_storage().nbytes() <= self.blocks[start]:
            return True
        at, end = tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()
        return any(begin <= at and end <= begin + size for begin, size in self.registered.items())

    def pinned_empty(self, nbytes: int) -> torch.Tensor:
        """Pinned memory as the caching host allocator hands it out (owned: ``nbytes`` rounded up to a power of two)."""
        self.calls.append(f"pinned_empty({nbytes})")
        if self.pin_error is not None:
            if self.pins_before_error <= 0:
                raise self.pin_error
            self.pins_before_error -= 1
        block = _Block(max(nbytes, 1))
        tensor = torch.frombuffer(block, dtype=torch.uint8, count=nbytes) if nbytes else torch.empty(0)
        start, owned = tensor.untyped_storage().data_ptr(), 1 << max(nbytes - 1, 0).bit_length()
        self.blocks[start] = nbytes
        self.live_bytes += owned
        self.pinned_total += owned
        self.host_allocs += 1
        self.owned_peak = max(self.owned_peak, self.live_bytes + self.cached_bytes)
        weakref.finalize(block, self._freed, start, owned)
        return tensor

    def register(self, address: int, nbytes: int) -> None:
        """``cudaHostRegister``: the range is pinned in place (``is_pinned`` says so) until unregistered."""
        self.calls.append("register")
        if self.register_error is not None:
            raise self.register_error
        if any(address < start + size and start < address + nbytes for start, size in self.registered.items()):
            raise RuntimeError(f"cudaHostRegister at {address:#x}: part of the range is registered already")
        self.registered[address] = nbytes

    def unregister(self, address: int) -> None:
        self.calls.append("unregister")
        if self.registered.pop(address, None) is None:
            raise RuntimeError(f"cudaHostUnregister at {address:#x}: not registered")

    def pin_copy(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor.pin_memory()``: a pinned copy of the same shape and values; a pinned tensor is returned as it is."""
        if self.is_pinned(tensor):
            return tensor
        storage = self.pinned_empty(tensor.numel() * tensor.element_size()).untyped_storage()
        copy = torch.empty(0, dtype=tensor.dtype).set_(storage, 0, tensor.shape)  # its own storage, as pin_memory's
        return copy.copy_(tensor)

    def _freed(self, start: int, owned: int) -> None:
        self.blocks.pop(start, None)
        self.live_bytes -= owned
        self.cached_bytes += owned

    def _release(self) -> None:
        self.calls.append("release")
        self.release_entered.set()
        if self.release_gate is not None and not self.release_gate.wait(timeout=HANG_SECONDS):
            raise TimeoutError("the test never opened the fake's release gate")
        if self.release_error is not None:
            raise self.release_error
        self.cached_bytes = 0


def pin_like_streams(module: torch.nn.Module, fake: FakeHostAllocator, *, low_cpu_mem_usage: bool = False) -> None:
    """Give ``module``'s offload groups the CPU copies group offloading makes with ``use_stream=True``.

    Streams need CUDA, so ``apply_group_offloading`` on a CPU keeps no copies; here diffusers' own
    ``ModuleGroup._init_cpu_param_dict`` makes them, pinning through ``fake`` (the one seam that
    cannot exist here), and each weight is offloaded onto its copy as ``offload_()`` does with a
    stream. The groups then onload on the CPU without a stream, so the weights stay on their copies.
    """
    from ddo_hooks._compat import diffusers as diffusers_compat

    real_pin = torch.Tensor.pin_memory
    torch.Tensor.pin_memory = lambda self, *args: fake.pin_copy(self)  # restored below, before any other test
    try:
        for group in diffusers_compat.offload_groups(module):
            group.stream, group.low_cpu_mem_usage = object(), low_cpu_mem_usage
            group.cpu_param_dict = group._init_cpu_param_dict()
            group.stream = None
            if not low_cpu_mem_usage:
                for weight, copy in group.cpu_param_dict.items():
                    weight.data = copy
    finally:
        torch.Tensor.pin_memory = real_pin


class _Block(bytearray):
    """The memory of one fake pinned block (a bytearray subclass, so that it can be watched weakly)."""


CUDA_PROBES = ("current_device", "device_count", "has_primary_context", "synchronize")
"""Calls that would touch a CUDA device on the real backend."""


def probes(calls: list[str]) -> list[str]:
    """The recorded calls that would touch a CUDA device."""
    return [c for c in calls if c.startswith(CUDA_PROBES)]


@dataclass
class FakeScheduler:
    """A fake clock for deferred boundaries (`ddo_hooks.hooks.idle.Scheduler`): nothing runs until `advance`."""

    now: float = 0.0
    pending: list[list[Any]] = field(default_factory=list)  # [due, function, cancelled]

    def call_later(self, delay: float, function: Any) -> Any:
        entry = [self.now + delay, function, False]
        self.pending.append(entry)

        class Handle:
            def cancel(self) -> None:
                entry[2] = True

        return Handle()

    def advance(self, seconds: float) -> None:
        """Move the clock on and run, in order, what became due and was not cancelled."""
        self.now += seconds
        due = sorted((e for e in self.pending if e[0] <= self.now), key=lambda e: e[0])
        self.pending = [e for e in self.pending if e[0] > self.now]
        for _, function, cancelled in due:
            if not cancelled:
                function()
