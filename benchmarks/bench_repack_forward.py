"""The denoiser's steady-state forward, repacked against not, in one process (interleaved, medians and spreads).

Two copies of the Flux-shaped transformer (``pinned_workload.py``'s config; uninitialised bf16 weights: the
values do not matter), each offloaded at leaf level with streams and ``low_cpu_mem_usage=False``; one has its
pinned copies repacked. Their forwards at 1024² (4096 image and 512 text tokens) alternate ``--reps`` times
(ABBA), each timed with a device synchronize; so do three smaller measurements of what a forward does besides
computing: copying every pinned copy to the GPU on a side stream (CUDA events), ``is_pinned()`` over the copies
(diffusers asks it of every copy at every onload), and one onload and offload of every group.

GPU machine: ``python3 benchmarks/bench_repack_forward.py --out $OUT`` (about a minute).
CPU, to try the flow: ``python benchmarks/bench_repack_forward.py --size tiny --out /tmp/forward``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pinned_workload as workload


def build(size: str, device: torch.device) -> torch.nn.Module:
    from diffusers import FluxTransformer2DModel
    from diffusers.hooks import apply_group_offloading

    cfg = workload.SIZES[size]
    with torch.device("meta"):
        model = FluxTransformer2DModel(patch_size=1, in_channels=64, guidance_embeds=True, **cfg["transformer"],
                                       **cfg["joint"])  # fmt: skip
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for tensor in model.parameters():
            tensor.normal_(0, 0.02)  # finite values, so the forward computes as usual
    apply_group_offloading(model, onload_device=device, offload_device=torch.device("cpu"), offload_type="leaf_level",
                           use_stream=device.type == "cuda", low_cpu_mem_usage=False)  # fmt: skip
    return model


def inputs(size: str, device: torch.device) -> dict[str, Any]:
    cfg = workload.SIZES[size]
    image, text = (4096, 512) if size == "full" else (16, 8)
    joint, pooled = cfg["joint"]["joint_attention_dim"], cfg["joint"]["pooled_projection_dim"]
    bf16 = {"device": device, "dtype": torch.bfloat16}
    return {
        "hidden_states": torch.randn(1, image, 64, **bf16),
        "encoder_hidden_states": torch.randn(1, text, joint, **bf16),
        "pooled_projections": torch.randn(1, pooled, **bf16),
        "timestep": torch.tensor([0.5], **bf16),
        "guidance": torch.tensor([3.5], **bf16),
        "img_ids": torch.zeros(image, 3, **bf16),
        "txt_ids": torch.zeros(text, 3, **bf16),
        "return_dict": False,
    }


def copies_of(model: torch.nn.Module) -> list[torch.Tensor]:
    from ddo_hooks._compat import diffusers as diffusers_compat

    return [t for g in diffusers_compat.offload_groups(model) for t in diffusers_compat.group_cpu_sources(g).values()]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, function: Any) -> float:
    synchronize(device)
    started = time.perf_counter()
    function()
    synchronize(device)
    return time.perf_counter() - started


def to_gpu(device: torch.device, tensors: list[torch.Tensor]) -> None:
    targets = [torch.empty_like(t, device=device) for t in tensors]
    for target, source in zip(targets, tensors, strict=True):
        target.copy_(source, non_blocking=True)


def cycle(model: torch.nn.Module) -> None:
    from ddo_hooks._compat import diffusers as diffusers_compat

    for group in diffusers_compat.offload_groups(model):
        group.onload_()
        group.offload_()


def markdown_row(doc: dict[str, Any], what: str) -> str:
    """The docs' row of one measurement: milliseconds, median (range), for both, and the ratio of medians."""
    measure = doc["measures"][what]
    cells = [f"{statistics.median(v) * 1e3:.1f} ({min(v) * 1e3:.1f}\u2013{max(v) * 1e3:.1f})"
             for v in measure["seconds"].values()]  # fmt: skip
    return f"| {what} | {cells[0]} | {cells[1]} | {measure['ratio_of_medians']:.3f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    from ddo_hooks import repack_pinned_copies

    models = {"plain": build(args.size, device), "repacked": build(args.size, device)}
    report = repack_pinned_copies(models["repacked"]).repack
    kwargs = inputs(args.size, device)
    measures = {
        "forward": lambda m: timed(device, lambda: m(**kwargs)),
        "copies to the GPU": lambda m: timed(device, lambda: to_gpu(device, copies_of(m))),
        "is_pinned over the copies": lambda m: timed(device, lambda: [t.is_pinned() for t in copies_of(m)]),
        "onload and offload every group": lambda m: timed(device, lambda: cycle(m)),
    }
    with torch.no_grad():
        for model in models.values():
            model(**kwargs)  # warm-up: the first forward also removes diffusers' lazy-prefetch hooks
        seconds: dict[str, dict[str, list[float]]] = {what: {name: [] for name in models} for what in measures}
        for rep in range(args.reps):
            order = list(models) if rep % 2 == 0 else list(reversed(models))
            for what, measure in measures.items():
                for name in order:
                    seconds[what][name].append(measure(models[name]))
    print(f"repack: {report.status}, {report.detail}")
    print(f"\n{'in seconds, median (min-max) of ' + str(args.reps):40} {'plain':>24} {'repacked':>24} {'ratio':>7}")
    rows = {}
    for what, by_name in seconds.items():
        ratio = statistics.median(by_name["repacked"]) / statistics.median(by_name["plain"])
        cells = [f"{statistics.median(v):.4f} ({min(v):.4f}-{max(v):.4f})" for v in by_name.values()]
        print(f"{what:40} {cells[0]:>24} {cells[1]:>24} {ratio:7.3f}")
        rows[what] = {"seconds": by_name, "ratio_of_medians": ratio}
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"device": str(device), "torch": torch.__version__, "reps": args.reps, "measures": rows,
           "repack": report.model_dump(mode="json")}  # fmt: skip
    (args.out / "bench_repack_forward.json").write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
