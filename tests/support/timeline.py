"""A timeline of pipeline calls as the pipeline runs them: component forwards, VAE decodes and encodes, boundaries.

The test records it on its own, apart from the signals ddo_hooks follows:

* every module component of the pipeline and of the pipelines it holds gets a recording hook
  (``start`` and ``end`` of its ``forward``), and so does every direct child of a VAE (any
  component with ``decode``): ``decode`` is not ``forward``, its first child module is where
  the decode's work starts (``movq.post_quant_conv``, ``vae.decoder``...);
* ``decode`` and ``encode`` of each VAE are wrapped on the instance (``decode``, ``encode``);
* the action :data:`ACTION`, named in the policy after the release, notes each boundary that ran.

The recording hooks are registered before :func:`ddo_hooks.attach` (and before any offloading),
so they sit beneath every other hook of the module: a ``start`` is where the module's own code
starts, after ddo_hooks', group offloading's and accelerate's hooks ran. A boundary between two
events ran between them; one between a ``start`` and its ``end`` would have run inside that forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from diffusers.hooks import ModelHook

from ddo_hooks import register_action, unregister_action
from ddo_hooks.hooks.mechanics import InstalledHook, install_hook
from ddo_hooks.hooks.signals import sub_pipelines

ACTION = "timeline"
"""The action that notes a boundary in the running timeline (register it with :func:`recording`)."""
HOOK = "tests.timeline"
_RUNNING: list[Timeline] = []


@dataclass(frozen=True)
class Event:
    """One thing that happened: ``start``/``end`` of a forward, ``decode``/``encode`` (entered), ``boundary``."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class _Recorder(ModelHook):
    def __init__(self, timeline: Timeline, name: str) -> None:
        super().__init__()
        self.timeline, self.name = timeline, name

    def pre_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict]:
        self.timeline.events.append(Event("start", self.name))
        return args, kwargs

    def post_forward(self, module: torch.nn.Module, output: Any) -> Any:
        self.timeline.events.append(Event("end", self.name))
        return output


@dataclass
class Timeline:
    """The events of a pipeline's calls, recorded until :meth:`remove`."""

    events: list[Event] = field(default_factory=list)
    _hooks: list[InstalledHook] = field(default_factory=list)
    _wrapped: list[tuple[torch.nn.Module, str]] = field(default_factory=list)

    @classmethod
    def install(cls, pipe: Any) -> Timeline:
        """Record ``pipe``'s calls (and those of the pipelines it holds); this timeline notes the boundaries."""
        timeline = cls()
        seen: set[int] = set()
        for each in [pipe, *sub_pipelines(pipe)]:
            for name, component in each.components.items():
                if not isinstance(component, torch.nn.Module) or id(component) in seen:
                    continue
                seen.add(id(component))
                timeline._hook(component, name)
                if callable(getattr(component, "decode", None)):
                    for child_name, child in component.named_children():
                        timeline._hook(child, f"{name}.{child_name}")
                    for method in ("decode", "encode"):
                        timeline._wrap(component, name, method)
        _RUNNING.append(timeline)
        return timeline

    def _hook(self, module: torch.nn.Module, name: str) -> None:
        self._hooks.append(install_hook(module, _Recorder(self, name), HOOK))

    def _wrap(self, module: torch.nn.Module, name: str, method: str) -> None:
        original = getattr(module, method, None)
        if not callable(original):
            return

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.events.append(Event(method, name))
            return original(*args, **kwargs)

        object.__setattr__(module, method, wrapper)
        self._wrapped.append((module, method))

    def remove(self) -> None:
        """Stop recording; leave every module as it was."""
        for module, method in self._wrapped:
            object.__delattr__(module, method)
        for hook in reversed(self._hooks):
            hook.remove()
        self._wrapped.clear()
        self._hooks.clear()
        if self in _RUNNING:
            _RUNNING.remove(self)

    def calls(self) -> list[list[Event]]:
        """The events cut into calls: each ends with its ``after_call`` boundary."""
        found, current = [], []
        for event in self.events:
            current.append(event)
            if event == Event("boundary", "after_call"):
                found.append(current)
                current = []
        assert not current, f"events after the last after_call: {current}"
        return found


def _note(ctx: Any) -> Any:
    for timeline in _RUNNING:
        timeline.events.append(Event("boundary", ctx.boundary))
    return ctx.action_report("executed", detail="noted in the timeline")


def register() -> None:
    """Register :data:`ACTION` (once per test session is enough; registering again replaces it)."""
    register_action(ACTION, replace=True)(_note)


def unregister() -> None:
    """Remove :data:`ACTION`."""
    unregister_action(ACTION)


def check_outside_forwards(events: list[Event]) -> None:
    """Assert that no boundary ran between the ``start`` and the ``end`` of any forward."""
    text = "\n".join(f"  {i:3} {e}" for i, e in enumerate(events))
    running: list[str] = []
    for i, event in enumerate(events):
        if event.kind == "start":
            running.append(event.name)
        elif event.kind == "end":
            assert running[-1:] == [event.name], f"unbalanced forward at {i}:\n{text}"
            running.pop()
        elif event.kind == "boundary":
            assert not running, f"{event.name} ran inside the forward of {running}:\n{text}"


def check_call(events: list[Event], *, final: set[str], helpers: frozenset[str] = frozenset(), missed=()) -> None:
    """Assert where each boundary ran in one call's events, from the components' work alone.

    Args:
        events: One call's events.
        final: The denoisers of the call's final stage (``unet``; ``transformer``, ``transformer_2``).
        helpers: What runs inside the loop beside them (``controlnet``; ``encode vae`` for a VAE
            that encodes controls at each chunk): neither an encoder nor a denoiser.
        missed: The boundaries this call reports as not reached (they must not be in the events).

    The rules (issue 20): ``before_transformer`` once, after the last encoder or prior forward
    (anything but a final denoiser, a helper or the VAE's decode) that precedes the final
    stage's denoising, and before that stage's first denoiser forward; ``before_vae`` once,
    after the last denoiser forward and before the final decode's first module; ``after_call``
    once, last; no boundary inside any forward.
    """
    text = "\n".join(f"  {i:3} {e}" for i, e in enumerate(events))
    ran = [e.name for e in events if e.kind == "boundary"]
    expected = [b for b in ("before_transformer", "before_vae", "after_call") if b not in missed]
    assert ran == expected, f"boundaries {ran}, expected {expected}:\n{text}"
    where = {e.name: i for i, e in enumerate(events) if e.kind == "boundary"}
    check_outside_forwards(events)

    denoiser_starts = [i for i, e in enumerate(events) if e.kind == "start" and e.name in final]
    assert denoiser_starts, f"no forward of {sorted(final)}:\n{text}"
    last_start = denoiser_starts[-1]
    if "before_transformer" in where:
        encoders = [
            i
            for i, e in enumerate(events[:last_start])
            if (e.kind == "start" and "." not in e.name and e.name not in final | helpers)
            or (e.kind == "encode" and f"encode {e.name}" not in helpers)
        ]
        after = encoders[-1] if encoders else -1
        first = next(i for i in denoiser_starts if i > after)
        at = where["before_transformer"]
        assert after < at < first, (
            f"before_transformer at {at}: expected after the last encoder or prior forward ({after}) and before "
            f"the final stage's first denoiser forward ({first}):\n{text}"
        )
    if "before_vae" in where:
        last_end = next(i for i in range(len(events) - 1, -1, -1) if events[i] == Event("end", events[last_start].name))
        decodes = [i for i, e in enumerate(events) if e.kind == "decode"]
        assert decodes, f"before_vae ran, but nothing decoded:\n{text}"
        vae = events[decodes[-1]].name
        work = next(i for i in range(decodes[-1], len(events)) if events[i].kind == "start")
        assert events[work].name.startswith(f"{vae}."), f"the final decode's first work is {events[work]}:\n{text}"
        at = where["before_vae"]
        assert last_end < at < work, (
            f"before_vae at {at}: expected after the last denoiser forward ({last_end}) and before the final "
            f"decode's first module ({work}):\n{text}"
        )
    assert where["after_call"] == len(events) - 1
