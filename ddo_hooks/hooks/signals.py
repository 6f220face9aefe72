"""The signals a pipeline gives the phase machine, installed on one pipeline and removed exactly.

:class:`PipelineSignals` installs, for one attached pipeline:

* a **call signal**: the pipeline's class is swapped, on this instance only, for a subclass of
  the same name whose ``__call__`` tells the machine when the call starts and when it returns or
  raises (Python looks ``__call__`` up on the type, so no instance attribute can do this). The
  call's end never depends on a helper method being called at the end;
* a :class:`~ddo_hooks.hooks.loop_bar.LoopBar` around ``progress_bar`` of the pipeline and of every pipeline it holds
  (the *Combined* pipelines run their loops in a prior and a decoder pipeline), which also
  counts the bar's steps;
* a :class:`DenoiserSignal` on every denoiser component and a :class:`DecodeSignal` on the
  decoder submodules of every VAE, of the pipeline and the pipelines it holds;
* a forward pre-hook on every other component (encoders, image encoders, priors; not the VAEs nor
  the final stage's denoisers) that tells the machine it ran (:meth:`CallPhases.component_ran`),
  so that a call knows whose work in it is done;
* loading sections around the methods that load, move or re-hook components.

Each loop gets the :class:`~ddo_hooks.hooks.phases.Stage` that the components of the pipeline
running it say (:meth:`PipelineSignals.stage_of`), or, where they cannot, its first denoiser.

Everything is removed again by :meth:`PipelineSignals.remove`, and nothing here keeps the
pipeline or its components alive.

Examples:
    >>> from ddo_hooks.hooks.phases import CallPhases
    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline
    >>> pipe = build_pipeline("sd")
    >>> signals = PipelineSignals(pipe, CallPhases("sd", print, print))
    >>> def names(modules):
    ...     return [type(m).__name__ for m in modules]
    >>> names(signals.denoisers()), names(signals.decode_modules())
    (['UNet2DConditionModel'], ['Conv2d', 'Decoder'])
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from diffusers import DiffusionPipeline

from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.hooks.loop_bar import LoopBar
from ddo_hooks.hooks.mechanics import WrappedAttribute, wrap_attribute
from ddo_hooks.hooks.phases import CallPhases, Stage
from ddo_hooks.hooks.signal_hooks import DecodeSignal, DenoiserSignal, Joined, join
from ddo_hooks.ledger import LEDGER
from ddo_hooks.release import guard

__all__ = [
    "DECODE_SUBMODULES",
    "DENOISER_PATTERN",
    "HOOK_NAMES",
    "LOADING_METHODS",
    "PRIOR_PATTERN",
    "DecodeSignal",
    "DenoiserSignal",
    "LoopBar",
    "PipelineSignals",
    "sub_pipelines",
]

DENOISER_PATTERN = re.compile(r"^(?:[a-z0-9]+_)?(?:transformer|unet|prior)(?:_[0-9]+)?$")
"""Component names of denoisers: ``transformer``, ``transformer_2``, ``unet``, ``prior``, ``prior_prior`` ..."""
PRIOR_PATTERN = re.compile(r"^(?:[a-z0-9]+_)?prior(?:_[0-9]+)?$")
"""Denoisers that are priors (``prior``, ``prior_prior``): their loop makes an embedding that a later
denoiser of the same pipeline takes, when the pipeline holds one."""
DECODE_SUBMODULES = ("quantize", "post_quant_conv", "decoder")
"""Submodules of a VAE that run first in ``decode`` (``decode`` itself is not ``forward``): a VQ
model's ``decode`` quantizes first unless told not to, the others start with ``post_quant_conv``
or ``decoder``. A VAE is any module component with a ``decode`` method and one of these."""
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

_ORIGINAL = "_ddo_hooks_original_class"  # the attribute of a signalling class that names the class it stands for
_classes_lock = threading.Lock()


def sub_pipelines(pipeline: Any) -> list[Any]:
    """The pipelines a pipeline holds (as components or attributes, e.g. ``prior_pipe``), recursively.

    In the order it holds them (the order its ``__init__`` set them), each before those it holds in turn.
    """
    found: dict[int, Any] = {}

    def visit(current: Any) -> None:
        for value in list(vars(current).values()):
            if isinstance(value, DiffusionPipeline) and value is not pipeline and id(value) not in found:
                found[id(value)] = value
                visit(value)

    visit(pipeline)
    return list(found.values())


def _signalling_class(cls: type) -> type:
    """A subclass of ``cls``, of the same name, whose ``__call__`` reports each call to the machine."""
    with _classes_lock:
        made = LEDGER.read(cls).call_class
        if made is None:
            original = cls.__call__

            @functools.wraps(original)
            def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
                signals = LEDGER.read(self).signals
                if signals is None or not signals.active:
                    return original(self, *args, **kwargs)
                return signals.run_call(original, self, args, kwargs)

            def __reduce_ex__(self: Any, protocol: Any) -> Any:
                from ddo_hooks.errors import InvalidArgumentError

                raise InvalidArgumentError(
                    f"this {cls.__name__} has ddo_hooks attached, and its hooks hold locks and a state machine that "
                    "cannot be pickled or copied; call detach() on the attachment first (and attach() again in the "
                    "process that gets the copy)"
                )

            namespace = {"__call__": __call__, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                         "__reduce_ex__": __reduce_ex__, _ORIGINAL: cls}  # fmt: skip
            made = type(cls)(cls.__name__, (cls,), {**namespace, "__doc__": cls.__doc__, "__slots__": ()})
            LEDGER.write(cls, call_class=made)
        return made


def _original_class(cls: type) -> type:
    """The class a signalling class stands for; ``cls`` itself for any other."""
    original: type = cls.__dict__.get(_ORIGINAL, cls)
    return original


class PipelineSignals:
    """The signal hooks and wrappers of one pipeline; inert once removed.

    Args:
        pipeline: The diffusers pipeline (held weakly).
        machine: The phase machine the signals drive.
        before_call: Called with :meth:`pipelines` as each top-level call starts, before the pipeline's
            own ``__call__``; what it raises ends the call as the pipeline's own error would.
    """

    def __init__(
        self, pipeline: Any, machine: CallPhases, *, before_call: Callable[[list[Any]], object] | None = None
    ) -> None:
        self._pipeline = weakref.ref(pipeline)
        self.machine = machine
        self._before_call = before_call
        self.owner = type(pipeline).__name__
        self.active = False
        self._hooks: list[Joined] = []
        self._attributes: list[WrappedAttribute] = []
        self._ran: list[torch.utils.hooks.RemovableHandle] = []
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

    def denoiser_stages(self) -> dict[int, Stage]:
        """The stage of each denoiser component, by ``id``.

        A prior (:data:`PRIOR_PATTERN`) is EARLIER where the pipeline holds a denoiser that is not
        one; every other denoiser is FINAL.
        """
        named = [(name, module) for name, module in self._components() if DENOISER_PATTERN.match(name)]
        priors_feed = any(not PRIOR_PATTERN.match(name) for name, _ in named)
        return {
            id(module): Stage.EARLIER if priors_feed and PRIOR_PATTERN.match(name) else Stage.FINAL
            for name, module in named
        }

    def stage_of(self, pipe: Any) -> Stage | None:
        """The stage of the loops ``pipe`` runs (the attached pipeline, or one it holds).

        EARLIER when ``pipe`` is held before another held pipeline that holds a FINAL denoiser,
        or when every denoiser it holds is EARLIER; FINAL when every one is FINAL, or when it
        holds no known denoiser; ``None`` (the loop's first denoiser forward says) when it holds both.
        """
        stages = self.denoiser_stages()

        def held_stages(each: Any) -> set[Stage]:
            return {stages[id(value)] for value in each.components.values() if id(value) in stages}

        held = self.pipelines()[1:]
        place = next((i for i, each in enumerate(held) if each is pipe), None)
        if place is not None and any(Stage.FINAL in held_stages(later) for later in held[place + 1 :]):
            return Stage.EARLIER
        own = held_stages(pipe)
        if own == {Stage.EARLIER}:
            return Stage.EARLIER
        return None if len(own) > 1 else Stage.FINAL

    def decode_modules(self) -> list[torch.nn.Module]:
        """The submodules that run first when a VAE decodes, each once."""
        found: dict[int, torch.nn.Module] = {}
        for _, module in self._components():
            if _decodes(module):
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
            object.__setattr__(pipe, "__class__", _original_class(self._swapped))
        self._swapped = None
        if pipe is not None and LEDGER.read(pipe).signals is self:
            LEDGER.erase(pipe, "signals")
        for attribute in reversed(self._attributes):
            attribute.restore()
        self._attributes.clear()
        for hook in reversed(self._hooks):
            hook.remove()
        self._hooks.clear()
        for handle in self._ran:
            handle.remove()
        self._ran.clear()

    def run_call(self, original: Callable[..., Any], pipe: Any, args: Any, kwargs: Any) -> Any:
        """Run one ``__call__`` of the pipeline as a call of the machine."""
        call = self.machine.call_start()
        try:
            if self._before_call is not None and call.depth == 1:
                self._before_call(self.pipelines())
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
        made = _signalling_class(_original_class(cls))
        if cls is not made:
            try:
                object.__setattr__(pipe, "__class__", made)
            except TypeError as e:
                raise InvalidArgumentError(
                    f"{self.owner}: ddo_hooks cannot follow its calls ({e}); attach it to a plain diffusers pipeline"
                ) from e
            self._swapped = made
        LEDGER.write(pipe, signals=self)
        stages = self.denoiser_stages()
        for module in self.denoisers():
            earlier = stages[id(module)] is Stage.EARLIER
            self._hooks.append(join(module, DenoiserSignal, HOOK_NAMES["denoiser"], machine, earlier=earlier))
        for name, module in self._components():  # every component but the VAEs and the final denoisers
            if not _decodes(module) and stages.get(id(module), Stage.EARLIER) is Stage.EARLIER:
                self._ran.append(module.register_forward_pre_hook(functools.partial(_ran, machine, name)))
        decoders = self.decode_modules()
        machine.has_decoder = bool(decoders)
        for module in decoders:
            self._hooks.append(join(module, DecodeSignal, HOOK_NAMES["decode"], machine))
        for each in self.pipelines():
            stage = self.stage_of(each)
            self._attributes.append(wrap_attribute(each, "progress_bar", functools.partial(self._progress_bar, stage)))
            owner = type(each).__name__
            for name in LOADING_METHODS:
                if callable(getattr(each, name, None)):
                    self._attributes.append(
                        wrap_attribute(each, name, functools.partial(self._loading, f"{owner}.{name}()"))
                    )

    def _progress_bar(self, stage: Stage | None, original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bar = original(*args, **kwargs)
            return LoopBar(bar, self.machine, stage) if self.active else bar

        return wrapper

    def _loading(self, what: str, original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return original(*args, **kwargs)
            with guard.section("loading", what):
                return original(*args, **kwargs)

        return wrapper


def _decodes(module: torch.nn.Module) -> bool:
    """Whether a component is a VAE: it has a ``decode`` method."""
    return callable(getattr(module, "decode", None))


def _ran(machine: CallPhases, name: str, module: torch.nn.Module, args: Any) -> None:
    """A forward pre-hook: ``name`` is about to run."""
    machine.component_ran(name)
