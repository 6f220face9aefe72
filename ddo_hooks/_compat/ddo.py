"""DDO's runtime as ddo_hooks reads it off a module: whether DDO (diffusers-dynamic-offloader) pins copies of its own.

DDO's ``enable_pipeline_offload`` registers its runtime's hook in diffusers' registry under
:data:`RUNTIME_HOOK`; the hook keeps the configuration DDO resolved from its preset and environment
(``DynamicOffloadHook.config``, a ``DynamicOffloadConfig``), whose ``pin_cpu_memory`` says whether DDO
pins a copy of each weight it streams (``DDO_PIN_CPU_MEMORY``, ``1`` in its ``auto`` preset). DDO never
checks that variable's spelling: a misspelt one leaves the preset's ``1``. Nothing here imports DDO.

Examples:
    >>> import torch
    >>> runtime_pins_copies(torch.nn.Linear(2, 2))  # no DDO hook: nothing of DDO's pins it
    False
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from ddo_hooks._compat import Touch
from ddo_hooks._compat import diffusers as diffusers_compat

__all__ = ["DISTRIBUTION", "RUNTIME_HOOK", "TOUCHES", "runtime_pins_copies"]

DISTRIBUTION = "diffusers-dynamic-offloader"
"""DDO's distribution name."""

RUNTIME_HOOK = "dynamic_offload"
"""``diffusers_dynamic_offloader.dynamic_offload._DYNAMIC_OFFLOAD_HOOK``: the registry name of DDO's runtime hook."""


def runtime_hook(module: torch.nn.Module) -> Any:
    """DDO's runtime hook on ``module``, or ``None``."""
    registry = diffusers_compat.registry_of(module)
    return None if registry is None else registry.get_hook(RUNTIME_HOOK)


def runtime_pins_copies(module: torch.nn.Module) -> bool:
    """Whether DDO's runtime offloads ``module`` with ``pin_cpu_memory`` on: it pins copies of what it streams."""
    config = getattr(runtime_hook(module), "config", None)
    return bool(getattr(config, "pin_cpu_memory", False))


# -- probes ---------------------------------------------------------------------------------------


def _installed() -> bool:
    return importlib.util.find_spec("diffusers_dynamic_offloader") is not None


def _runtime_probe() -> bool:
    from diffusers_dynamic_offloader.dynamic_offload import (
        _DYNAMIC_OFFLOAD_HOOK,
        DynamicOffloadConfig,
        apply_dynamic_offload,
    )

    module = torch.nn.Sequential(torch.nn.Linear(2, 2))
    hook = apply_dynamic_offload(module, DynamicOffloadConfig(execution_device="cpu", pin_cpu_memory=True))
    registry = diffusers_compat.registry_of(module)
    found = registry is not None and registry.get_hook(RUNTIME_HOOK) is hook
    return _DYNAMIC_OFFLOAD_HOOK == RUNTIME_HOOK and found and runtime_pins_copies(module)


TOUCHES: tuple[Touch, ...] = (
    Touch(
        DISTRIBUTION,
        "dynamic_offload._DYNAMIC_OFFLOAD_HOOK and DynamicOffloadHook.config.pin_cpu_memory",
        "telling, at attach, a DDO runtime that pins copies of its own (pinned_copies.on_ddo_pinning)",
        _runtime_probe,
        condition=_installed,
    ),
)
"""Every DDO attribute touched, with its probe (``tests/test_compat.py`` runs it where DDO is installed)."""
