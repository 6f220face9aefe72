"""Every private torch attribute ddo_hooks touches, and nothing else.

The release core reaches PyTorch's pinned host allocator only through these functions (and
:mod:`ddo_hooks.release.allocator` decides which one to call). By torch version (read in its
sources and measured on the GPU machine): ``_host_emptyCache`` since 2.5 on CUDA/ROCm builds;
``_accelerator_emptyHostCache`` since 2.12 on every build; ``_cuda_hostMemoryStats`` since 2.7 on
CUDA builds.

Examples:
    >>> import torch
    >>> tensor_base(torch.zeros(4)[1:]) is not None, tensor_use_count(torch.zeros(4))
    (True, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ddo_hooks._compat import Touch

__all__ = [
    "TOUCHES",
    "accelerator_empty_host_cache",
    "current_device",
    "has_primary_context",
    "host_empty_cache",
    "host_memory_stats",
    "in_bad_fork",
    "is_cuda_build",
    "storage_use_count",
    "tensor_base",
    "tensor_use_count",
]


def is_cuda_build() -> bool:
    """Whether this torch is built with CUDA (or ROCm), so it has a CUDA host allocator."""
    return torch.version.cuda is not None or torch.version.hip is not None


def host_empty_cache() -> Callable[[], Any] | None:
    """``torch._C._host_emptyCache`` (torch >= 2.5, CUDA/ROCm builds), or ``None``."""
    return getattr(torch._C, "_host_emptyCache", None)


def accelerator_empty_host_cache() -> Callable[[], Any] | None:
    """``torch._C._accelerator_emptyHostCache`` (torch >= 2.12), or ``None``."""
    return getattr(torch._C, "_accelerator_emptyHostCache", None)


def host_memory_stats() -> Mapping[str, Any] | None:
    """``torch._C._cuda_hostMemoryStats()`` (torch >= 2.7, CUDA builds), or ``None`` without it.

    Read without a CUDA call; ``torch.cuda.host_memory_stats()`` would return ``{}`` whenever
    the Python-side CUDA flag is unset, even with gigabytes cached.
    """
    read = getattr(torch._C, "_cuda_hostMemoryStats", None)
    return None if read is None else read()


def in_bad_fork() -> bool:
    """``torch.cuda._is_in_bad_fork()``: a forked child of a process that had initialized CUDA."""
    return bool(torch.cuda._is_in_bad_fork())


def current_device() -> int:
    """``torch._C._cuda_getDevice()``: the current device, without the lazy init of ``torch.cuda.current_device``."""
    return int(torch._C._cuda_getDevice())


def has_primary_context(index: int) -> bool:
    """``torch._C._cuda_hasPrimaryContext(i)``: asks without creating a context."""
    return bool(torch._C._cuda_hasPrimaryContext(index))  # type: ignore[attr-defined]  # a private torch function that torch's stubs leave out (probed at import)


def tensor_base(tensor: torch.Tensor) -> torch.Tensor | None:
    """``tensor._base``: the tensor an autograd view was made from, or ``None``."""
    return tensor._base


def tensor_use_count(tensor: torch.Tensor) -> int:
    """``tensor._use_count()``: how many references the C++ side holds to the tensor's implementation."""
    return int(tensor._use_count())  # type: ignore[attr-defined]  # a private tensor method that torch's stubs leave out (probed at import)


def storage_use_count(tensor: torch.Tensor) -> int:
    """``torch._C._storage_Use_Count``: how many tensors (and storage objects) share ``tensor``'s storage.

    The storage object made to ask is not counted: a tensor alone in its storage gives 1.
    """
    return int(torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)) - 1


def _storage_probe() -> bool:
    alone = torch.zeros(4)
    shared = torch.zeros(4)
    view = shared[1:]
    return storage_use_count(alone) == 1 and storage_use_count(shared) == 2 and view is not None


def _callable(owner: Any, name: str, purpose: str, **expected: Any) -> Touch:
    """The touch of the function ``owner.name``, probed by looking it up; ``expected``: its since and condition."""
    return Touch("torch", f"{owner.__name__}.{name}", purpose, lambda: callable(getattr(owner, name, None)), **expected)


def _tensor_probe() -> bool:
    base = torch.zeros(4)
    view = base[1:]
    return view._base is base and base._base is None and isinstance(base._use_count(), int)  # type: ignore[attr-defined]  # the same private method, probed here


TOUCHES: tuple[Touch, ...] = (
    Touch(
        "torch",
        "torch._C._storage_Use_Count and UntypedStorage._cdata",
        "refusing to repack a pinned copy that another tensor also holds",
        _storage_probe,
    ),
    _callable(torch._C, "_host_emptyCache", "releasing the pinned host cache", since=(2, 5), condition=is_cuda_build),
    _callable(
        torch._C, "_accelerator_emptyHostCache", "releasing the pinned host cache after lazy CUDA init", since=(2, 12)
    ),
    _callable(
        torch._C,
        "_cuda_hostMemoryStats",
        "reading the host allocator's counters without a CUDA call",
        since=(2, 7),
        condition=is_cuda_build,
    ),
    _callable(torch.cuda, "_is_in_bad_fork", "refusing a release in a forked child"),
    _callable(torch._C, "_cuda_getDevice", "the current device without lazy CUDA init", condition=is_cuda_build),
    _callable(
        torch._C, "_cuda_hasPrimaryContext", "synchronizing only devices that have a context", condition=is_cuda_build
    ),
    Touch(
        "torch",
        "torch.Tensor._base and torch.Tensor._use_count",
        "finding loader views that can be detached safely",
        _tensor_probe,
    ),
)
"""Every private torch attribute touched, with its probe (``tests/test_compat.py`` runs them)."""
