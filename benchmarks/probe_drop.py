"""Probe: after ``attachment.drop()``, is a text encoder under group offloading with streams freed at once?

Builds the tiny Flux pipeline (``--loaded``: saved and loaded back with ``from_pretrained``), offloads
it as the latency benchmark does (``use_stream=True``, text encoders at leaf level), attaches, encodes a
prompt, drops the encoders with the garbage collector disabled, and prints whether each is still
alive and, if so, what refers to it (types, three levels up).

Run on the GPU machine: ``python3 benchmarks/probe_drop.py [--lcmu] [--loaded]``.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import weakref

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lcmu", action="store_true", help="low_cpu_mem_usage=True")
    parser.add_argument("--loaded", action="store_true", help="save the pipeline and load it back first")
    args = parser.parse_args()
    pipe = build_pipeline("flux", dtype=torch.bfloat16)
    if args.loaded:
        folder = tempfile.mkdtemp()
        pipe.save_pretrained(folder)
        pipe = FluxPipeline.from_pretrained(folder, dtype=torch.bfloat16)
    pw._offload(pipe, "group_lcmu_true" if args.lcmu else "group_lcmu_false", torch.device("cuda:0"), "leaf")
    attachment = attach(pipe)
    embed_prompt(pipe, "flux")
    refs = {name: weakref.ref(getattr(pipe, name)) for name in ("text_encoder", "text_encoder_2")}
    gc.collect()
    gc.disable()
    attachment.drop("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2")
    for name, ref in refs.items():
        alive = ref()
        print(f"{name}: {'ALIVE after drop' if alive is not None else 'freed at once'}")
        if alive is not None:
            referrers(alive)
            del alive
    gc.enable()
    found = gc.collect()
    print(f"a full collection then found {found} objects; alive: {[n for n, r in refs.items() if r() is not None]}")
    attachment.detach()


if __name__ == "__main__":
    main()
