"""The offload layer: applying an offload runtime to pipeline components, and auxiliary detachment.

Modules: :mod:`~ddo_hooks.offload.apply` (``apply_offload_runtime`` and its result handle),
:mod:`~ddo_hooks.offload.runtimes` (offload runtimes and their source-observation adapters),
:mod:`~ddo_hooks.offload.source_detachment` (bounded auxiliary CPU source detachment) and
:mod:`~ddo_hooks.offload.source_plan` (what it selects to copy). Imports every
layer below it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "OffloadRuntimeApplication": "ddo_hooks.offload.apply",
    "apply_offload_runtime": "ddo_hooks.offload.apply",
    "OffloadedComponent": "ddo_hooks.offload.source_detachment",
    "IntervalObservingAdapter": "ddo_hooks.offload.runtimes",
    "OffloadRuntime": "ddo_hooks.offload.runtimes",
    "PayloadInterval": "ddo_hooks.offload.runtimes",
    "SourceObservationAdapter": "ddo_hooks.offload.runtimes",
    "available_runtimes": "ddo_hooks.offload.runtimes",
    "register_offload_runtime": "ddo_hooks.offload.runtimes",
    "unregister_offload_runtime": "ddo_hooks.offload.runtimes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ddo_hooks.offload' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
