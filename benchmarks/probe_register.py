"""Can a weights file's own pages be pinned in place? ``cudaHostRegister`` on a file mapping, step by step, timed.

Each variant runs in a fresh process with a time limit and prints each step as it finishes, so that a stall shows
where it is. For a file (the transformer's safetensors file of the Flux-shaped weights, or one written here):
map it (``private``: ``torch.UntypedStorage.from_file(shared=False)``, as safetensors maps weights, ``MAP_PRIVATE``
read-write; ``shared``: Python's ``mmap`` with ``ACCESS_READ``, ``MAP_SHARED`` read-only, as DDO maps them), register
the mapping with ``cudaHostRegister`` (``readonly``: flag ``cudaHostRegisterReadOnly``; ``default``: none), read
``is_pinned``, the RSS split before and after (a copy-on-write would show as ``RssAnon``), and time copies to the
GPU from it against a pageable and a ``pin_memory()`` copy of the same bytes; then unregister.

    python3 benchmarks/probe_register.py --file PATH [--mib 1024] [--timeout-s 90]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

READ_ONLY = 8  # cudaHostRegisterReadOnly
VARIANTS = ("private/readonly", "shared/readonly", "private/default")


def status() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "RssShmem"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def child(path: str, nbytes: int, variant: str) -> None:
    started = time.perf_counter()

    def step(name: str, **fields: Any) -> None:
        print(json.dumps({"step": name, "t": round(time.perf_counter() - started, 3), **fields}), flush=True)

    import mmap

    import torch

    torch.zeros(1, device="cuda")  # the CUDA context, first
    props = {}
    try:
        from cuda.bindings import runtime

        for attr in ("cudaDevAttrHostRegisterSupported", "cudaDevAttrHostRegisterReadOnlySupported"):
            err, value = runtime.cudaDeviceGetAttribute(getattr(runtime.cudaDeviceAttr, attr), 0)
            props[attr] = int(value) if int(err) == 0 else f"error {int(err)}"
    except Exception as e:  # cuda-bindings missing or another version
        props["error"] = repr(e)[:200]
    step("context", **props)
    mapping, flags = variant.split("/")
    if mapping == "private":
        storage = torch.UntypedStorage.from_file(path, shared=False, nbytes=nbytes)
        view = torch.empty(0, dtype=torch.uint8).set_(storage)
    else:
        with open(path, "rb") as file:
            held = mmap.mmap(file.fileno(), nbytes, access=mmap.ACCESS_READ)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a read-only buffer: torch warns that it is not writable
            view = torch.frombuffer(held, dtype=torch.uint8)
    step("mapped", ptr=view.data_ptr(), **status())
    checksum = int(view[:: 1 << 20].sum())  # touches one byte a MiB: the pages come in
    step("touched", **status())
    cudart = torch.cuda.cudart()
    code = cudart.cudaHostRegister(view.data_ptr(), nbytes, READ_ONLY if flags == "readonly" else 0)
    step("registered", code=int(code), is_pinned=bool(view.is_pinned()), **status())
    if int(code) != 0:
        return
    target = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    sources = {"registered": view, "pageable": view.clone()}
    sources["pin_memory"] = sources["pageable"].pin_memory()
    seconds: dict[str, list[float]] = {name: [] for name in sources}
    for _ in range(3):
        for name, source in sources.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            target.copy_(source, non_blocking=True)
            torch.cuda.synchronize()
            seconds[name].append(time.perf_counter() - start)
    equal = bool(torch.equal(target.cpu(), sources["pageable"]))
    gbps = {name: round(nbytes / min(s) / 1e9, 2) for name, s in seconds.items()}
    step("copied", gb_per_s=gbps, equal=equal, checksum=checksum)
    del sources
    code = cudart.cudaHostUnregister(view.data_ptr())
    step("unregistered", code=int(code), **status())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", required=True)
    p.add_argument("--mib", type=int, default=1024, help="bytes mapped from the file's start (at most its size)")
    p.add_argument("--timeout-s", type=float, default=90)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    nbytes = min(args.mib << 20, Path(args.file).stat().st_size) // 4096 * 4096
    if args.child:
        child(args.file, nbytes, args.child)
        return 0
    for variant in VARIANTS:
        print(f"--- {variant}: {nbytes:,} bytes of {args.file}", flush=True)
        command = [sys.executable, __file__, "--file", args.file, "--mib", str(args.mib), "--child", variant]
        try:
            subprocess.run(command, timeout=args.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            print(f"    stalled: no end within {args.timeout_s:g} s (the last step printed is where it got to)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
