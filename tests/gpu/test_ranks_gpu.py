"""One worker per GPU: two ranks under torchrun, each group-offloading a tiny pipeline on its own GPU.

Each rank attaches the policy with ``device: cuda`` (the rank's current device), makes two calls and
writes its reports to its own sink. Every boundary executes on the rank's own device, no rank creates
a context on the other GPU, every record carries its rank, and ``ddo-hooks summarize`` over both
files prints the fleet's totals. Needs a machine with two GPUs (the ``nvidia-h200-x2`` kind).
"""

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

WORKER = textwrap.dedent(
    """
    import json, os, sys, torch
    import torch.distributed as dist
    rank, out = int(os.environ["LOCAL_RANK"]), sys.argv[1]
    torch.cuda.set_device(rank)
    dist.init_process_group("gloo")  # ranks known to torch.distributed, no NCCL context on the peer
    from ddo_hooks import HookPolicy, attach
    from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs
    pipe = build_pipeline("sd", dtype=torch.bfloat16)
    pipe.enable_group_offload(torch.device("cuda", rank), offload_device=torch.device("cpu"), use_stream=True,
                              offload_type="block_level", num_blocks_per_group=1, low_cpu_mem_usage=True)
    sink = os.path.join(out, f"rank{rank}.jsonl")
    with attach(pipe, HookPolicy.from_mapping({"version": 1, "device": "cuda", "report_sink": sink})) as attachment:
        pipe(**call_kwargs("sd"))
        pipe(**call_kwargs("sd"))
    releases = [r.release for r in attachment.reports]
    result = {
        "rank": rank,
        "devices": sorted({r.device for r in releases}),
        "statuses": [r.status for r in releases],
        "released": sum(r.allocator_bytes_delta or 0 for r in releases),
        "envelopes": sorted({(e.envelope.rank, e.envelope.world_size) for e in attachment.tracker.entries()}),
        "context_on_the_other_gpu": bool(torch._C._cuda_hasPrimaryContext(1 - rank)),
    }
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()
    """
)


def test_two_ranks_each_release_on_their_own_gpu_and_summarize_gives_the_fleets_totals(gpu_count, tmp_path):
    if gpu_count < 2:
        pytest.skip("needs two GPUs")
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER, encoding="utf-8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run([*command, str(worker), str(tmp_path)], capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank in (0, 1):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        print(json.dumps(result))
        assert result["devices"] == [f"cuda:{rank}"]
        assert result["statuses"] == ["executed"] * 6
        assert result["released"] > 0
        assert result["envelopes"] == [[rank, 2]]
        assert result["context_on_the_other_gpu"] is False
    summary = subprocess.run(
        [sys.executable, "-m", "ddo_hooks", "summarize", str(tmp_path / "rank0.jsonl"), str(tmp_path / "rank1.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(summary.stdout)
    assert summary.returncode == 0, summary.stderr
    assert "rank 0 of 2" in summary.stdout
    assert "rank 1 of 2" in summary.stdout
    assert "totals per boundary across calls, all 2 runs:" in summary.stdout
