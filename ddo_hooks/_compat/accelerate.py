"""Every private accelerate attribute ddo_hooks touches, and nothing else.

accelerate keeps a module's hook in ``module._hf_hook`` and the forward it replaced in
``module._old_forward``; there is no public accessor for either. ddo_hooks needs them to put its
own diffusers hook *beneath* an accelerate hook (see :func:`lifted`), so that accelerate's
remove-and-re-add at the end of every call (``maybe_free_model_hooks``) keeps ours.

Examples:
    >>> import torch
    >>> module = torch.nn.Linear(2, 2)
    >>> hook_of(module) is None
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from accelerate.hooks import ModelHook, add_hook_to_module, remove_hook_from_module

from ddo_hooks._compat import Touch

__all__ = ["HOOK_ATTRIBUTE", "OLD_FORWARD_ATTRIBUTE", "TOUCHES", "has_hook", "hook_of", "lifted", "remove"]

HOOK_ATTRIBUTE = "_hf_hook"
"""Where accelerate keeps a module's hook."""
OLD_FORWARD_ATTRIBUTE = "_old_forward"
"""Where accelerate keeps the forward its hook replaced."""


def hook_of(module: torch.nn.Module) -> Any:
    """The module's accelerate hook, or ``None``."""
    return getattr(module, HOOK_ATTRIBUTE, None)


def has_hook(module: torch.nn.Module) -> bool:
    """Whether the module carries an accelerate hook."""
    return hasattr(module, HOOK_ATTRIBUTE)


def remove(module: torch.nn.Module) -> None:
    """Remove the module's accelerate hook (``remove_hook_from_module``), restoring its forward."""
    remove_hook_from_module(module)


def lifted(module: torch.nn.Module, change: Callable[[], None]) -> None:
    """Run ``change`` with the module's accelerate hook (if any) taken off, then put it back on top."""
    accelerate_hook = hook_of(module)
    if accelerate_hook is None:
        change()
        return
    before = dict(vars(module))
    remove_hook_from_module(module)
    # Besides its hook, accelerate's removal pops the warning wrappers dispatch_model adds
    # (``to``, ``cuda``, ...); put those back too, so the module ends as it started.
    ours = (HOOK_ATTRIBUTE, OLD_FORWARD_ATTRIBUTE)
    popped = {k: v for k, v in before.items() if k not in vars(module) and k not in ours}
    try:
        change()
    finally:
        add_hook_to_module(module, accelerate_hook)
        for key, value in popped.items():
            object.__setattr__(module, key, value)


def _hook_probe() -> bool:
    module = torch.nn.Linear(2, 2)
    original: Any = module.forward  # a bound method: its __func__ is compared
    hook = ModelHook()
    add_hook_to_module(module, hook)
    saved = getattr(module, OLD_FORWARD_ATTRIBUTE, None)
    found = hook_of(module) is hook and saved is not None and saved.__func__ is original.__func__
    remove_hook_from_module(module)
    return found and not has_hook(module) and not hasattr(module, OLD_FORWARD_ATTRIBUTE)


TOUCHES: tuple[Touch, ...] = (
    Touch(
        "accelerate",
        "module._hf_hook and module._old_forward (set by add_hook_to_module, removed by remove_hook_from_module)",
        "registering ddo_hooks' signal hooks beneath accelerate's offload hooks",
        _hook_probe,
    ),
)
"""Every private accelerate attribute touched, with its probe (``tests/test_compat.py`` runs them)."""
