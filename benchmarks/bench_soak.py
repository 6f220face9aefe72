"""A long-running process: memory over many calls of one attached pipeline (CPU, tiny pipeline).

Runs ``--calls`` calls of a tiny pipeline with ddo_hooks attached (default policy: three
boundaries per call, ``keep_reports`` in memory), optionally with a report sink, and prints, after
call 100 and then every ``--every`` calls, the process RSS, the Python allocator's live blocks
(``sys.getallocatedblocks``, cheap enough to leave the calls at full speed) and the objects the
garbage collector tracks, and with ``--traced`` the Python heap traced by :mod:`tracemalloc`
(which makes each call about three times slower); then their growth from call 100 to the last.
Flat memory means no per-call growth beyond noise.

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


def measure() -> tuple[int, int, int, int | None]:
    """RSS bytes, live Python allocator blocks, tracked objects, and traced heap bytes (or ``None``)."""
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else None
    return psutil.Process().memory_info().rss, sys.getallocatedblocks(), len(gc.get_objects()), traced


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--family", choices=FAMILIES, default="sd")
    parser.add_argument("--sink", type=Path, default=None, help="a JSON Lines report sink (keep_reports: 0)")
    parser.add_argument("--every", type=int, default=1000, help="measure every N calls (default: 1000)")
    parser.add_argument("--traced", action="store_true", help="also trace the Python heap (tracemalloc; slower)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.calls <= CHECKPOINT:
        parser.error(f"--calls must be more than {CHECKPOINT}")
    settings = {"version": 1}
    if args.sink is not None:
        settings.update(report_sink=str(args.sink.resolve()), keep_reports=0)
    pipe = build_pipeline(args.family)
    kwargs = call_kwargs(args.family, steps=1)
    points: dict[int, tuple[int, int, int, int | None]] = {}
    if args.traced:
        tracemalloc.start()
    started = time.perf_counter()
    with attach(pipe, HookPolicy.from_mapping(settings)) as attachment:
        for call in range(1, args.calls + 1):
            kwargs["generator"].manual_seed(call)
            pipe(**kwargs)
            if call in (CHECKPOINT, args.calls) or call % args.every == 0:
                points[call] = measure()
                rss, blocks, objects, traced = points[call]
                line = f"call {call:>6}: RSS {rss / 2**20:8.1f} MiB, {blocks:>9,} blocks, {objects:>9,} objects"
                print(line + ("" if traced is None else f", traced {traced / 2**20:7.2f} MiB"), flush=True)
        kept = len(attachment.reports)
    elapsed = time.perf_counter() - started
    (rss_a, blocks_a, objects_a, traced_a), (rss_b, blocks_b, objects_b, traced_b) = (
        points[CHECKPOINT],
        points[args.calls],
    )
    calls_between = args.calls - CHECKPOINT
    print(f"{args.calls} calls of a tiny {args.family} pipeline in {elapsed:.0f} s; reports kept in memory: {kept}")
    print(
        f"RSS growth from call {CHECKPOINT} to {args.calls}: {(rss_b - rss_a) / 2**20:+.1f} MiB "
        f"({(rss_b - rss_a) / calls_between:+.0f} B/call)"
    )
    print(
        f"allocator blocks: {blocks_b - blocks_a:+,} ({(blocks_b - blocks_a) / calls_between:+.2f}/call); "
        f"tracked objects: {objects_b - objects_a:+,} ({(objects_b - objects_a) / calls_between:+.3f}/call)"
    )
    if traced_a is not None and traced_b is not None:
        growth = traced_b - traced_a
        print(f"traced heap growth: {growth / 2**20:+.2f} MiB ({growth / calls_between:+.1f} B/call)")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {
            "calls": args.calls,
            "family": args.family,
            "sink": args.sink is not None,
            "elapsed_s": elapsed,
            "reports_kept": kept,
            "rss_bytes": {str(k): v[0] for k, v in points.items()},
            "allocated_blocks": {str(k): v[1] for k, v in points.items()},
            "tracked_objects": {str(k): v[2] for k, v in points.items()},
            "traced_bytes": {str(k): v[3] for k, v in points.items()},
        }
        (args.out / "bench_soak.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
