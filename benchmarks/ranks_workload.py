"""The per-rank worker of ``bench_ranks.py`` (no ``bench_`` prefix: not run on its own).

Started by ``python -m torch.distributed.run --standalone --nproc_per_node=N ranks_workload.py --spec JSON
--progress PREFIX``: each rank takes its own GPU (``torch.cuda.set_device(LOCAL_RANK)``, then ``cuda:LOCAL_RANK``
is the current device that the offloading and the policy's ``device: cuda`` name; on a machine without CUDA, the
CPU), joins a gloo process group (no NCCL context on a peer's GPU), loads the saved pipeline and sets up the arm
as ``box_workload.build`` does, then makes ``calls`` plain calls, every rank starting each call together (a
barrier before it, outside the call's time). It appends one JSON line to ``PREFIX-rankR.jsonl`` at each step
(``start``, ``ready``, each ``call``, ``end``), flushed at once, with what the rank held then: RSS and its split,
its cgroup's charge, and on the GPU the allocator's bytes and whether the rank made a context on another GPU.
A setup that raises is recorded (``error``, stage ``setup``) and ends the rank (torchrun then ends its peers).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import box_workload as box
import floor_workload as floor
import pinned_workload as workload
import torch
import torch.distributed as dist


def contexts() -> list[bool] | None:
    """Whether each GPU has this process's primary context (a rank should have one on its own GPU only)."""
    if not torch.cuda.is_available():
        return None
    return [bool(torch._C._cuda_hasPrimaryContext(i)) for i in range(torch.cuda.device_count())]


def run(spec: dict[str, Any], prefix: str) -> None:
    rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
    device = f"cuda:{rank}" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    folder = box.own_cgroup()
    with Path(f"{prefix}-rank{rank}.jsonl").open("a", encoding="utf-8") as out:

        def emit(event: str, **fields: Any) -> None:
            out.write(json.dumps({"event": event, "t": time.perf_counter() - started, **fields}) + "\n")
            out.flush()
            os.fsync(out.fileno())

        emit("start", pid=os.getpid(), rank=rank, world_size=world, device=device,
             cgroup=str(folder) if folder else None, threads=torch.get_num_threads())  # fmt: skip
        dist.init_process_group("gloo")
        workload._quiet()
        try:
            pipe, attachment = box.build(spec)
        except Exception as e:
            emit("error", stage="setup", error=f"{type(e).__name__}: {e}"[:600])
            raise SystemExit(1) from e
        emit("ready", memory=floor.memory(), cgroup=box.cgroup_memory(folder))
        for index in range(spec["calls"]):
            dist.barrier()  # the ranks call at once, as a fleet serving together does
            seconds, digest = floor.timed_call(pipe, floor.call_kwargs(spec, index))
            at_rest = {"memory": floor.memory(), "cgroup": box.cgroup_memory(folder), "gpu": box.gpu_memory()}
            emit("call", index=index, seconds=seconds, digest=digest, **at_rest)
        if attachment is not None:
            released = [r.release for r in attachment.reports if r.route == "pytorch_host_cache_release"]
            devices = list(dict.fromkeys(r.device for r in released))  # each rank's own: cuda:LOCAL_RANK
            emit("reports", devices=devices, statuses=[r.status for r in released])
            attachment.detach()
        emit("end", cgroup=box.cgroup_memory(folder), contexts=contexts())
        dist.barrier()
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="the settings, as JSON (bench_box.arm_spec's)")
    parser.add_argument("--progress", required=True, help="PREFIX: each rank appends to PREFIX-rankR.jsonl")
    args = parser.parse_args()
    run(json.loads(args.spec), args.progress)


if __name__ == "__main__":
    main()
