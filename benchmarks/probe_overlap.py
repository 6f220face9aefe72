"""What decides whether copies can hide under the compute (issue 49, item 5), measured before tuning the ring.

On the Flux-shaped pipeline (``pinned_workload.py setup --size full``), in one process:

1. **The CPU's issue time.** The transformer resident on the GPU (``pipe.to("cuda")``), fed the inputs of a real
   call at 1024x1024: the wall time of one forward without a synchronize (the CPU issuing its kernels) beside its
   CUDA-event time (the GPU running them), median of ``--reps``. If the CPU cannot issue a step faster than the link
   copies it, no ring hides the copies.
2. **The link.** The same pipeline loaded again on the host, its weights pinned in place from their files
   (``attach(pipe, "smallest-box")``: the files' registered pages): every block weight of at least 1 MiB copied
   to the GPU on a side stream, one copy per tensor as the ring issues them, timed by CUDA events: alone, and while
   the resident forward runs on the compute stream (both issued back to back, neither waiting on the host).

    python3 benchmarks/probe_overlap.py --dir /tmp/ddo-floor-weights/flux-full --out probe_overlap.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

GB = 1e9


def captured_inputs(pipe: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The transformer's inputs in a real 1024x1024 call (its first step), kept on the GPU."""
    import torch

    seen: dict[str, Any] = {}

    def keep(module: Any, args: Any, kwargs: Any) -> None:
        if not seen:
            seen["args"], seen["kwargs"] = args, kwargs

    handle = pipe.transformer.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        pipe(prompt="a photo of a cat", num_inference_steps=1, height=1024, width=1024,
             generator=torch.Generator("cpu").manual_seed(0))  # fmt: skip
    finally:
        handle.remove()
    return seen["args"], seen["kwargs"]


def issue_times(transformer: Any, args: Any, kwargs: Any, reps: int) -> dict[str, float]:
    """Median wall seconds to issue a forward (no synchronize) and CUDA-event seconds to run it."""
    import torch

    issued, ran = [], []
    with torch.no_grad():
        for _ in range(3):
            transformer(*args, **kwargs)
        torch.cuda.synchronize()
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            began = time.perf_counter()
            transformer(*args, **kwargs)
            issued.append(time.perf_counter() - began)
            end.record()
            torch.cuda.synchronize()
            ran.append(start.elapsed_time(end) / 1000)
    return {"issue_s": statistics.median(issued), "gpu_s": statistics.median(ran),
            "issue_max_s": max(issued), "gpu_max_s": max(ran)}  # fmt: skip


def copy_rates(sources: list[Any], transformer: Any, args: Any, kwargs: Any, reps: int) -> dict[str, float]:
    """Copies of ``sources`` on a side stream, alone and beside the resident forward: GB/s and seconds."""
    import torch

    total = sum(s.numel() * s.element_size() for s in sources)
    targets = [torch.empty_like(s, device="cuda") for s in sources]
    side = torch.cuda.Stream()
    alone, beside, forward_beside, issue = [], [], [], []
    with torch.no_grad():
        for _ in range(reps):
            for overlap in (False, True):
                events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
                torch.cuda.synchronize()
                began = time.perf_counter()
                with torch.cuda.stream(side):
                    events[0].record(side)
                    for target, source in zip(targets, sources, strict=True):
                        target.copy_(source, non_blocking=True)
                    events[1].record(side)
                issued = time.perf_counter() - began
                if overlap:
                    events[2].record()
                    transformer(*args, **kwargs)
                    events[3].record()
                torch.cuda.synchronize()
                copied = events[0].elapsed_time(events[1]) / 1000
                if overlap:
                    beside.append(copied)
                    forward_beside.append(events[2].elapsed_time(events[3]) / 1000)
                else:
                    alone.append(copied)
                    issue.append(issued)
    return {
        "bytes": total, "tensors": len(sources),
        "alone_s": statistics.median(alone), "alone_gbps": total / statistics.median(alone) / GB,
        "beside_s": statistics.median(beside), "beside_gbps": total / statistics.median(beside) / GB,
        "forward_beside_s": statistics.median(forward_beside), "copy_issue_s": statistics.median(issue),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, required=True, help="the Flux-shaped weights (drawn there if missing)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args()

    import pinned_workload as workload
    import torch
    from diffusers import FluxPipeline

    from ddo_hooks import attach
    from ddo_hooks.streaming.plan import find_units

    workload._quiet()
    manifest = workload.setup(args.dir, "full", 0)
    resident = FluxPipeline.from_pretrained(args.dir, dtype=torch.bfloat16).to("cuda")
    resident.set_progress_bar_config(disable=True)
    inputs, kwargs = captured_inputs(resident)
    found: dict[str, Any] = {"weights": manifest.get("models"), "gpu": torch.cuda.get_device_name()}
    found["forward"] = issue_times(resident.transformer, inputs, kwargs, args.reps)
    host = FluxPipeline.from_pretrained(args.dir, dtype=torch.bfloat16)
    attachment = attach(host, "smallest-box")  # the files' pages registered in place: the ring's sources
    units = find_units(host.transformer)
    sources = [t.data for unit in units for t in unit.streamed]
    found["pinned_sources"] = sum(bool(s.is_pinned()) for s in sources)
    found["units"] = len(units)
    found["copies"] = copy_rates(sources, resident.transformer, inputs, kwargs, max(3, args.reps // 2))
    attachment.detach()
    args.out.write_text(json.dumps(found, indent=1))
    f, c = found["forward"], found["copies"]
    print(f"{found['gpu']}: transformer forward, resident: CPU issues it in {f['issue_s'] * 1e3:.1f} ms, the GPU runs "
          f"it in {f['gpu_s'] * 1e3:.1f} ms (medians of {args.reps})")  # fmt: skip
    print(f"its {c['tensors']} block weights of >= 1 MiB ({c['bytes'] / GB:.2f} GB, {found['pinned_sources']} pinned, "
          f"{found['units']} units): {c['alone_gbps']:.1f} GB/s alone ({c['alone_s'] * 1e3:.1f} ms; issued in "
          f"{c['copy_issue_s'] * 1e3:.1f} ms), {c['beside_gbps']:.1f} GB/s beside the forward, which took "
          f"{c['forward_beside_s'] * 1e3:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
