"""A model of the ring's schedule: the step time and how busy the link is, from four numbers per block.

Discrete events, in the order the runtime issues them. The CPU issues each block in turn (``issue_s`` each); when
block ``i`` begins, the copies of the blocks up to ``i + lookahead`` are issued (as the ring does, each at most once,
and only into ring space whose last reader has finished: the ring holds ``slots`` blocks). The copy stream runs the
copies one after the other at ``link_gbps``; the compute stream runs block ``i`` once the CPU issued it, its copy
finished and block ``i - 1`` finished, for ``compute_s``. Blocks wrap round into the next step, as the ring's do.
It leaves out what the GPU does beside the blocks (embeddings, the scheduler): fit ``overhead_s`` for that.

    python3 benchmarks/ring_model.py --bytes-mb 113,113,...  --compute-ms 1.9,... --link-gbps 53 --issue-ms 0.25

``--from-timeline timeline.json`` takes each block's bytes and compute time from ``probe_ring_timeline.py``'s output
(and ``--probe probe_overlap.json`` the link rate and the CPU's issue time), so that the model's step can be set
beside the measured one.

Examples:
    >>> step, busy = simulate([100e6] * 4, [2e-3] * 4, link_gbps=50, issue_s=1e-4, lookahead=2, slots=3)
    >>> round(step * 1e3, 2), round(busy, 2)  # 4 copies of 2 ms each, under 4 blocks of 2 ms: copy-bound, just
    (8.0, 1.0)
    >>> step, busy = simulate([50e6] * 4, [2e-3] * 4, link_gbps=50, issue_s=1e-4, lookahead=2, slots=3)
    >>> round(step * 1e3, 2), round(busy, 2)  # copies of 1 ms hide under 2 ms blocks: compute-bound
    (8.0, 0.5)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def simulate(
    nbytes: list[float],
    compute_s: list[float],
    *,
    link_gbps: float,
    issue_s: float,
    lookahead: int,
    slots: int,
    steps: int = 6,
) -> tuple[float, float]:
    """The steady step time (seconds) and the link's busy fraction over it, after ``steps`` steps."""
    blocks = len(nbytes)
    total = blocks * steps
    copy_end = [0.0] * total
    compute_end = [0.0] * total
    issued = [False] * total
    link_free = cpu = 0.0
    busy = 0.0
    for i in range(total):
        cpu += issue_s  # the CPU reaches block i's hooks
        for j in range(i, min(total, i + lookahead + 1)):  # copies issued when block i begins
            if issued[j]:
                continue
            reader = j - slots  # the block whose ring space this copy takes: it must have finished
            if reader >= 0 and reader >= i:
                break  # not finished being issued yet: copied later, as the ring stops copying ahead
            start = max(link_free, cpu, compute_end[reader] if reader >= 0 else 0.0)
            seconds = nbytes[j % blocks] / (link_gbps * 1e9)
            link_free = copy_end[j] = start + seconds
            issued[j] = True
            if j >= total - blocks:
                busy += seconds
        previous = compute_end[i - 1] if i else 0.0
        compute_end[i] = max(previous, copy_end[i], cpu) + compute_s[i % blocks]
    step = compute_end[-1] - compute_end[-blocks - 1]
    return step, min(1.0, busy / step)


def measured_inputs(timeline: Path, probe: Path | None = None) -> dict[str, Any]:
    """The model's inputs from a run: each block's bytes and compute from ``probe_ring_timeline.py``'s JSON (its
    first step), and, from ``probe_overlap.py``'s, the link rate beside the compute and the CPU's issue time of a
    resident forward shared among the blocks; ``measured``: the timeline's own step (ms) and link busy fraction."""
    found = json.loads(timeline.read_text())
    half = len(found["compute"]) // 2
    sizes = {e["unit"]: e["bytes"] for e in found["copies"]}
    inputs: dict[str, Any] = {
        "nbytes": [sizes.get(e["unit"], 0) for e in found["compute"][:half]],
        "compute_s": [(e["ms"][1] - e["ms"][0]) / 1e3 for e in found["compute"][:half]],
        "measured": (found["step_ms"], found["link_busy"]),
    }
    if probe is not None:
        overlap = json.loads(probe.read_text())
        inputs["link_gbps"] = overlap["copies"]["beside_gbps"]
        inputs["issue_s"] = overlap["forward"]["issue_s"] / max(1, len(inputs["nbytes"]))
    return inputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from-timeline", type=Path, help="probe_ring_timeline.py's JSON: bytes and compute per block")
    p.add_argument("--probe", type=Path, help="probe_overlap.py's JSON: the link rate and the CPU's issue time")
    p.add_argument("--bytes-mb", help="each block's streamed MB, comma-separated")
    p.add_argument("--compute-ms", help="each block's compute ms, comma-separated (or one for all)")
    p.add_argument("--link-gbps", type=float, default=53.0)
    p.add_argument("--issue-ms", type=float, default=0.2)
    p.add_argument("--lookahead", type=int, default=2)
    p.add_argument("--slots", type=int, default=3, help="blocks the ring holds")
    args = p.parse_args()
    inputs: dict[str, Any] = {"link_gbps": args.link_gbps, "issue_s": args.issue_ms / 1e3, "measured": None}
    if args.from_timeline:
        inputs.update(measured_inputs(args.from_timeline, args.probe))
    else:
        inputs["nbytes"] = [float(x) * 1e6 for x in args.bytes_mb.split(",")]
        compute = [float(x) / 1e3 for x in args.compute_ms.split(",")]
        inputs["compute_s"] = compute * len(inputs["nbytes"]) if len(compute) == 1 else compute
    nbytes, compute, link, issue = (inputs[k] for k in ("nbytes", "compute_s", "link_gbps", "issue_s"))
    step, busy = simulate(nbytes, compute, link_gbps=link, issue_s=issue, lookahead=args.lookahead, slots=args.slots)
    measured = inputs["measured"]
    print(f"model: {step * 1e3:.1f} ms a step, link busy {busy:.0%} ({len(nbytes)} blocks, "
          f"{sum(nbytes) / 1e9:.2f} GB a step at {link:.1f} GB/s, compute {sum(compute) * 1e3:.1f} ms, "
          f"issue {issue * 1e3:.2f} ms a block)"
          + (f"; measured {measured[0]:.1f} ms, link busy {measured[1]:.0%}" if measured else ""))  # fmt: skip


if __name__ == "__main__":
    main()
