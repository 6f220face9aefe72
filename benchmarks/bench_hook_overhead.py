"""What attaching ddo_hooks costs a denoising step.

Prints, side by side in one run:

* the per-step time of the same tiny pipeline with and without an attachment (interleaved
  repetitions, medians), and their ratio;
* the per-forward dispatch cost of the denoiser hook inside the loop (a flag check behind
  diffusers' HookRegistry wrapper), measured on a small module, against a bare forward.

Run: ``python benchmarks/bench_hook_overhead.py [--family flux] [--steps 8] [--repeats 7] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from ddo_hooks import attach
from ddo_hooks.hooks.mechanics import install_hook
from ddo_hooks.hooks.phases import CallPhases
from ddo_hooks.hooks.signals import DenoiserSignal
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.testing.tiny_pipelines import FAMILIES, build_pipeline, call_kwargs


def time_call(pipe, family: str, steps: int) -> float:
    start = time.perf_counter()
    pipe(**call_kwargs(family, steps=steps))
    return (time.perf_counter() - start) / steps


def step_times(family: str, steps: int, repeats: int) -> dict[str, float]:
    bare, attached = build_pipeline(family), build_pipeline(family)
    attachment = attach(attached, HookPolicy.default())
    for pipe in (bare, attached):  # warm-up
        time_call(pipe, family, steps)
    with_hooks, without = [], []
    for _ in range(repeats):
        without.append(time_call(bare, family, steps))
        with_hooks.append(time_call(attached, family, steps))
    attachment.detach()
    return {"step_s_without": statistics.median(without), "step_s_with": statistics.median(with_hooks)}


def dispatch_cost(iterations: int) -> dict[str, float]:
    module = torch.nn.Linear(8, 8)
    x = torch.randn(1, 8)
    machine = CallPhases("bench", lambda boundary, call: None, lambda boundary, call, detail: None)
    call = machine.call_start()
    machine.loop_enter()  # inside the loop: the hook's fast path

    def per_call() -> float:
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(iterations):
                module(x)
            return (time.perf_counter() - start) / iterations

    bare = min(per_call() for _ in range(5))
    installed = install_hook(module, DenoiserSignal(machine), "ddo_hooks.denoiser")
    hooked = min(per_call() for _ in range(5))
    installed.remove()
    machine.call_end(call)
    return {
        "forward_us_bare": bare * 1e6,
        "forward_us_hooked": hooked * 1e6,
        "dispatch_us": (hooked - bare) * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=FAMILIES, default="flux")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    steps = step_times(args.family, args.steps, args.repeats)
    dispatch = dispatch_cost(args.iterations)
    ratio = steps["step_s_with"] / steps["step_s_without"]
    print(f"hook overhead ({args.family}, {args.steps} steps x {args.repeats} interleaved repeats)")
    print(f"torch {torch.__version__}")
    print(f"{'':28}{'without':>12}{'with ddo_hooks':>16}{'ratio':>8}")
    without_ms, with_ms = steps["step_s_without"] * 1e3, steps["step_s_with"] * 1e3
    print(f"{'median step time (ms)':28}{without_ms:12.3f}{with_ms:16.3f}{ratio:8.3f}")
    print(
        f"{'forward of a Linear (us)':28}{dispatch['forward_us_bare']:12.2f}{dispatch['forward_us_hooked']:16.2f}"
        f"{dispatch['forward_us_hooked'] / dispatch['forward_us_bare']:8.3f}"
    )
    print(f"per-forward dispatch cost of the denoiser hook: {dispatch['dispatch_us']:.2f} us")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {
            "family": args.family,
            "steps": args.steps,
            "repeats": args.repeats,
            **steps,
            **dispatch,
            "step_ratio": ratio,
            "torch": torch.__version__,
        }
        (args.out / "bench_hook_overhead.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
