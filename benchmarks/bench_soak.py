"""A long-running process: memory over many calls of one attached pipeline (CPU, tiny pipeline).

Runs ``--calls`` calls of a tiny pipeline with ddo_hooks attached (default policy: three
boundaries per call, ``keep_reports`` in memory), optionally with a report sink, and prints the
process RSS and the Python heap traced by :mod:`tracemalloc` after call 100 and after the last
call, with their growth. Flat memory means no per-call growth beyond noise.

Run: ``python benchmarks/bench_soak.py [--calls 10000] [--family sd] [--sink FILE] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path

import psutil

from ddo_hooks import HookPolicy, attach
from ddo_hooks.testing.tiny_pipelines import FAMILIES, build_pipeline, call_kwargs

CHECKPOINT = 100


def measure() -> tuple[int, int]:
    gc.collect()
    return psutil.Process().memory_info().rss, tracemalloc.get_traced_memory()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--family", choices=FAMILIES, default="sd")
    parser.add_argument("--sink", type=Path, default=None, help="a JSON Lines report sink (keep_reports: 0)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.calls <= CHECKPOINT:
        parser.error(f"--calls must be more than {CHECKPOINT}")
    settings = {"version": 1}
    if args.sink is not None:
        settings.update(report_sink=str(args.sink.resolve()), keep_reports=0)
    pipe = build_pipeline(args.family)
    kwargs = call_kwargs(args.family, steps=1)
    tracemalloc.start()
    points: dict[int, tuple[int, int]] = {}
    started = time.perf_counter()
    with attach(pipe, HookPolicy.from_mapping(settings)) as attachment:
        for call in range(1, args.calls + 1):
            kwargs["generator"].manual_seed(call)
            pipe(**kwargs)
            if call in (CHECKPOINT, args.calls):
                points[call] = measure()
                print(
                    f"call {call:>6}: RSS {points[call][0] / 2**20:8.1f} MiB, traced {points[call][1] / 2**20:7.2f} MiB"
                )
        kept = len(attachment.reports)
    elapsed = time.perf_counter() - started
    (rss_a, heap_a), (rss_b, heap_b) = points[CHECKPOINT], points[args.calls]
    calls_between = args.calls - CHECKPOINT
    print(f"{args.calls} calls of a tiny {args.family} pipeline in {elapsed:.0f} s; reports kept in memory: {kept}")
    print(
        f"RSS growth from call {CHECKPOINT} to {args.calls}: {(rss_b - rss_a) / 2**20:+.1f} MiB "
        f"({(rss_b - rss_a) / calls_between:+.0f} B/call)"
    )
    print(f"traced heap growth: {(heap_b - heap_a) / 2**20:+.2f} MiB ({(heap_b - heap_a) / calls_between:+.1f} B/call)")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {
            "calls": args.calls,
            "family": args.family,
            "sink": args.sink is not None,
            "elapsed_s": elapsed,
            "reports_kept": kept,
            "rss_bytes": {str(k): v[0] for k, v in points.items()},
            "traced_bytes": {str(k): v[1] for k, v in points.items()},
        }
        (args.out / "bench_soak.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
