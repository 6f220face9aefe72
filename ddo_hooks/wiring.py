"""Installing the signals the phase machine listens to, and removing them exactly.

Two kinds of attachment, each with an exact inverse:

* **Module hooks** through diffusers' ``HookRegistry`` (public surface only:
  ``check_if_exists_or_initialize``, ``register_hook``, ``remove_hook``, ``hooks``,
  ``invalidate_child_registries_cache``). Where a module already carries an accelerate
  hook, ours goes *beneath* it: accelerate's hook is taken off with
  ``remove_hook_from_module``, ours is registered, and the same accelerate hook object is
  put back with ``add_hook_to_module``. Accelerate then saves our wrapper as the forward it
  restores, so ``maybe_free_model_hooks()`` (which removes and re-adds every accelerate
  hook at the end of a call) keeps ours. Removal does the same dance in reverse.
* **Instance attributes** of the pipeline (``progress_bar``, ``check_inputs``,
  ``maybe_free_model_hooks`` and the loading methods) wrapped on the instance, never the
  class, and restored to exactly what was there. A wrapper that somebody else wrapped
  again is left in place but goes inert.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from accelerate.hooks import add_hook_to_module, remove_hook_from_module
from diffusers.hooks import HookRegistry, ModelHook

from ddo_hooks.phases import CallPhases, Phase

__all__ = ["InstalledHook", "WrappedAttribute", "install_hook", "wrap_attribute"]

_MISSING = object()


class DenoiserSignal(ModelHook):
    """Tells the machine a denoiser forward is starting; a flag check inside the loop."""

    def __init__(self, machine: CallPhases) -> None:
        super().__init__()
        self.machine = machine

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict]:
        if self.machine.phase is not Phase.DENOISING:
            self.machine.denoiser_forward()
        return args, kwargs


class DecodeSignal(ModelHook):
    """Tells the machine the VAE started decoding.

    ``vae.decode`` is not ``forward``; its ``post_quant_conv`` and ``decoder`` submodules are.
    """

    def __init__(self, machine: CallPhases) -> None:
        super().__init__()
        self.machine = machine

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict]:
        if self.machine.phase is Phase.DENOISING:
            self.machine.decode_start()
        return args, kwargs


def _accelerate_hook(module: torch.nn.Module) -> Any:
    # The one read of accelerate's attribute: there is no public accessor for it.
    return getattr(module, "_hf_hook", None)


def _with_accelerate_lifted(module: torch.nn.Module, change: Callable[[], None]) -> None:
    """Run ``change`` with the module's accelerate hook (if any) taken off, then put it back on top."""
    accelerate_hook = _accelerate_hook(module)
    if accelerate_hook is None:
        change()
        return
    before = dict(vars(module))
    remove_hook_from_module(module)
    # Besides its hook, accelerate's removal pops the warning wrappers dispatch_model adds
    # (``to``, ``cuda``, ...); put those back too, so the module ends as it started.
    popped = {k: v for k, v in before.items() if k not in vars(module) and k not in ("_hf_hook", "_old_forward")}
    try:
        change()
    finally:
        add_hook_to_module(module, accelerate_hook)
        for key, value in popped.items():
            object.__setattr__(module, key, value)


@dataclass
class InstalledHook:
    """A ddo_hooks hook registered on one module."""

    module: torch.nn.Module
    name: str
    created_registry: bool
    had_forward_attribute: bool

    def remove(self) -> None:
        """Unregister the hook, leaving accelerate's hook (if any) on top and no registry we created."""
        module = self.module

        def unregister() -> None:
            registry = HookRegistry.check_if_exists_or_initialize(module)
            registry.remove_hook(self.name, recurse=False)
            if self.created_registry and not registry.hooks:
                del module._diffusers_hook  # the registry attribute did not exist before we came
            forward = vars(module).get("forward")
            if not self.had_forward_attribute and getattr(forward, "__func__", None) is type(module).forward:
                del module.forward  # remove_hook leaves the plain bound method as an instance attribute
            _invalidate_parents(module)

        _with_accelerate_lifted(module, unregister)


def _invalidate_parents(module: torch.nn.Module) -> None:
    if hasattr(module, "_diffusers_hook"):
        HookRegistry.check_if_exists_or_initialize(module).invalidate_child_registries_cache()


def install_hook(module: torch.nn.Module, hook: ModelHook, name: str) -> InstalledHook:
    """Register ``hook`` on ``module`` under ``name``, beneath any accelerate hook."""
    created = not hasattr(module, "_diffusers_hook")
    had_forward: list[bool] = []

    def register() -> None:
        had_forward.append("forward" in vars(module))  # as it is beneath any accelerate hook
        HookRegistry.check_if_exists_or_initialize(module).register_hook(hook, name)
        _invalidate_parents(module)

    _with_accelerate_lifted(module, register)
    return InstalledHook(module, name, created, had_forward[0])


@dataclass
class WrappedAttribute:
    """An instance attribute replaced by a wrapper, and what to put back."""

    owner: Any
    name: str
    previous: Any
    wrapper: Any

    def restore(self) -> bool:
        """Put back what was there; returns False (and leaves it) if someone re-wrapped ours."""
        if vars(self.owner).get(self.name, _MISSING) is not self.wrapper:
            return False
        if self.previous is _MISSING:
            object.__delattr__(self.owner, self.name)
        else:
            object.__setattr__(self.owner, self.name, self.previous)
        return True


def wrap_attribute(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> WrappedAttribute:
    """Replace ``owner.name`` on the instance with ``make(original)``, keeping its metadata."""
    previous = vars(owner).get(name, _MISSING)
    original = getattr(owner, name)
    wrapper = functools.wraps(original)(make(original))
    object.__setattr__(owner, name, wrapper)  # bypasses DiffusionPipeline.__setattr__'s config sync
    return WrappedAttribute(owner, name, previous, wrapper)


class LoopBar:
    """The pipeline's progress bar, reporting when the denoising loop starts and ends.

    Used as a context manager (``with self.progress_bar(total=n) as bar``) it signals on
    enter and exit, and sees exceptions leaving the loop. Iterated
    (``for t in self.progress_bar(timesteps)``) it signals on the first step and when the
    iteration is exhausted. Everything else goes to the wrapped bar.
    """

    def __init__(self, bar: Any, machine: CallPhases) -> None:
        self._bar = bar
        self._machine = machine
        self._call: int | None = None

    def __enter__(self) -> Any:
        self._call = self._machine.loop_enter()
        return self._bar.__enter__()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return self._bar.__exit__(exc_type, exc, tb)
        finally:
            self._machine.loop_exit(error=exc_type is not None, call=self._call)

    def __iter__(self) -> Any:
        call = self._machine.loop_enter()
        finished = False
        try:
            yield from self._bar
            finished = True
        finally:
            if not finished:  # left early (break, or an exception): the call's boundaries are dropped
                self._machine.loop_exit(error=True, call=call)
        self._machine.loop_exit(error=False, call=call)

    def __len__(self) -> int:
        return len(self._bar)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bar, name)
