"""The signals a pipeline gives the phase machine, installed on one pipeline and removed exactly.

``PipelineSignals`` checks that a pipeline can signal the boundaries a policy enables (from
its ``__call__`` code: a progress bar around the loop, ``maybe_free_model_hooks()`` at the
end), then installs: a :class:`DenoiserSignal` on every denoiser, a :class:`DecodeSignal` on the
VAE's decode submodules, and instance wrappers of ``check_inputs``, ``progress_bar`` (a
:class:`LoopBar`), ``maybe_free_model_hooks`` and the loading methods (see
:mod:`ddo_hooks.hooks.mechanics`).

Examples:
    >>> from ddo_hooks.boundaries import BOUNDARIES
    >>> from ddo_hooks.hooks.phases import CallPhases
    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline
    >>> pipe = build_pipeline("sd")
    >>> signals = PipelineSignals(pipe, CallPhases("sd", print))
    >>> signals.check(BOUNDARIES)
    >>> [type(m).__name__ for m in signals.modules(DENOISER_COMPONENTS)]
    ['UNet2DConditionModel']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from diffusers.hooks import ModelHook

from ddo_hooks._compat.diffusers import call_names
from ddo_hooks.boundaries import AFTER_CALL, BEFORE_TRANSFORMER, BEFORE_VAE
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.hooks.mechanics import InstalledHook, WrappedAttribute, install_hook, wrap_attribute
from ddo_hooks.hooks.phases import CallPhases, Phase
from ddo_hooks.release import guard

__all__ = [
    "DECODE_SUBMODULES",
    "DENOISER_COMPONENTS",
    "HOOK_NAMES",
    "LOADING_METHODS",
    "VAE_COMPONENTS",
    "DecodeSignal",
    "DenoiserSignal",
    "LoopBar",
    "PipelineSignals",
]

DENOISER_COMPONENTS = ("transformer", "transformer_2", "unet", "prior")
"""Pipeline components that run inside the denoising loop."""
VAE_COMPONENTS = ("vae", "movq", "vqvae")
"""Pipeline components that decode latents."""
DECODE_SUBMODULES = ("post_quant_conv", "decoder")
"""Submodules of a VAE that run first in ``decode`` (``decode`` itself is not ``forward``)."""
LOADING_METHODS = (
    "to",
    "enable_model_cpu_offload",
    "enable_sequential_cpu_offload",
    "enable_group_offload",
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


class DenoiserSignal(ModelHook):
    """Tells the machine a denoiser forward is starting; a flag check inside the loop."""

    def __init__(self, machine: CallPhases) -> None:
        super().__init__()
        self.machine = machine

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict]:
        """Signal the machine unless the loop is already known to run; pass the arguments on."""
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
        """Signal the machine if the loop is still open; pass the arguments on."""
        if self.machine.phase is Phase.DENOISING:
            self.machine.decode_start()
        return args, kwargs


class PipelineSignals:
    """The signal hooks and wrappers of one pipeline; inert once removed.

    Args:
        pipeline: The diffusers pipeline.
        machine: The phase machine the signals drive.
    """

    def __init__(self, pipeline: Any, machine: CallPhases) -> None:
        self.pipeline = pipeline
        self.machine = machine
        self.owner = type(pipeline).__name__
        self.active = False
        self._hooks: list[InstalledHook] = []
        self._attributes: list[WrappedAttribute] = []

    def modules(self, names: tuple[str, ...]) -> list[torch.nn.Module]:
        """The pipeline's components with these names that are modules."""
        found = (getattr(self.pipeline, name, None) for name in names)
        return [module for module in found if isinstance(module, torch.nn.Module)]

    def decode_modules(self) -> list[torch.nn.Module]:
        """The VAE submodules that run first when latents are decoded."""
        found = (getattr(vae, sub, None) for vae in self.modules(VAE_COMPONENTS) for sub in DECODE_SUBMODULES)
        return [module for module in found if isinstance(module, torch.nn.Module)]

    def check(self, boundaries: Iterable[str]) -> None:
        """Refuse a pipeline that gives no signal for one of ``boundaries``.

        Raises:
            InvalidArgumentError: Naming the pipeline class, the missing signal and the fix.
        """
        names = call_names(self.pipeline)
        loop = "progress_bar" in names
        signals = {
            BEFORE_TRANSFORMER: (
                loop or bool(self.modules(DENOISER_COMPONENTS)),
                "a progress bar around its denoising loop or a denoiser component",
            ),
            BEFORE_VAE: (
                loop or bool(self.decode_modules()),
                "a progress bar around its denoising loop or a VAE decoder",
            ),
            AFTER_CALL: ("maybe_free_model_hooks" in names, "a call to maybe_free_model_hooks() at its end"),
        }
        for boundary in boundaries:
            present, what = signals[boundary]
            if not present:
                raise InvalidArgumentError(
                    f"{self.owner} gives no signal for {boundary!r}: its __call__ has no {what}. "
                    f"Set boundaries.{boundary}.enabled: false in the policy and call "
                    f"attachment.boundary({boundary!r}) yourself at that point"
                )

    def install(self) -> None:
        """Install every hook and wrapper; on failure, remove what was installed and re-raise."""
        self.active = True
        try:
            self._install()
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove every hook and wrapper; wrappers someone else re-wrapped stay, inert."""
        self.active = False
        for attribute in reversed(self._attributes):
            attribute.restore()
        self._attributes.clear()
        for hook in reversed(self._hooks):
            hook.remove()
        self._hooks.clear()

    def _install(self) -> None:
        machine = self.machine
        for module in self.modules(DENOISER_COMPONENTS):
            self._hooks.append(install_hook(module, DenoiserSignal(machine), HOOK_NAMES["denoiser"]))
        for module in self.decode_modules():
            self._hooks.append(install_hook(module, DecodeSignal(machine), HOOK_NAMES["decode"]))
        pipe = self.pipeline
        if hasattr(pipe, "check_inputs"):
            self._wrap("check_inputs", lambda original: self._signal_before(original, machine.call_start))
        self._wrap("progress_bar", self._progress_bar)
        self._wrap("maybe_free_model_hooks", lambda original: self._signal_after(original, machine.call_end))
        for name in LOADING_METHODS:
            if callable(getattr(pipe, name, None)):
                self._wrap(name, lambda original, name=name: self._loading(original, name))

    def _wrap(self, name: str, make: Any) -> None:
        self._attributes.append(wrap_attribute(self.pipeline, name, make))

    def _signal_before(self, original: Any, signal: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                signal()
            return original(*args, **kwargs)

        return wrapper

    def _signal_after(self, original: Any, signal: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if self.active:
                signal()
            return result

        return wrapper

    def _progress_bar(self, original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bar = original(*args, **kwargs)
            return LoopBar(bar, self.machine) if self.active else bar

        return wrapper

    def _loading(self, original: Any, name: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return original(*args, **kwargs)
            with guard.section("loading", f"{self.owner}.{name}()"):
                return original(*args, **kwargs)

        return wrapper


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
