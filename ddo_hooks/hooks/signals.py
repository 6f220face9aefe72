"""The signals a pipeline gives the phase machine, installed on one pipeline and removed exactly.

:class:`PipelineSignals` installs, for one attached pipeline:

* a **call signal**: the pipeline's class is swapped, on this instance only, for a subclass of
  the same name whose ``__call__`` tells the machine when the call starts and when it returns or
  raises (Python looks ``__call__`` up on the type, so no instance attribute can do this). The
  call's end never depends on a helper method being called at the end;
* a :class:`LoopBar` around ``progress_bar`` of the pipeline and of every pipeline it holds
  (the *Combined* pipelines run their loops in a prior and a decoder pipeline);
* a :class:`DenoiserSignal` on every denoiser component and a :class:`DecodeSignal` on the
  decoder submodules of every VAE, of the pipeline and the pipelines it holds;
* loading sections around the methods that load, move or re-hook components.

Everything is removed again by :meth:`PipelineSignals.remove`, and nothing here keeps the
pipeline or its components alive.

Examples:
    >>> from ddo_hooks.hooks.phases import CallPhases
    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline
    >>> pipe = build_pipeline("sd")
    >>> signals = PipelineSignals(pipe, CallPhases("sd", print, print))
    >>> [type(m).__name__ for m in signals.denoisers()], [type(m).__name__ for m in signals.decode_modules()]
    (['UNet2DConditionModel'], ['Conv2d', 'Decoder'])
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from diffusers import DiffusionPipeline
from diffusers.hooks import ModelHook

from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.hooks.mechanics import InstalledHook, WrappedAttribute, install_hook, wrap_attribute
from ddo_hooks.hooks.phases import Call, CallPhases, Phase
from ddo_hooks.release import guard

__all__ = [
    "DECODE_SUBMODULES",
    "DENOISER_PATTERN",
    "HOOK_NAMES",
    "LOADING_METHODS",
    "DecodeSignal",
    "DenoiserSignal",
    "LoopBar",
    "PipelineSignals",
    "sub_pipelines",
]

DENOISER_PATTERN = re.compile(r"^(?:[a-z0-9]+_)?(?:transformer|unet|prior)(?:_[0-9]+)?$")
"""Component names of denoisers: ``transformer``, ``transformer_2``, ``unet``, ``prior``, ``prior_prior`` ..."""
DECODE_SUBMODULES = ("post_quant_conv", "decoder")
"""Submodules of a VAE that run first in ``decode`` (``decode`` itself is not ``forward``). A VAE is
any module component with a ``decode`` method and one of these."""
LOADING_METHODS = (
    "to",
    "enable_model_cpu_offload",
    "enable_sequential_cpu_offload",
    "enable_group_offload",
    "maybe_free_model_hooks",
    "remove_all_hooks",
    "reset_device_map",
    "load_lora_weights",
    "unload_lora_weights",
    "fuse_lora",
    "unfuse_lora",
    "set_adapters",
    "delete_adapters",
    "load_ip_adapter",
    "unload_ip_adapter",
    "load_textual_inversion",
    "unload_textual_inversion",
)
"""Pipeline methods that load, move or re-hook components: boundaries are refused while they run."""
HOOK_NAMES = {"denoiser": "ddo_hooks.denoiser", "decode": "ddo_hooks.vae_decode"}
"""The registry names of the signal hooks."""

_SIGNALS: weakref.WeakKeyDictionary[Any, PipelineSignals] = weakref.WeakKeyDictionary()
_CALL_CLASSES: dict[type, type] = {}
_ORIGINAL_CLASS: dict[type, type] = {}
_classes_lock = threading.Lock()  # the class swaps, and the machines of shared signal hooks


class _Signal(ModelHook):
    """A signal hook on one module, shared by every attached pipeline that holds the module.

    ``from_pipe`` builds pipelines on the same components. Each machine reacts to a forward only
    inside a call of its own pipeline in this thread.
    """

    def __init__(self, machine: CallPhases) -> None:
        super().__init__()
        self.machines = [machine]
        self.installed: InstalledHook | None = None


class DenoiserSignal(_Signal):
    """Tells the machines a denoiser forward is starting; a dictionary lookup inside the loop."""

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict]:
        """Signal each machine unless its call in this thread is already in a loop; pass the arguments on."""
        for machine in self.machines:
            call = machine.current()
            if call is not None and call.phase is not Phase.DENOISING:
                machine.denoiser_forward()
        return args, kwargs


class DecodeSignal(_Signal):
    """Tells the machines a VAE started decoding (``vae.decode`` is not ``forward``; these submodules are)."""

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict]:
        """Signal each machine; pass the arguments on."""
        for machine in self.machines:
            machine.decode_start()
        return args, kwargs


@dataclass
class _Joined:
    """One machine's place in a shared signal hook; the last to leave removes the hook.

    The hook is held weakly: its module's registry holds it, and it holds the module's forward.
    """

    signal_ref: weakref.ref[_Signal]
    machine: CallPhases

    def remove(self) -> None:
        signal = self.signal_ref()
        if signal is None:
            return  # the module was collected, and its hooks with it
        with _classes_lock:
            if self.machine in signal.machines:
                signal.machines.remove(self.machine)
            if not signal.machines and signal.installed is not None:
                signal.installed.remove()
                signal.installed = None


def _join(module: torch.nn.Module, kind: type[_Signal], name: str, machine: CallPhases) -> _Joined:
    """Add ``machine`` to the signal hook ``name`` of ``module``, installing the hook if it is the first."""
    with _classes_lock:
        registry = diffusers_compat.registry_of(module)
        signal = None if registry is None else registry.hooks.get(name)
        if isinstance(signal, kind) and signal.installed is not None:
            signal.machines.append(machine)
        else:
            signal = kind(machine)
            signal.installed = install_hook(module, signal, name)
        return _Joined(weakref.ref(signal), machine)


class LoopBar:
    """A pipeline's progress bar, reporting when the denoising loop starts and ends.

    Used as a context manager (``with self.progress_bar(total=n) as bar``) it signals on enter
    and exit. Iterated (``for t in self.progress_bar(timesteps)``) it signals on the first step
    and when the iteration ends (exhausted, or left by ``break``). Everything else goes to the
    wrapped bar.
    """

    def __init__(self, bar: Any, machine: CallPhases) -> None:
        self._bar = bar
        self._machine = machine
        self._call: Call | None = None

    def __enter__(self) -> Any:
        self._call = self._machine.loop_enter()
        return self._bar.__enter__()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        try:
            return self._bar.__exit__(exc_type, exc, tb)
        finally:
            self._machine.loop_exit(self._call)

    def __iter__(self) -> Any:
        call = self._machine.loop_enter()
        try:
            yield from self._bar
        finally:
            self._machine.loop_exit(call)

    def __len__(self) -> int:
        return len(self._bar)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bar, name)


def sub_pipelines(pipeline: Any) -> list[Any]:
    """The pipelines a pipeline holds (as components or attributes, e.g. ``prior_pipe``), recursively."""
    found: dict[int, Any] = {}
    stack = [pipeline]
    while stack:
        current = stack.pop()
        for value in list(vars(current).values()):
            if isinstance(value, DiffusionPipeline) and value is not pipeline and id(value) not in found:
                found[id(value)] = value
                stack.append(value)
    return list(found.values())


def _signalling_class(cls: type) -> type:
    """A subclass of ``cls``, of the same name, whose ``__call__`` reports each call to the machine."""
    with _classes_lock:
        made = _CALL_CLASSES.get(cls)
        if made is None:
            original = cls.__call__

            @functools.wraps(original)
            def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
                signals = _SIGNALS.get(self)
                if signals is None or not signals.active:
                    return original(self, *args, **kwargs)
                return signals.run_call(original, self, args, kwargs)

            namespace = {"__call__": __call__, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
            made = type(cls)(cls.__name__, (cls,), {**namespace, "__doc__": cls.__doc__, "__slots__": ()})
            _CALL_CLASSES[cls], _ORIGINAL_CLASS[made] = made, cls
        return made


class PipelineSignals:
    """The signal hooks and wrappers of one pipeline; inert once removed.

    Args:
        pipeline: The diffusers pipeline (held weakly).
        machine: The phase machine the signals drive.
    """

    def __init__(self, pipeline: Any, machine: CallPhases) -> None:
        self._pipeline = weakref.ref(pipeline)
        self.machine = machine
        self.owner = type(pipeline).__name__
        self.active = False
        self._hooks: list[_Joined] = []
        self._attributes: list[WrappedAttribute] = []
        self._swapped: type | None = None

    @property
    def pipeline(self) -> Any:
        """The pipeline, or ``None`` once it was collected."""
        return self._pipeline()

    def pipelines(self) -> list[Any]:
        """The pipeline and every pipeline it holds."""
        pipe = self.pipeline
        return [] if pipe is None else [pipe, *sub_pipelines(pipe)]

    def _components(self) -> list[tuple[str, torch.nn.Module]]:
        seen: dict[int, tuple[str, torch.nn.Module]] = {}
        for pipe in self.pipelines():
            for name, value in pipe.components.items():
                if isinstance(value, torch.nn.Module):
                    seen.setdefault(id(value), (name, value))
        return list(seen.values())

    def denoisers(self) -> list[torch.nn.Module]:
        """The denoiser components (see :data:`DENOISER_PATTERN`), each once."""
        return [module for name, module in self._components() if DENOISER_PATTERN.match(name)]

    def decode_modules(self) -> list[torch.nn.Module]:
        """The submodules that run first when a VAE decodes, each once."""
        found: dict[int, torch.nn.Module] = {}
        for _, module in self._components():
            if callable(getattr(module, "decode", None)):
                for sub in DECODE_SUBMODULES:
                    part = getattr(module, sub, None)
                    if isinstance(part, torch.nn.Module):
                        found.setdefault(id(part), part)
        return list(found.values())

    def install(self) -> None:
        """Install every signal; on failure, remove what was installed and re-raise.

        Raises:
            InvalidArgumentError: The pipeline's class cannot be swapped for the call signal.
        """
        self.active = True
        try:
            self._install()
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove every signal; wrappers someone else re-wrapped stay, inert."""
        self.active = False
        pipe = self.pipeline
        if pipe is not None and self._swapped is not None and type(pipe) is self._swapped:
            object.__setattr__(pipe, "__class__", _ORIGINAL_CLASS[self._swapped])
        self._swapped = None
        if pipe is not None and _SIGNALS.get(pipe) is self:
            del _SIGNALS[pipe]
        for attribute in reversed(self._attributes):
            attribute.restore()
        self._attributes.clear()
        for hook in reversed(self._hooks):
            hook.remove()
        self._hooks.clear()

    def run_call(self, original: Callable[..., Any], pipe: Any, args: Any, kwargs: Any) -> Any:
        """Run one ``__call__`` of the pipeline as a call of the machine."""
        call = self.machine.call_start()
        try:
            result = original(pipe, *args, **kwargs)
        except BaseException as error:
            try:
                self.machine.call_end(call, error)
            except Exception as failure:  # the call's own error wins; the boundary's is noted on it
                error.add_note(f"ddo_hooks: the after_call boundary of this failed call also failed: {failure!r}")
            raise
        self.machine.call_end(call)
        return result

    def _install(self) -> None:
        pipe = self.pipeline
        machine = self.machine
        cls = type(pipe)
        made = _signalling_class(_ORIGINAL_CLASS.get(cls, cls))
        if cls is not made:
            try:
                object.__setattr__(pipe, "__class__", made)
            except TypeError as e:
                raise InvalidArgumentError(
                    f"{self.owner}: ddo_hooks cannot follow its calls ({e}); attach it to a plain diffusers pipeline"
                ) from e
            self._swapped = made
        _SIGNALS[pipe] = self
        for module in self.denoisers():
            self._hooks.append(_join(module, DenoiserSignal, HOOK_NAMES["denoiser"], machine))
        decoders = self.decode_modules()
        machine.has_decoder = bool(decoders)
        for module in decoders:
            self._hooks.append(_join(module, DecodeSignal, HOOK_NAMES["decode"], machine))
        for each in self.pipelines():
            self._attributes.append(wrap_attribute(each, "progress_bar", self._progress_bar))
            owner = type(each).__name__
            for name in LOADING_METHODS:
                if callable(getattr(each, name, None)):
                    self._attributes.append(
                        wrap_attribute(each, name, functools.partial(self._loading, f"{owner}.{name}()"))
                    )

    def _progress_bar(self, original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bar = original(*args, **kwargs)
            return LoopBar(bar, self.machine) if self.active else bar

        return wrapper

    def _loading(self, what: str, original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return original(*args, **kwargs)
            with guard.section("loading", what):
                return original(*args, **kwargs)

        return wrapper
