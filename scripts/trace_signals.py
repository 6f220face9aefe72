"""Trace, in call order, what a pipeline call shows to ddo_hooks' boundary signals, and what fires.

For each pipeline (the tiny families ``flux``, ``sd``, ``wan`` and every structural pipeline of
:mod:`ddo_hooks.testing.structural`) the script builds it, wraps on the INSTANCES (never the
classes):

* ``check_inputs``, ``progress_bar`` (enter, ``update()``, exit; iteration start, each step, end)
  and ``maybe_free_model_hooks`` of the pipeline and of every sub-pipeline;
* the ``forward`` of every model component (denoisers, text encoders, vocoders...), each module
  once, named by every ``pipeline.attribute`` path that reaches it;
* ``decode`` and ``encode`` of every component that has them (VAEs, MoVQ, VQ models), and the
  forward of their ``post_quant_conv`` and ``decoder`` submodules (what today's decode signal hooks);
* each sub-pipeline's ``__call__`` (entry and exit): the attribute holding it (``prior_pipe``...)
  is replaced by a thin proxy for the trace;
* a raw ``tqdm`` the pipeline's module calls instead of ``self.progress_bar`` (the module's
  global is swapped for the trace: this one is not an instance signal, it is marked ``module``);

then installs today's signals (:class:`~ddo_hooks.hooks.signals.PipelineSignals`) on the
top-level pipeline with a phase machine that logs every signal it receives (``[signal]``) and
every boundary it fires (``>>> BOUNDARY``). One line per event. After the events, a verdict per
boundary compares where it fired with where it belongs:

* ``before_transformer``: once, before the first denoiser forward, with no model work between;
* ``before_vae``: once, after the last denoiser forward and before (or at the very start of) the
  first decode after it;
* ``after_call``: once, after the last decode, before the top-level call returns.

Markers: ``[D]`` a denoiser today's signals hook (a top-level ``transformer``, ``transformer_2``,
``unet`` or ``prior``), ``[V]`` a VAE whose decode submodules they hook (top-level ``vae``,
``movq``, ``vqvae``).

Usage::

    HF_HUB_OFFLINE=1 python scripts/trace_signals.py                 # all, to stdout
    HF_HUB_OFFLINE=1 python scripts/trace_signals.py sd kandinsky3   # some
    HF_HUB_OFFLINE=1 python scripts/trace_signals.py --out scripts/trace_signals_output.txt
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

from ddo_hooks.boundaries import AFTER_CALL, BEFORE_TRANSFORMER, BEFORE_VAE
from ddo_hooks.hooks.phases import CallPhases
from ddo_hooks.hooks.signals import DECODE_SUBMODULES, DENOISER_PATTERN, PipelineSignals, _decodes
from ddo_hooks.testing import FAMILIES

# Components whose forward is a denoising step, for the verdict (today's list plus the combined
# Kandinsky pipelines' prior, registered on the combined pipeline as `prior_prior`).
DENOISER_NAMES = re.compile(r"^(transformer(_\d+)?|unet|prior|prior_prior)$")
BOUNDARIES = (BEFORE_TRANSFORMER, BEFORE_VAE, AFTER_CALL)


@dataclass
class Event:
    """One line of the trace."""

    kind: str  # call, sub_call, check_inputs, bar, tqdm, free, forward, decode, encode, signal, boundary
    text: str
    depth: int
    role: str = ""  # forward events: "denoiser" or ""; decode events: "enter"/"exit"; boundary: its name


@dataclass
class Tracer:
    """The event log of one traced call."""

    events: list[Event] = field(default_factory=list)
    depth: int = 0
    active: bool = False

    def log(self, kind: str, text: str, role: str = "") -> None:
        if self.active:
            self.events.append(Event(kind, text, self.depth, role))

    @contextlib.contextmanager
    def nested(self) -> Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1


class TraceBar:
    """A progress bar (or raw tqdm) that logs enter, update, exit and each iteration step."""

    def __init__(self, bar: Any, tracer: Tracer, label: str, kind: str = "bar") -> None:
        self._bar = bar
        self._tracer = tracer
        self._label = label
        self._kind = kind
        self._updates = 0

    def __enter__(self) -> TraceBar:
        self._tracer.log(self._kind, f"{self._label}: enter (with)")
        self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        self._tracer.log(self._kind, f"{self._label}: exit (with){' on an exception' if exc[0] else ''}")
        return self._bar.__exit__(*exc)

    def update(self, *args: Any, **kwargs: Any) -> Any:
        self._updates += 1
        self._tracer.log(self._kind, f"{self._label}: update() #{self._updates}")
        return self._bar.update(*args, **kwargs)

    def __iter__(self) -> Iterator[Any]:
        self._tracer.log(self._kind, f"{self._label}: iteration start")
        finished = False
        try:
            for i, item in enumerate(self._bar):
                self._tracer.log(self._kind, f"{self._label}: step {i} start")
                yield item
                self._tracer.log(self._kind, f"{self._label}: step {i} end")
            finished = True
        finally:
            self._tracer.log(self._kind, f"{self._label}: iteration {'end' if finished else 'left early'}")

    def __len__(self) -> int:
        return len(self._bar)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bar, name)


class SubPipelineProxy:
    """Stands in for a sub-pipeline attribute (``prior_pipe``...) and logs its ``__call__``."""

    def __init__(self, pipe: Any, label: str, tracer: Tracer) -> None:
        object.__setattr__(self, "_pipe", pipe)
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_tracer", tracer)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tracer = self._tracer
        tracer.log("sub_call", f"{self._label}.__call__ ({type(self._pipe).__name__}) enter")
        with tracer.nested():
            result = self._pipe(*args, **kwargs)
        tracer.log("sub_call", f"{self._label}.__call__ exit")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._pipe, name, value)


class LoggingPhases(CallPhases):
    """Today's phase machine, logging each signal it receives."""

    def __init__(self, owner: str, tracer: Tracer) -> None:
        self.tracer = tracer

        def fire(boundary: str, call: Any) -> None:
            tracer.log("boundary", f">>> BOUNDARY {boundary} fires", role=boundary)

        def miss(boundary: str, call: Any, detail: str) -> None:
            tracer.log("signal", f"[missed] {boundary}: {detail}")

        super().__init__(owner, fire, miss)

    def _signal(self, name: str, detail: str = "") -> None:
        self.tracer.log("signal", f"[signal] {name}{detail} (phase {self.phase.value})")

    def call_start(self) -> Any:
        self._signal("call_start")
        return super().call_start()

    def loop_enter(self, **kwargs: Any) -> Any:
        stage = kwargs.get("stage")
        self._signal("loop_enter", f" ({stage.value} stage)" if stage is not None else " (no stage)")
        return super().loop_enter(**kwargs)

    def loop_steps_done(self, token: object) -> None:
        self._signal("loop_steps_done")
        super().loop_steps_done(token)

    def loop_exit(self, call: Any = None) -> None:
        self._signal("loop_exit")
        super().loop_exit(call)

    def denoiser_forward(self, *, earlier: bool = False) -> None:
        self._signal("denoiser_forward", " (earlier stage)" if earlier else "")
        super().denoiser_forward(earlier=earlier)

    def component_ran(self, name: str) -> None:
        self._signal("component_ran", f" {name}")
        super().component_ran(name)

    def decode_start(self) -> None:
        self._signal("decode_start")
        super().decode_start()

    def call_end(self, call: Any, error: BaseException | None = None) -> None:
        self._signal("call_end", " error" if error is not None else "")
        super().call_end(call, error)


# -- installing the trace -----------------------------------------------------------------------


def _pipelines(pipe: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """``(path, pipeline)`` of the pipeline and every sub-pipeline it holds, depth first."""
    from diffusers import DiffusionPipeline

    yield path, pipe
    found = {name: value for name, value in vars(pipe).items() if isinstance(value, DiffusionPipeline)}
    for name, value in getattr(pipe, "components", {}).items():
        if isinstance(value, DiffusionPipeline):
            found.setdefault(name, value)
    for name, value in found.items():
        yield from _pipelines(value, f"{path}{name}.")


def _wrap(owner: Any, name: str, make: Callable[[Any], Any]) -> Callable[[], None]:
    """Replace ``owner.name`` on the instance; return the undo."""
    had = name in vars(owner)
    previous = vars(owner).get(name)
    original = getattr(owner, name)
    object.__setattr__(owner, name, functools.wraps(original)(make(original)))

    def undo() -> None:
        if had:
            object.__setattr__(owner, name, previous)
        else:
            object.__delattr__(owner, name)

    return undo


def install_trace(pipe: Any, tracer: Tracer) -> Callable[[], None]:
    """Install the trace on ``pipe`` and its sub-pipelines; return the undo."""
    undo: list[Callable[[], None]] = []
    tree = list(_pipelines(pipe))

    # Every module component, once, under all its names.
    names: dict[int, list[str]] = {}
    modules: dict[int, torch.nn.Module] = {}
    for path, sub in tree:
        for name, component in sub.components.items():
            if isinstance(component, torch.nn.Module):
                names.setdefault(id(component), []).append(f"{path}{name}")
                modules[id(component)] = component
    top = pipe.components
    top_modules = {n: m for n, m in top.items() if isinstance(m, torch.nn.Module)}
    hooked_denoisers = {id(m) for n, m in top_modules.items() if DENOISER_PATTERN.match(n)}
    hooked_vaes = {id(m) for m in top_modules.values() if _decodes(m)}
    for key, module in modules.items():
        label = "=".join(sorted(names[key], key=lambda n: (n.count("."), n)))
        denoiser = any(DENOISER_NAMES.match(n.rsplit(".", 1)[-1]) for n in names[key])
        tag = " [D]" if key in hooked_denoisers else " [V]" if key in hooked_vaes else ""
        if callable(getattr(module, "decode", None)):
            for method in ("decode", "encode"):
                if callable(getattr(module, method, None)):
                    undo.append(_wrap(module, method, _logged_method(tracer, f"{label}{tag}.{method}", method)))
            for sub_name in DECODE_SUBMODULES:  # what today's decode signal hooks, on top-level VAEs only
                submodule = getattr(module, sub_name, None)
                if isinstance(submodule, torch.nn.Module):
                    handle = submodule.register_forward_pre_hook(
                        lambda _m, _a, text=f"{label}{tag}.{sub_name}.forward": tracer.log("submodule", text)
                    )
                    undo.append(handle.remove)
        else:
            handle = module.register_forward_pre_hook(
                lambda _m, _a, text=f"{label}{tag}.forward", role="denoiser" if denoiser else "": tracer.log(
                    "forward", text, role
                )
            )
            undo.append(handle.remove)

    for path, sub in tree:
        label = path or "pipe."
        if callable(getattr(sub, "check_inputs", None)):
            undo.append(_wrap(sub, "check_inputs", _logged_call(tracer, "check_inputs", f"{label}check_inputs()")))
        undo.append(
            _wrap(sub, "maybe_free_model_hooks", _logged_call(tracer, "free", f"{label}maybe_free_model_hooks()"))
        )
        undo.append(_wrap(sub, "progress_bar", _traced_bar(tracer, f"{label}progress_bar")))
        undo.extend(_trace_raw_tqdm(type(sub), tracer, label))

    # Sub-pipeline calls: replace the attribute by a proxy (deepest first, so paths stay valid).
    for path, sub in reversed(tree[1:]):
        parent_path, name = path[:-1].rpartition(".")[0], path[:-1].rpartition(".")[2]
        parent = dict(tree)[f"{parent_path}." if parent_path else ""]
        if name in vars(parent):
            proxy = SubPipelineProxy(sub, path[:-1], tracer)
            object.__setattr__(parent, name, proxy)
            undo.append(functools.partial(object.__setattr__, parent, name, sub))

    def remove() -> None:
        for step in reversed(undo):
            step()

    return remove


def _logged_call(tracer: Tracer, kind: str, text: str) -> Callable[[Any], Any]:
    def make(original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tracer.log(kind, text)
            return original(*args, **kwargs)

        return wrapper

    return make


def _logged_method(tracer: Tracer, text: str, kind: str) -> Callable[[Any], Any]:
    def make(original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tracer.log(kind, f"{text} enter", "enter")
            with tracer.nested():
                result = original(*args, **kwargs)
            tracer.log(kind, f"{text} exit", "exit")
            return result

        return wrapper

    return make


def _traced_bar(tracer: Tracer, label: str) -> Callable[[Any], Any]:
    def make(original: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return TraceBar(original(*args, **kwargs), tracer, f"{label}(...)")

        return wrapper

    return make


def _trace_raw_tqdm(pipeline_cls: type, tracer: Tracer, label: str) -> list[Callable[[], None]]:
    """Swap the ``tqdm`` global of the pipeline's module (only for the trace) for a logging one."""
    module = sys.modules[pipeline_cls.__module__]
    raw = vars(module).get("tqdm")
    if raw is None or getattr(raw, "_ddo_traced", False):
        return []

    def traced(*args: Any, **kwargs: Any) -> TraceBar:
        where = f"{module.__name__.rsplit('.', 1)[-1]}.tqdm"
        desc = f" {kwargs['desc']!r}" if kwargs.get("desc") else ""
        return TraceBar(raw(*args, **kwargs), tracer, f"{label.removeprefix('pipe.')}<raw {where}{desc}>", "tqdm")

    traced._ddo_traced = True  # type: ignore[attr-defined]
    module.tqdm = traced  # type: ignore[attr-defined]

    def undo() -> None:
        module.tqdm = raw  # type: ignore[attr-defined]

    return [undo]


# -- running and judging -------------------------------------------------------------------------


def build(name: str) -> tuple[Any, dict[str, Any]]:
    """The pipeline ``name`` (a tiny family or a structural pipeline) and its call kwargs."""
    if name in FAMILIES:
        from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

        return build_pipeline(name), call_kwargs(name)
    from ddo_hooks.testing.structural import build_structural, structural_call_kwargs

    return build_structural(name), structural_call_kwargs(name)


def trace(name: str) -> tuple[Any, list[Event]]:
    """Build ``name``, trace one call, and return the pipeline and the events."""
    pipe, kwargs = build(name)
    tracer = Tracer()
    remove_trace = install_trace(pipe, tracer)
    machine = LoggingPhases(type(pipe).__name__, tracer)
    signals = PipelineSignals(pipe, machine)
    signals.install()  # on top of the trace wrappers: a signal is logged before the event it wraps
    try:
        tracer.active = True
        tracer.log("call", f"{type(pipe).__name__}.__call__ enter")
        with tracer.nested():
            pipe(**kwargs)
        tracer.log("call", f"{type(pipe).__name__}.__call__ exit")
    finally:
        tracer.active = False
        signals.remove()
        remove_trace()
    return pipe, tracer.events


def _top_decodes(events: list[Event]) -> list[int]:
    """Indices of decode entries not nested in another decode."""
    found, open_decodes = [], 0
    for i, e in enumerate(events):
        if e.kind == "decode" and e.role == "enter":
            if open_decodes == 0:
                found.append(i)
            open_decodes += 1
        elif e.kind == "decode" and e.role == "exit":
            open_decodes -= 1
    return found


def _decode_exit(events: list[Event], enter: int) -> int:
    depth = 0
    for j in range(enter, len(events)):
        if events[j].kind == "decode":
            depth += 1 if events[j].role == "enter" else -1
            if depth == 0:
                return j
    return len(events)


def verdict(events: list[Event]) -> list[str]:
    """Where each boundary fired against where it belongs (see the module docstring)."""
    denoiser = [i for i, e in enumerate(events) if e.kind == "forward" and e.role == "denoiser"]
    decodes = _top_decodes(events)
    fired = {b: [i for i, e in enumerate(events) if e.kind == "boundary" and e.role == b] for b in BOUNDARIES}

    def model_work(lo: int, hi: int) -> list[str]:
        work = [
            e
            for e in events[lo + 1 : hi]
            if e.kind == "forward" or (e.kind in ("decode", "encode") and e.role == "enter")
        ]
        return sorted(
            {
                re.sub(r"( \[[DV]\])?\.(forward|decode|encode)( enter)?$", "", e.text)
                + ("" if e.kind == "forward" else f".{e.kind}")
                for e in work
            }
        )

    def where(i: int) -> str:
        before = next(
            (events[j].text for j in range(i - 1, -1, -1) if events[j].kind not in ("boundary", "signal")), "-"
        )
        return f"event {i + 1} (after: {before})"

    def times(boundary: str) -> list[str]:
        hits = fired[boundary]
        return [f"fired {len(hits)} times, at " + "; ".join(where(i) for i in hits)] if len(hits) > 1 else []

    lines = []
    # before_transformer: once, before the first denoiser forward, no model work between.
    bt = fired[BEFORE_TRANSFORMER]
    notes = times(BEFORE_TRANSFORMER)
    if not denoiser:
        notes.append("no denoiser forward in the trace")
    elif not bt:
        notes.append("MISSING: never fired")
    elif bt[0] > denoiser[0] and all(e.kind == "signal" for e in events[denoiser[0] + 1 : bt[0]]):
        notes.append(
            f"ok only through the denoiser hook, at {where(bt[0])}: inside the first forward, after any "
            "offload hook above it has loaded the weights"
        )
    elif bt[0] > denoiser[0]:
        ran = sum(i < bt[0] for i in denoiser)
        notes.append(f"LATE: first fired at {where(bt[0])}, after {ran} denoiser forward(s)")
    elif between := model_work(bt[0], denoiser[0]):
        notes.append(f"EARLY: first fired at {where(bt[0])}; still before it: {', '.join(between)}")
    lines.append(f"{BEFORE_TRANSFORMER}: " + ("; ".join(notes) if notes else f"ok, at {where(bt[0])}"))

    # before_vae: once, after the last denoiser forward, before (or at the start of) the first decode after it.
    bv = fired[BEFORE_VAE]
    notes = times(BEFORE_VAE)
    targets = [i for i in decodes if denoiser and i > denoiser[-1]]
    if not targets:
        notes.append("no decode after the last denoiser forward in the trace")
    elif not bv:
        notes.append("MISSING: never fired")
    else:
        target = targets[0]
        if bv[0] < denoiser[-1]:
            left = sum(i > bv[0] for i in denoiser)
            notes.append(f"EARLY: first fired at {where(bv[0])}, {left} denoiser forward(s) still to run")
        at_decode = [i for i in bv if target < i < _decode_exit(events, target) and not model_work(target, i)]
        right = [i for i in bv if denoiser[-1] < i < target and not model_work(i, target)]
        if at_decode and not right:
            notes.append(f"ok only through the decode hook, at {where(at_decode[0])}: inside the decode call")
        elif not right:
            notes.append(f"LATE or misplaced: the decode after the loop ({events[target].text}) is event {target + 1}")
    lines.append(f"{BEFORE_VAE}: " + ("; ".join(notes) if notes else f"ok, at {where(bv[-1])}"))

    # after_call: once, after the last model work, before the top-level call returns.
    ac = fired[AFTER_CALL]
    notes = times(AFTER_CALL)
    last_work = max((i for i, e in enumerate(events) if e.kind in ("forward", "decode", "encode")), default=-1)
    if not ac:
        notes.append("MISSING: never fired")
    elif ac[0] < last_work:
        notes.append(
            f"EARLY: first fired at {where(ac[0])}; still to run: {', '.join(model_work(ac[0], last_work + 1))}"
        )
    lines.append(f"{AFTER_CALL}: " + ("; ".join(notes) if notes else f"ok, at {where(ac[-1])}"))
    return lines


def render(name: str, pipe: Any, events: list[Event]) -> str:
    """The trace of one pipeline: a header, one numbered line per event, the verdicts."""
    lines = [f"== {name}: {type(pipe).__name__} ({len(events)} events) =="]
    width = len(str(len(events)))
    for i, e in enumerate(events, 1):
        lines.append(f"{i:>{width}} {'  ' * e.depth}{e.text}")
    lines.extend(f"   verdict {line}" for line in verdict(events))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from ddo_hooks.testing.structural import STRUCTURAL

    everything = [*FAMILIES, *STRUCTURAL]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"pipelines to trace (default: all of {everything})")
    parser.add_argument("--out", type=Path, help="also write the trace to this file")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(everything))
    if unknown:
        parser.error(f"unknown {unknown}; choose from {everything}")
    warnings.simplefilter("ignore")
    logging.getLogger("diffusers").setLevel(logging.ERROR)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    blocks = []
    for name in args.names or everything:
        with contextlib.redirect_stderr(io.StringIO()):
            pipe, events = trace(name)
        block = render(name, pipe, events)
        print(block + "\n", flush=True)
        blocks.append(block)
    if args.out:
        import diffusers
        import transformers

        versions = (
            f"diffusers {diffusers.__version__}, transformers {transformers.__version__}, torch {torch.__version__}"
        )
        header = (
            "# scripts/trace_signals.py: what today's ddo_hooks signals see, in call order (see its docstring).\n"
            "# [D] a denoiser today's signals hook, [V] a VAE whose decode submodules they hook; [signal] what\n"
            f"# the phase machine received, >>> BOUNDARY what it fired. {versions}.\n"
        )
        args.out.write_text(header + "\n" + "\n\n".join(blocks) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
