"""Onload a denoiser group by group from its registered file pages, against from pinned copies: transfers only, timed.

The register presets' calls were 1.09-1.12 times those of ``nothing`` with ``low_cpu_mem_usage=False`` in every
interleaved run of 2026-12-03's last session, with or without each action they add, and with the text encoders
registered too (``docs/benchmarks-box-timings.md``). What is left is how the transformer reaches the GPU at every
step: from the page cache's own pages, registered in place (``pinned_copies.from_files: register``), instead of
from copies that group offloading pinned with ``low_cpu_mem_usage=False``. This probe times that path alone, with
no compute:
the same transformer, loaded twice from its files and offloaded at leaf level with streams as ``bench_box`` does,

* ``copies``: ``low_cpu_mem_usage=False`` (each weight copied into a pinned block rounded up to a power of two);
* ``registered``: ``low_cpu_mem_usage=True``, then :func:`ddo_hooks.release.from_files.pin_from_files`;

then, rep by rep, one arm after the other, onloads every group in order (diffusers' own ``onload_``, which checks
``is_pinned()`` for each tensor and copies it on the group's stream), waits for the transfers, and offloads it
again (as ``record_stream=False`` does, without the compute). Each pass moves the whole transformer once, as one
denoising step does; a call makes 20. Prints each arm's median pass (min-max), its GB/s, the ratio, the
``is_pinned()`` checks of a pass alone (diffusers asks it of every source at every onload), and whether every
weight reached the GPU with the same bytes from both.

    python3 benchmarks/probe_onload.py --folder /tmp/ddo-floor-weights/flux-full/transformer [--reps 9] [--out DIR]

Without a CUDA device it says so and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ddo_hooks._compat import diffusers as diffusers_compat


def load(folder: Path, lcmu: bool, device: torch.device, dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """The transformer from ``folder`` in its files' ``dtype``, offloaded at leaf level with streams where there is
    CUDA."""
    from diffusers import AutoModel
    from diffusers.hooks import apply_group_offloading

    module = AutoModel.from_pretrained(str(folder), torch_dtype=dtype)
    stream = device.type == "cuda"
    apply_group_offloading(module, onload_device=device, offload_type="leaf_level", use_stream=stream,
                           record_stream=False, low_cpu_mem_usage=lcmu)  # fmt: skip
    return module


def _onloaded(groups: list[Any]) -> Iterator[Any]:
    """Each group onloaded through diffusers' own ``onload_`` (its transfers waited for), then offloaded again."""
    for group in groups:
        group.onload_()
        if group.stream is not None:
            group.stream.synchronize()
        yield group
        group.offload_()


def onload_pass(module: torch.nn.Module) -> float:
    """Onload every group of ``module`` in order, wait for its transfers, offload it: seconds for the whole pass."""
    groups = diffusers_compat.offload_groups(module)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in _onloaded(groups):
        pass
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - started


def pinned_checks(module: torch.nn.Module) -> float:
    """Seconds to ask ``is_pinned()`` of every CPU source of ``module``'s groups, as each group's onload does."""
    sources = [
        t for g in diffusers_compat.offload_groups(module) for t in diffusers_compat.group_cpu_sources(g).values()
    ]
    started = time.perf_counter()
    for tensor in sources:
        tensor.is_pinned()
    return time.perf_counter() - started


def onloaded(module: torch.nn.Module) -> list[torch.Tensor]:
    """Every weight of ``module`` as the groups put it on the device (checksummed there, then offloaded)."""
    return [
        t.detach().view(torch.int16).sum(dtype=torch.int64).cpu()
        for group in _onloaded(diffusers_compat.offload_groups(module))
        for submodule in group.modules
        for t in submodule.parameters()
    ]


def register(module: torch.nn.Module) -> list[Any]:
    """Register ``module``'s weights in place as ``pinned_copies.from_files: register`` does: [status, reason,
    detail] (status ``left`` where there is no CUDA host allocator)."""
    from ddo_hooks.release.from_files import pin_from_files

    report = pin_from_files(type("Pipeline", (), {"components": {"transformer": module}})(), "register")
    found = report.repack.components
    return [found[0].status, found[0].reason, found[0].detail] if found else ["left", report.repack.noop_reason, None]


def measure(copies: torch.nn.Module, registered: torch.nn.Module, reps: int) -> dict[str, Any]:
    """Both arms' passes, interleaved rep by rep, and whether they put the same bytes on the device."""
    arms = {"copies": copies, "registered": registered}
    for module in arms.values():  # warm-up: the device allocator's blocks, the streams
        onload_pass(module)
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    checks: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(reps):
        for name, module in arms.items():
            seconds[name].append(onload_pass(module))
            checks[name].append(pinned_checks(module))
    same = all(torch.equal(a, b) for a, b in zip(onloaded(copies), onloaded(registered), strict=True))
    return {
        "reps": reps, "bytes": sum(t.numel() * t.element_size() for t in copies.parameters()),
        "groups": len(diffusers_compat.offload_groups(copies)), "same_bytes": same, "seconds": seconds,
        "is_pinned_seconds": checks,
    }  # fmt: skip


def table(result: dict[str, Any]) -> list[str]:
    """The arms side by side: median pass (min-max, n), GB/s at the median, ratio to ``copies``, and the median
    seconds of a pass's ``is_pinned()`` checks alone."""
    base = statistics.median(result["seconds"]["copies"])
    lines = [f"{'arm':<12}{'pass s (min-max, n)':>28}{'GB/s':>8}{'x copies':>10}{'is_pinned s':>13}"]
    for name, seconds in result["seconds"].items():
        median, checks = statistics.median(seconds), statistics.median(result["is_pinned_seconds"][name])
        spread = f"{median:.4f} ({min(seconds):.4f}-{max(seconds):.4f}, {len(seconds)})"
        rate = result["bytes"] / median / 1e9
        lines.append(f"{name:<12}{spread:>28}{rate:>8.1f}{median / base:>10.3f}{checks:>13.5f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folder", type=Path, required=True, help="a transformer's folder (config and safetensors)")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--out", type=Path, help="where probe_onload.json goes")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_onload: no CUDA device here; nothing measured (run it on the GPU machine)", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    copies, registered = load(args.folder, False, device), load(args.folder, True, device)
    pinned = register(registered)
    if pinned[0] != "registered":
        print(f"probe_onload: the transformer was not registered ({pinned}); nothing compared", file=sys.stderr)
        return 1
    result = {"folder": str(args.folder), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "registered": pinned, **measure(copies, registered, args.reps)}  # fmt: skip
    print(*table(result), sep="\n")
    print(f"{result['groups']} groups, {result['bytes']:,} bytes a pass; registered: {result['registered'][0]}; "
          f"the same bytes on the device from both: {result['same_bytes']}")  # fmt: skip
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "probe_onload.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
