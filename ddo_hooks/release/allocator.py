"""The torch allocator seam: the one place the release core asks about PyTorch's host allocator.

Everything here is a thin, explicit seam (:class:`HostAllocatorBackend`): which torch entry
point releases the pinned host cache, the raw allocator counters, and the CUDA probes that
never create a context. The CPU test suite swaps the backend through :func:`use_backend`;
the ``gpu`` tests exercise :class:`TorchHostAllocator` on a real device.

Facts this relies on (measured on the GPU machine):

* ``torch._C._accelerator_emptyHostCache`` (torch >= 2.12) releases the free blocks of the
  CUDA host allocator through the accelerator layer, as the specification asks, but silently
  does nothing unless torch's lazy CUDA init ran, raises on CPU-only builds and segfaults on
  MPS (pytorch #197561): it is used on CUDA builds once lazy init ran.
* ``torch._C._host_emptyCache`` (torch >= 2.5, CUDA/ROCm builds) reaches the same allocator
  directly; it makes no CUDA call and creates no context when nothing is cached: it is used
  where the accelerator entry point would do nothing (memory pinned before lazy init), and on
  builds without it.
* ``torch._C._cuda_hostMemoryStats`` (torch >= 2.7) reads the raw counters without a CUDA
  call; ``torch.cuda.host_memory_stats()`` returns ``{}`` whenever the Python-side flag is
  unset, even with gigabytes cached.
* ``torch.cuda.synchronize(i)`` creates a context on device ``i`` if it has none;
  ``torch._C._cuda_hasPrimaryContext(i)`` asks without creating one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

from ddo_hooks._compat import torch as torch_compat

__all__ = ["EntryPoint", "HostAllocatorBackend", "TorchHostAllocator", "backend", "pinned_allocation", "use_backend"]


@dataclass(frozen=True)
class EntryPoint:
    """A torch function that releases the pinned host cache.

    Attributes:
        name: Its dotted name, recorded in reports.
        call: The function itself.
        requires_lazy_init: It silently does nothing unless torch's lazy CUDA init ran.
    """

    name: str
    call: Callable[[], Any]
    requires_lazy_init: bool = False


class HostAllocatorBackend(Protocol):
    """What the release core needs from torch; the seam the CPU tests replace."""

    def torch_version(self) -> str:
        """``torch.__version__``."""
        ...

    def entry_point(self, *, lazy_init_done: bool) -> EntryPoint | str:
        """The release entry point for a process whose lazy CUDA init did or did not run.

        Returns a sentence saying why when this build has none.
        """
        ...

    def raw_host_stats(self) -> Mapping[str, Any] | None:
        """The allocator's raw counters, or ``None`` when this torch cannot read them."""
        ...

    def in_bad_fork(self) -> bool:
        """Whether this is a forked child of a process that had initialized CUDA."""
        ...

    def cuda_initialized(self) -> bool:
        """The Python-side flag ``torch.cuda.is_initialized()``."""
        ...

    def device_count(self) -> int:
        """Visible CUDA devices, without initializing CUDA."""
        ...

    def current_device(self) -> int:
        """The current CUDA device; only called once CUDA is in use."""
        ...

    def has_primary_context(self, index: int) -> bool:
        """Whether device ``index`` has a CUDA context; never creates one."""
        ...

    def synchronize(self, index: int) -> None:
        """Wait for all work on device ``index``; only called when it has a context."""
        ...

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` lives in pinned host memory (``False`` on a build without CUDA, never asking)."""
        ...

    def pinned_empty(self, nbytes: int) -> torch.Tensor:
        """A new uint8 CPU tensor of ``nbytes`` in pinned memory from the caching host allocator."""
        ...

    def register(self, address: int, nbytes: int) -> None:
        """Pin ``nbytes`` at ``address`` in place, read-only (``cudaHostRegister``); raises on failure."""
        ...

    def unregister(self, address: int) -> None:
        """Undo :meth:`register` of the range starting at ``address``; raises on failure."""
        ...


class TorchHostAllocator:
    """The real backend: the installed torch."""

    def torch_version(self) -> str:
        """``torch.__version__``."""
        return str(torch.__version__)

    def entry_point(self, *, lazy_init_done: bool) -> EntryPoint | str:
        """Decide which torch entry point releases the CUDA host allocator.

        This is the only function that makes that decision: ``_accelerator_emptyHostCache``
        where it works (lazy init ran, or it is the only one: then the release core reports
        ``lazy_init_required``), else ``_host_emptyCache``.
        """
        if not torch_compat.is_cuda_build():
            return f"torch {torch.__version__} is built without CUDA, so it has no CUDA host allocator"
        accelerator_empty = torch_compat.accelerator_empty_host_cache()
        host_empty = torch_compat.host_empty_cache()
        if accelerator_empty is not None and (lazy_init_done or host_empty is None):
            return EntryPoint("torch._C._accelerator_emptyHostCache", accelerator_empty, requires_lazy_init=True)
        if host_empty is not None:
            return EntryPoint("torch._C._host_emptyCache", host_empty)
        return f"torch {torch.__version__} exposes no host-cache release entry point (torch >= 2.5 does)"

    def raw_host_stats(self) -> Mapping[str, Any] | None:
        """The raw counters (``torch._C._cuda_hostMemoryStats``), or ``None`` on a torch without them."""
        return torch_compat.host_memory_stats()

    def in_bad_fork(self) -> bool:
        """Whether this is a forked child of a CUDA process."""
        return torch_compat.in_bad_fork()

    def cuda_initialized(self) -> bool:
        """``torch.cuda.is_initialized()``."""
        return torch.cuda.is_initialized()

    def device_count(self) -> int:
        """``torch.cuda.device_count()`` (through NVML: no CUDA init)."""
        return torch.cuda.device_count()

    def current_device(self) -> int:
        """The current CUDA device, without lazy init."""
        return torch_compat.current_device()

    def has_primary_context(self, index: int) -> bool:
        """Whether device ``index`` has a CUDA context; never creates one."""
        return torch_compat.has_primary_context(index)

    def synchronize(self, index: int) -> None:
        """``torch.cuda.synchronize(index)``."""
        torch.cuda.synchronize(index)

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """``tensor.is_pinned()`` on a CUDA build; ``False`` without asking on a CPU build (where it raises)."""
        return torch_compat.is_cuda_build() and tensor.device.type == "cpu" and tensor.is_pinned()

    def pinned_empty(self, nbytes: int) -> torch.Tensor:
        """``torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)``."""
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def register(self, address: int, nbytes: int) -> None:
        """``cudaHostRegister(address, nbytes, cudaHostRegisterReadOnly)`` through ``torch.cuda.cudart()``.

        Read-only, so that the pages pinned are the page cache's own: a writable registration of a
        private file mapping makes a private copy of every page (seen on an H200: ``RssAnon`` grew by
        the registered bytes), and a read-only one of such a mapping stalled there; a shared,
        read-only mapping registered in 0.01 s per 512 MiB (``benchmarks/probe_register.py``).
        """
        code = torch.cuda.cudart().cudaHostRegister(address, nbytes, _REGISTER_READ_ONLY)
        if int(code) != 0:
            raise RuntimeError(
                f"cudaHostRegister of {nbytes:,} bytes at {address:#x} failed with CUDA error {int(code)}"
            )

    def unregister(self, address: int) -> None:
        """``cudaHostUnregister(address)``."""
        code = torch.cuda.cudart().cudaHostUnregister(address)
        if int(code) != 0:
            raise RuntimeError(f"cudaHostUnregister at {address:#x} failed with CUDA error {int(code)}")


_REGISTER_READ_ONLY = 8  # cudaHostRegisterReadOnly


def pinned_allocation(environ: Mapping[str, str] | None = None) -> Literal["cudaHostAlloc", "cudaHostRegister"]:
    """How this process's host allocator pins: from ``PYTORCH_CUDA_ALLOC_CONF`` (or ``PYTORCH_ALLOC_CONF``).

    ``pinned_use_cuda_host_register:True`` makes torch pin with ``cudaHostRegister`` (cheaper to
    pin again after a release, see the docs' benchmarks); torch reads it when CUDA starts, so it is
    set before that, by the user, never by ddo_hooks.

    Examples:
        >>> conf = "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"
        >>> pinned_allocation({"PYTORCH_CUDA_ALLOC_CONF": conf})
        'cudaHostRegister'
        >>> pinned_allocation({})
        'cudaHostAlloc'
    """
    env = os.environ if environ is None else environ
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        for option in env.get(name, "").split(","):
            key, _, value = option.partition(":")
            if key.strip() == "pinned_use_cuda_host_register":
                return "cudaHostRegister" if value.strip().lower() == "true" else "cudaHostAlloc"
    return "cudaHostAlloc"


_BACKEND: HostAllocatorBackend = TorchHostAllocator()


def backend() -> HostAllocatorBackend:
    """Return the backend the release core uses."""
    return _BACKEND


@contextlib.contextmanager
def use_backend(replacement: HostAllocatorBackend) -> Iterator[HostAllocatorBackend]:
    """Use ``replacement`` as the backend inside the block (for tests on machines without CUDA)."""
    global _BACKEND
    previous, _BACKEND = _BACKEND, replacement
    try:
        yield replacement
    finally:
        _BACKEND = previous
