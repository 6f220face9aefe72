"""The host's time in the ring runtime's hooks, per unit: what the CPU adds to a step it issues.

On the H100 the CPU issues a resident transformer forward of the Flux-shaped pipeline in about the time
the GPU runs it (``probe_overlap-h100.json``: 47.9 ms against 48.0 ms), so every microsecond the hooks
spend per unit lands on the step. This runs the hooks' host work for a Flux-shaped step (24 units of
9 block weights, as the timeline of ``probe_ring_timeline-h100.json`` streams them) through a
:class:`~ddo_hooks.streaming.ring.Ring` whose transport issues nothing (no copy, no event: only the
ring's own bookkeeping, its views and the weights' ``.data`` swaps the runtime's hooks make), on any
machine, and prints the median over ``--reps`` steps of the time per unit.

    python3 benchmarks/probe_ring_host.py [--reps 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from ddo_hooks.streaming.ring import Ring


class Silent:
    """A transport that issues nothing: what is left is the ring's host time."""

    device = torch.device("cpu")
    copy_stream = None

    def compute_stream(self) -> Any:
        return None

    def new_event(self) -> Any:
        return object()

    def record(self, event: Any, stream: Any) -> None: ...

    def wait(self, stream: Any, event: Any) -> None: ...

    def copy(self, targets: list[torch.Tensor], sources: list[torch.Tensor], stream: Any, *, load: int) -> None: ...

    def fill(self, target: torch.Tensor, stream: Any) -> None: ...

    def reading(self, stream: Any, load: int, ranges: Any, *, done: bool) -> None: ...

    def allocate(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)

    def pinned(self, tensor: torch.Tensor) -> bool:
        return True

    def drain(self) -> None: ...


def per_unit_us(reps: int, units: int = 24, weights: int = 9) -> float:
    """Median over ``reps`` steps of the hooks' host time per unit, in microseconds."""
    sources = [[torch.empty(1024, 1024, dtype=torch.bfloat16) for _ in range(weights)] for _ in range(units)]
    ring = Ring(Silent(), 6 * weights * 2 * 1024 * 1024, lookahead=2)
    placed = [ring.add(f"block{i}", s) for i, s in enumerate(sources)]
    params = [[torch.nn.Parameter(s.clone()) for s in unit] for unit in sources]

    def step() -> float:
        start = time.perf_counter()
        for unit, tensors in zip(placed, params, strict=True):
            for tensor, view in zip(tensors, ring.begin(unit), strict=True):
                tensor.data = view
            for tensor, source in zip(tensors, unit.sources, strict=True):
                tensor.data = source
            ring.end(unit)
        return (time.perf_counter() - start) / units * 1e6

    for _ in range(3):
        step()
    return statistics.median(step() for _ in range(reps))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    print(f"the ring's hooks: {per_unit_us(args.reps):.1f} us of host time per unit (median of {args.reps} steps)")


if __name__ == "__main__":
    main()
