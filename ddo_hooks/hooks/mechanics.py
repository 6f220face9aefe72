"""Hook mechanics: installing ddo_hooks' hooks and wrappers, and removing them exactly.

Two kinds of attachment, each with an exact inverse:

* **Module hooks** through diffusers' ``HookRegistry`` (public surface: ``check_if_exists_or_initialize``,
  ``register_hook``, ``remove_hook``, ``hooks``; the rest through :mod:`ddo_hooks._compat.diffusers`).
  Where a module already carries an accelerate hook, ours goes *beneath* it
  (:func:`ddo_hooks._compat.accelerate.lifted`): accelerate's hook is taken off, ours is registered,
  and the same accelerate hook object is put back. Accelerate then saves our wrapper as the
  forward it restores, so ``maybe_free_model_hooks()`` (which removes and re-adds every accelerate
  hook at the end of a call) keeps ours. Removal does the same in reverse.
* **Instance attributes** of the pipeline (``progress_bar``, ``check_inputs``,
  ``maybe_free_model_hooks`` and the loading methods) wrapped on the instance, never the
  class, and restored to exactly what was there. A wrapper that somebody else wrapped
  again is left in place but goes inert.

Both hold what they changed weakly: an installed hook never keeps a module (or its pipeline)
alive, and removing it from an object that was collected meanwhile does nothing.

Examples:
    >>> import torch
    >>> from diffusers.hooks import ModelHook
    >>> module = torch.nn.Linear(2, 2)
    >>> installed = install_hook(module, ModelHook(), "example")
    >>> installed.remove()
    >>> hasattr(module, "_diffusers_hook"), "forward" in vars(module)
    (False, False)
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from diffusers.hooks import HookRegistry, ModelHook

from ddo_hooks._compat import accelerate as accelerate_compat
from ddo_hooks._compat import diffusers as diffusers_compat

__all__ = ["InstalledHook", "WrappedAttribute", "install_hook", "remove_every_hook", "wrap_attribute"]

_MISSING = object()


@dataclass
class InstalledHook:
    """A ddo_hooks hook registered on one module (held weakly)."""

    module_ref: weakref.ref[torch.nn.Module]
    name: str
    created_registry: bool
    had_forward_attribute: bool

    @property
    def module(self) -> torch.nn.Module | None:
        """The module, or ``None`` once it was collected."""
        return self.module_ref()

    def remove(self) -> None:
        """Unregister the hook, leaving accelerate's hook (if any) on top and no registry we created."""
        module = self.module
        if module is None:
            return

        def unregister() -> None:
            registry = HookRegistry.check_if_exists_or_initialize(module)
            registry.remove_hook(self.name, recurse=False)
            if self.created_registry and not registry.hooks:
                diffusers_compat.drop_registry(module)  # the registry did not exist before we came
            forward = vars(module).get("forward")
            if not self.had_forward_attribute and getattr(forward, "__func__", None) is type(module).forward:
                del module.forward  # remove_hook leaves the plain bound method as an instance attribute
            diffusers_compat.invalidate_parents(module)

        accelerate_compat.lifted(module, unregister)


def install_hook(module: torch.nn.Module, hook: ModelHook, name: str) -> InstalledHook:
    """Register ``hook`` on ``module`` under ``name``, beneath any accelerate hook."""
    created = diffusers_compat.registry_of(module) is None
    had_forward: list[bool] = []

    def register() -> None:
        had_forward.append("forward" in vars(module))  # as it is beneath any accelerate hook
        HookRegistry.check_if_exists_or_initialize(module).register_hook(hook, name)
        diffusers_compat.invalidate_parents(module)

    accelerate_compat.lifted(module, register)
    return InstalledHook(weakref.ref(module), name, created, had_forward[0])


@dataclass
class WrappedAttribute:
    """An instance attribute replaced by a wrapper; the owner and the wrapper are held weakly.

    What to put back is kept on the wrapper itself (which the owner holds), so this record never
    keeps the owner alive, not even through a bound method of it.
    """

    owner_ref: weakref.ref[Any]
    name: str
    wrapper_ref: weakref.ref[Any]

    def restore(self) -> bool:
        """Put back what was there; returns False (and leaves it) if someone re-wrapped ours or the owner is gone."""
        owner, wrapper = self.owner_ref(), self.wrapper_ref()
        if owner is None or wrapper is None or vars(owner).get(self.name, _MISSING) is not wrapper:
            return False
        previous = wrapper.__ddo_previous__
        if previous is _MISSING:
            object.__delattr__(owner, self.name)
        else:
            object.__setattr__(owner, self.name, previous)
        return True


def wrap_attribute(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> WrappedAttribute:
    """Replace ``owner.name`` on the instance with ``make(original)``, keeping its metadata."""
    previous = vars(owner).get(name, _MISSING)
    original = getattr(owner, name)
    wrapper = functools.wraps(original)(make(original))
    wrapper.__ddo_previous__ = previous  # type: ignore[attr-defined]  # a function takes any attribute; its type names none
    object.__setattr__(owner, name, wrapper)  # bypasses DiffusionPipeline.__setattr__'s config sync
    return WrappedAttribute(weakref.ref(owner), name, weakref.ref(wrapper))


def remove_every_hook(module: torch.nn.Module, earlier: Iterable[ModelHook] = ()) -> int:
    """Remove every diffusers and accelerate hook from ``module`` and its submodules, leaving no cycles.

    For a component leaving its pipeline. Removed hooks still sit in reference cycles that reach the
    module (a diffusers hook and its ``HookFunctionReference`` point at each other, and group
    offloading's hook holds its ``ModuleGroup``, which holds the modules), and ``remove_hook``
    leaves the module's own bound ``forward`` as an instance attribute, a cycle through the module
    itself. Hooks diffusers removed earlier can still be reached: under streams, a layer that never
    ran keeps its execution tracker, whose callback closes over the lazy-prefetch hook (holding the
    execution order, that is the modules). Only a full garbage collection would free those; so the
    removed hooks' state is cleared, and that of every hook they reach, and the leftover
    ``forward`` deleted: the module is freed by reference counting as soon as nobody else holds it.
    Hooks that diffusers removed on its own and nothing reaches any more (under streams, the first
    forward removes the lazy-prefetch hook and the trackers of the layers that ran: garbage cycles
    still holding those layers) can only be cleared when passed as ``earlier``.

    Args:
        module: The component leaving its pipeline.
        earlier: Hooks ``module`` carried before, installed or not now; their state is cleared too.

    Returns:
        How many hooks were removed.

    Examples:
        >>> import gc, weakref
        >>> from diffusers.hooks import apply_group_offloading
        >>> model = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(2, 2)]), torch.nn.Linear(2, 2))
        >>> apply_group_offloading(model, torch.device("cpu"), offload_type="block_level",
        ...                        num_blocks_per_group=1)
        >>> alive, _ = weakref.ref(model), gc.disable()
        >>> remove_every_hook(model) > 0
        True
        >>> del model
        >>> alive() is None
        True
        >>> gc.enable()
    """
    removed = 0
    for sub in module.modules():
        registry = diffusers_compat.registry_of(sub)
        if registry is not None:
            for name in list(registry.hooks):
                hook = registry.hooks[name]
                registry.remove_hook(name, recurse=False)
                _clear_state(hook)
                removed += 1
            diffusers_compat.drop_registry(sub)
        if accelerate_compat.has_hook(sub):
            accelerate_compat.remove(sub)
            removed += 1
        forward = vars(sub).get("forward")
        if getattr(forward, "__func__", None) is type(sub).forward and getattr(forward, "__self__", None) is sub:
            del sub.forward  # the plain bound method, left as an instance attribute: a cycle through sub
    for hook in earlier:
        _clear_state(hook)
    return removed


def _clear_state(hook: ModelHook) -> None:
    """Clear the state of a removed ``hook`` and of every hook it reaches, breaking their cycles."""
    pending, seen = [hook], set()
    while pending:
        current = pending.pop()
        if id(current) not in seen:
            seen.add(id(current))
            state = vars(current)
            pending.extend(reached for value in state.values() for reached in _hooks_held_by(value))
            state.clear()


def _hooks_held_by(value: Any) -> list[ModelHook]:
    """The hooks ``value`` holds directly: itself, a bound method's owner, a closure's cells."""
    if isinstance(value, ModelHook):
        return [value]
    if isinstance(getattr(value, "__self__", None), ModelHook):
        return [value.__self__]
    held = []
    for cell in getattr(value, "__closure__", None) or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(contents, ModelHook):
            held.append(contents)
    return held
