"""Probe: after ``attachment.drop()``, is a text encoder under group offloading with streams freed at once?

Builds the tiny Flux pipeline (``--loaded``: saved and loaded back with ``from_pretrained``; ``--bench
SIZE``: the latency benchmark's own pipeline, loading and prompt encoding), offloads it as the latency
benchmark does (``use_stream=True``, text encoders at leaf level), attaches, encodes a prompt, drops the
encoders with the garbage collector disabled, and prints whether each is still alive and, if so, what
refers to it (types, three levels up) and what a collection then finds unreachable, by type.

Run on the GPU machine: ``python3 benchmarks/probe_drop.py [--lcmu] [--loaded | --bench tiny|full]``.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import tempfile
import types
import weakref
from pathlib import Path

import pinned_workload as pw
import torch
from diffusers import FluxPipeline

from ddo_hooks import attach
from ddo_hooks.testing.tiny_pipelines import build_pipeline, embed_prompt


def referrers(obj: object, depth: int = 3, indent: str = "    ") -> None:
    if depth == 0:
        return
    for ref in gc.get_referrers(obj):
        if (isinstance(ref, list) and len(ref) > 50) or type(ref).__name__ == "frame":
            continue
        print(f"{indent}{type(ref).__module__}.{type(ref).__qualname__}: {str(ref)[:100]!r}")
        referrers(ref, depth - 1, indent + "    ")


def unreachable() -> int:
    """Collect with DEBUG_SAVEALL: count what was unreachable by type, and name its functions and methods."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    found = gc.collect()
    gc.set_debug(0)
    kinds = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    print("  unreachable by type:", ", ".join(f"{k} x{n}" for k, n in kinds.most_common(25)))
    callables = collections.Counter()
    for o in gc.garbage:
        if isinstance(o, types.FunctionType | types.MethodType | functools.partial):
            target = getattr(o, "__func__", getattr(o, "func", o))
            where = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', target)}"
            callables[f"{type(o).__name__} {where}"] += 1
    for name, n in callables.most_common(30):
        print(f"    {name} x{n}")
    gc.garbage.clear()
    return found


def build(args: argparse.Namespace, device: torch.device) -> FluxPipeline:
    if args.bench:
        weights = Path(tempfile.gettempdir()) / f"ddo-bench-weights-{args.bench}-0"
        pw.setup(weights, args.bench, 0)
        mode = "group_lcmu_true" if args.lcmu else "group_lcmu_false"
        pipe, _, _ = pw._load({"weights_dir": str(weights), "mode": mode}, device)
        return pipe
    pipe = build_pipeline("flux", dtype=torch.bfloat16)
    if args.loaded:
        folder = tempfile.mkdtemp()
        pipe.save_pretrained(folder)
        pipe = FluxPipeline.from_pretrained(folder, dtype=torch.bfloat16)
    pw._offload(pipe, "group_lcmu_true" if args.lcmu else "group_lcmu_false", device, "leaf")
    return pipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lcmu", action="store_true", help="low_cpu_mem_usage=True")
    parser.add_argument("--loaded", action="store_true", help="save the pipeline and load it back first")
    parser.add_argument("--bench", choices=("tiny", "full"), help="the latency benchmark's pipeline of this size")
    args = parser.parse_args()
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    pipe = build(args, device)
    attachment = attach(pipe)
    if args.bench:
        cfg = pw.SIZES[args.bench]["call"]
        with torch.no_grad():
            pipe.encode_prompt(pw.PROMPT, None, device, max_sequence_length=cfg["max_sequence_length"])
        pw.live_pinned([pipe.text_encoder, pipe.text_encoder_2])
    else:
        embed_prompt(pipe, "flux")
    refs = {name: weakref.ref(getattr(pipe, name)) for name in ("text_encoder", "text_encoder_2")}
    gc.disable()  # no collection since the encoding: what it left behind is still there, as in the benchmark
    attachment.drop("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2")
    for name, ref in refs.items():
        alive = ref()
        print(f"{name}: {'ALIVE after drop' if alive is not None else 'freed at once'}")
        if alive is not None:
            referrers(alive, depth=2)
            del alive
    gc.enable()
    found = unreachable()
    print(f"a full collection then found {found} objects; alive: {[n for n, r in refs.items() if r() is not None]}")
    attachment.detach()


if __name__ == "__main__":
    main()
