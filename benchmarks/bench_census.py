"""What counting a component's resident file pages costs, entry by entry (before) and a chunk at a time (now).

``release_done_components`` (``lowest-peak``) and ``pinned_copies.from_files`` read ``/proc/self/pagemap`` to
count a component's resident file pages and to refuse one whose pages were written. The count ran entry by
entry in Python; on the H200 the whole give-back of the text encoders' 1.38 GiB took 0.17 s a call inside the
call (``docs/benchmarks-box-timings.md``, ``timing-3``). It now counts 65,536 entries at a time with torch.

This writes a safetensors file of ``--gib`` of random bf16 weights, loads it as views of the file (as
diffusers does with ``low_cpu_mem_usage=True``), and, ``--reps`` times, interleaved: reads every weight (its
pages resident again), then counts them entry by entry (the loop of before, kept here as the baseline), then
with ``file_pages._census``, then gives them back with ``give_back_file_pages`` (the census, ``madvise``
and the report). Prints each one's median and spread, and checks that both counts agree.

Run: ``python benchmarks/bench_census.py [--gib 1.38] [--reps 7] [--out DIR]`` (Linux: it reads pagemap).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ddo_hooks.release import file_pages

_PRESENT, _SWAPPED, _FILE = 1 << 63, 1 << 62, 1 << 61


def census_entry_by_entry(runs: list[tuple[int, int]]) -> tuple[int, int]:
    """The count as ddo_hooks made it before: each pagemap entry tested in Python."""
    resident = written = 0
    chunk = 1 << 16
    with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
        for start, end in runs:
            for page in range(start // file_pages.PAGE_SIZE, end // file_pages.PAGE_SIZE, chunk):
                count = min(chunk, end // file_pages.PAGE_SIZE - page)
                pagemap.seek(page * 8)
                entries = array("Q")
                entries.frombytes(pagemap.read(count * 8))
                for entry in entries:
                    if entry & _SWAPPED or (entry & _PRESENT and not entry & _FILE):
                        written += 1
                    elif entry & _PRESENT:
                        resident += 1
    return resident, written


def weights(folder: Path, gib: float) -> torch.nn.Module:
    """A module whose buffers are views of a safetensors file of ``gib`` GiB of random bf16 values."""
    path = folder / "weights.safetensors"
    rows = 4096
    per = rows * 8192 * 2  # one tensor: 64 MiB
    generator = torch.Generator().manual_seed(0)
    count = round(gib * 2**30 / per)
    save_file({f"w{i}": torch.randn(rows, 8192, generator=generator).bfloat16() for i in range(count)}, path)
    module = torch.nn.Module()
    for name, tensor in load_file(path).items():
        module.register_buffer(name, tensor)
    return module


def runs_of(module: torch.nn.Module) -> list[tuple[int, int]]:
    at = file_pages.mapping_at(file_pages.mappings())
    storages = file_pages._storages(module)
    return file_pages._page_runs([(a, a + n) for a, n in storages.items() if at(a, n)])


def touch(module: torch.nn.Module) -> None:
    for tensor in module.buffers():
        tensor.view(torch.int16).sum()  # reads every page: resident again


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def run(gib: float, reps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        module = weights(Path(folder), gib)
        runs = runs_of(module)
        found: dict[str, list[float]] = {"entry_by_entry": [], "chunked": [], "give_back": []}
        counts = []
        for _ in range(reps):
            touch(module)
            seconds, before = timed(lambda: census_entry_by_entry(runs))
            found["entry_by_entry"].append(seconds)
            seconds, now = timed(lambda: file_pages._census(runs))
            found["chunked"].append(seconds)
            counts.append((before, now))
            seconds, pages = timed(lambda: file_pages.give_back_file_pages("weights", module))
            found["give_back"].append(seconds)
            counts.append(((pages.released_bytes // file_pages.PAGE_SIZE, 0), now))
    return {
        "gib": gib,
        "bytes": sum(t.numel() * t.element_size() for t in module.buffers()),
        "reps": reps,
        "seconds": found,
        "counts": counts,
        "agree": all(a == b for a, b in counts),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "cpus": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.38, help="the weights file's size (the encoders' on the H200)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="write bench_census.json here")
    args = parser.parse_args(argv)
    result = run(args.gib, args.reps)
    print(f"{result['bytes'] / 2**30:.2f} GiB of file views, {args.reps} interleaved repetitions; seconds:")
    print(f"{'count':<16} {'median':>8} {'min':>8} {'max':>8}")
    for name, seconds in result["seconds"].items():
        print(f"{name:<16} {statistics.median(seconds):8.4f} {min(seconds):8.4f} {max(seconds):8.4f}")
    print(f"counts agree: {result['agree']} (resident, written): {result['counts'][0][0]}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_census.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if result["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
