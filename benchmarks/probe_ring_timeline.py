"""Two denoising steps of the ring runtime, drawn: each block's copy on the copy stream, its compute beside it.

The Flux-shaped pipeline (``pinned_workload.py setup --size full``) with ``attach(pipe, "streamed-box")``: a first
call (the order traced, the residency budget chosen), then a second one with a CUDA event (with timing) recorded
on the copy stream around each block's copies and on the compute stream where each block's compute begins and ends.
From two steps in the middle of that call: each block's copy and compute intervals, how busy the link was (the union
of the copy intervals over the span) and how busy the compute was, written as JSON and drawn as a PNG.

    python3 benchmarks/probe_ring_timeline.py --dir /tmp/ddo-floor-weights/flux-full --out timeline.json \
        --png timeline.png [--nores]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def union(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``intervals``."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def record_timeline(ring: Any) -> tuple[list[dict[str, Any]], Any]:
    """Wrap ``ring`` so that each copy and compute of a unit records timing events; return the log and the base."""
    import torch

    log: list[dict[str, Any]] = []
    base = torch.cuda.Event(enable_timing=True)
    base.record()
    load, begin, end = ring._load, ring.begin, ring.end

    def timed_load(unit: Any, protect: Any) -> bool:
        start = torch.cuda.Event(enable_timing=True)
        start.record(ring.transport.copy_stream)
        done = load(unit, protect)
        if done:
            stop = torch.cuda.Event(enable_timing=True)
            stop.record(ring.transport.copy_stream)
            log.append({"kind": "copy", "unit": unit.key, "bytes": unit.nbytes, "events": (start, stop)})
        return done

    def timed_begin(unit: Any) -> Any:
        views = begin(unit)
        start = torch.cuda.Event(enable_timing=True)
        start.record()  # after the compute stream's wait for the unit's copy: where its compute can begin
        log.append({"kind": "compute", "unit": unit.key, "events": [start, None]})
        return views

    def timed_end(unit: Any) -> None:
        stop = torch.cuda.Event(enable_timing=True)
        stop.record()
        open_ = next(entry for entry in reversed(log) if entry["kind"] == "compute" and entry["unit"] == unit.key)
        open_["events"][1] = stop
        end(unit)

    ring._load, ring.begin, ring.end = timed_load, timed_begin, timed_end
    return log, base


def two_steps(log: list[dict[str, Any]], base: Any, first: str) -> dict[str, Any]:
    """The two transformer forwards in the middle of the call, from the events (synchronized first)."""
    import torch

    torch.cuda.synchronize()
    for entry in log:
        entry["ms"] = [base.elapsed_time(event) for event in entry["events"]]
    starts = [i for i, e in enumerate(log) if e["kind"] == "compute" and e["unit"] == first]
    middle = len(starts) // 2
    lo, hi = starts[middle - 1], starts[middle + 1] if middle + 1 < len(starts) else len(log)
    window = [e for e in log[lo:hi] if e["kind"] == "compute"]
    t0, t1 = window[0]["ms"][0], window[-1]["ms"][1]
    copies = [e for e in log if e["kind"] == "copy" and e["ms"][1] > t0 and e["ms"][0] < t1]
    clip = [(max(e["ms"][0], t0), min(e["ms"][1], t1)) for e in copies]
    return {
        "span_ms": t1 - t0, "step_ms": (t1 - t0) / 2,
        "link_busy": union(clip) / (t1 - t0), "compute_busy": union([tuple(e["ms"]) for e in window]) / (t1 - t0),
        "compute": [{"unit": e["unit"], "ms": [e["ms"][0] - t0, e["ms"][1] - t0]} for e in window],
        "copies": [{"unit": e["unit"], "bytes": e["bytes"], "ms": [e["ms"][0] - t0, e["ms"][1] - t0]} for e in copies],
    }  # fmt: skip


def draw(found: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 2.6))
    for row, key, colour in ((1, "copies", "tab:orange"), (0, "compute", "tab:blue")):
        spans = [(e["ms"][0], e["ms"][1] - e["ms"][0]) for e in found[key]]
        ax.broken_barh(spans, (row - 0.35, 0.7), facecolors=colour, edgecolors="white", linewidth=0.4)
    ax.set_yticks([0, 1], ["compute stream\n(each block)", "copy stream\n(its weights)"])
    ax.set_xlabel("ms from the start of the first of two denoising steps")
    ax.set_xlim(0, found["span_ms"])
    ax.set_title(f"{title}: link busy {found['link_busy']:.0%}, compute busy {found['compute_busy']:.0%}, "
                 f"{found['step_ms']:.1f} ms a step", fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, required=True, help="the Flux-shaped weights (drawn there if missing)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--png", type=Path, default=None)
    p.add_argument("--nores", action="store_true", help="no block weight kept on the GPU (resident_bytes: 0)")
    args = p.parse_args()

    import pinned_workload as workload
    import torch
    from diffusers import FluxPipeline

    from ddo_hooks import HookPolicy, attach

    workload._quiet()
    workload.setup(args.dir, "full", 0)
    pipe = FluxPipeline.from_pretrained(args.dir, dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    policy = HookPolicy.preset("streamed-box").model_dump(mode="json")
    if args.nores:
        policy["offload"]["resident_bytes"] = 0
    attachment = attach(pipe, HookPolicy.from_mapping(policy))
    kwargs = {"prompt": "a photo of a cat", "num_inference_steps": 20, "height": 1024, "width": 1024}
    pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(0))  # traced; the residency chosen
    ring = attachment._ring.ring
    log, base = record_timeline(ring)
    pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(1))
    first = next(unit.key for unit in ring.units if unit.key.startswith("transformer."))
    found = two_steps(log, base, first)
    found.update(report=attachment.ring_report.model_dump(mode="json"), nores=args.nores,
                 resident_weights=attachment._ring.resident_weights, gpu=torch.cuda.get_device_name())  # fmt: skip
    attachment.detach()
    args.out.write_text(json.dumps(found, indent=1))
    if args.png is not None:
        draw(found, args.png, f"streamed-box{' (resident_bytes 0)' if args.nores else ''} on the {found['gpu']}")
    print(f"two steps: {found['step_ms']:.1f} ms a step; link busy {found['link_busy']:.0%}, compute busy "
          f"{found['compute_busy']:.0%}; {len(found['copies'])} copies, {len(found['compute'])} blocks")  # fmt: skip


if __name__ == "__main__":
    main()
