"""The module hooks that signal denoiser forwards and VAE decodes, shared where pipelines share a module.

``from_pipe`` builds a second pipeline on the same components. Each attached pipeline joins the one
signal hook of a shared module with its phase machine (:func:`join`); each machine reacts only to
forwards inside a call of its own pipeline in the calling thread, and the last machine to leave
removes the hook.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from diffusers.hooks import ModelHook

from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.hooks.mechanics import InstalledHook, install_hook
from ddo_hooks.hooks.phases import CallPhases, Phase

__all__ = ["DecodeSignal", "DenoiserSignal", "Joined", "join"]

_lock = threading.Lock()  # the machines of every shared signal hook


class _Signal(ModelHook):
    """A signal hook on one module, shared by every attached pipeline that holds the module.

    ``from_pipe`` builds pipelines on the same components. Each machine reacts to a forward only
    inside a call of its own pipeline in this thread.

    Args:
        machine: The phase machine of the first pipeline.
        earlier: For that pipeline, the denoiser is a prior whose output a later denoiser takes.
    """

    def __init__(self, machine: CallPhases, *, earlier: bool = False) -> None:
        super().__init__()
        self.machines: list[tuple[CallPhases, bool]] = [(machine, earlier)]
        self.installed: InstalledHook | None = None


class DenoiserSignal(_Signal):
    """Tells the machines a denoiser forward is starting; a dictionary lookup inside the loop."""

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict]:
        """Signal each machine unless its call in this thread is in a loop of a known stage; pass them on."""
        for machine, earlier in self.machines:
            call = machine.current()
            if call is not None and (call.phase is not Phase.DENOISING or call.stage is None):
                machine.denoiser_forward(earlier=earlier)
        return args, kwargs


class DecodeSignal(_Signal):
    """Tells the machines a VAE started decoding (``vae.decode`` is not ``forward``; these submodules are)."""

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict]:
        """Signal each machine; pass the arguments on."""
        for machine, _ in self.machines:
            machine.decode_start()
        return args, kwargs


@dataclass
class Joined:
    """One machine's place in a shared signal hook; the last to leave removes the hook.

    The hook is held weakly: its module's registry holds it, and it holds the module's forward.
    """

    signal_ref: weakref.ref[_Signal]
    machine: CallPhases

    def remove(self) -> None:
        """Leave the hook; remove it from its module when no machine is left."""
        signal = self.signal_ref()
        if signal is None:
            return  # the module was collected, and its hooks with it
        with _lock:
            signal.machines = [entry for entry in signal.machines if entry[0] is not self.machine]
            if not signal.machines and signal.installed is not None:
                signal.installed.remove()
                signal.installed = None


def join(
    module: torch.nn.Module, kind: type[_Signal], name: str, machine: CallPhases, *, earlier: bool = False
) -> Joined:
    """Add ``machine`` to the signal hook ``name`` of ``module``, installing the hook if it is the first."""
    with _lock:
        registry = diffusers_compat.registry_of(module)
        signal = None if registry is None else registry.hooks.get(name)
        if isinstance(signal, kind) and signal.installed is not None:
            signal.machines = [*signal.machines, (machine, earlier)]  # a new list: a forward may be iterating
        else:
            signal = kind(machine, earlier=earlier)
            signal.installed = install_hook(module, signal, name)
        return Joined(weakref.ref(signal), machine)
