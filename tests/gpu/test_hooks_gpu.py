"""Phase-boundary hooks on real pipelines under the offload modes that need CUDA.

Each scenario runs in a fresh process and prints, per boundary, the owned pinned bytes
before and after the release. A second action at every boundary empties the cache again and
reports what that freed: zero means the boundary returned every free cached block.
"""

import pytest

pytestmark = pytest.mark.gpu

SCENARIO = """
import json, torch
from ddo_hooks import attach, register_action
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs, embed_prompt

@register_action("check_empty")
def check_empty(ctx):
    owned = lambda: torch._C._cuda_hostMemoryStats()["allocated_bytes"]["current"]
    before = owned(); torch._C._host_emptyCache()
    return ctx.action_report("executed", data={{"left_behind": before - owned()}})

family, mode = {family!r}, {mode!r}
pipe = build_pipeline(family, dtype=torch.bfloat16)
cuda, cpu = torch.device("cuda:0"), torch.device("cpu")
if mode.startswith("group"):
    pipe.enable_group_offload(cuda, offload_device=cpu, use_stream=True, low_cpu_mem_usage=mode.endswith("lowmem"),
                              **(dict(offload_type="leaf_level") if "leaf" in mode
                                 else dict(offload_type="block_level", num_blocks_per_group=1)))
elif mode == "model-cpu-offload":
    pipe.enable_model_cpu_offload(device="cuda:0")
elif mode == "sequential-cpu-offload":
    pipe.enable_sequential_cpu_offload(device="cuda:0")
policy = HookPolicy.from_mapping({{"version": 1, "device": "cuda:0",
    "boundaries": {{b: {{"actions": ["host_cache_release", "check_empty"]}}
                   for b in ("before_transformer", "before_vae", "after_call")}}}})
rows = []
with attach(pipe, policy) as attachment:
    pipe(**call_kwargs(family))
    if {drop_encoders!r}:
        embeds = embed_prompt(pipe, family)
        for name in ("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"):
            if hasattr(pipe, name):
                setattr(pipe, name, None)
        pipe(**{{**call_kwargs(family), "prompt": None, **embeds}})
    else:
        pipe(**call_kwargs(family))
    reports = [r for r in attachment.reports if r.route != "pinned_copy_repack"]  # the repack at attach first
for release, check in zip(reports[::2], reports[1::2]):
    r = release.release
    rows.append({{"phase": r.phase, "status": r.status, "before": r.before.allocated_bytes,
                 "after": r.after.allocated_bytes, "delta": r.allocator_bytes_delta,
                 "synchronized": r.synchronized, "ms": round(r.elapsed_seconds * 1e3, 2),
                 "left_behind": check.setup.boundary_action.data["left_behind"]}})
print("\\n".join(f"  {{row}}" for row in rows))
print(json.dumps({{"rows": rows}}))
"""

MODES = [
    "group-block-stream",
    "group-block-stream-lowmem",
    "group-leaf-stream",
    "group-leaf-stream-lowmem",
    "model-cpu-offload",
    "sequential-cpu-offload",
]


def run(run_fresh, family, mode, drop_encoders=False):
    return run_fresh(SCENARIO.format(family=family, mode=mode, drop_encoders=drop_encoders))["rows"]


CASES = [("flux", mode) for mode in MODES] + [("sd", "group-block-stream-lowmem"), ("wan", "group-block-stream-lowmem")]


@pytest.mark.parametrize(("family", "mode"), CASES, ids=[f"{family}-{mode}" for family, mode in CASES])
def test_boundaries_release_every_free_block_under_each_cuda_offload_mode(run_fresh, gpu_count, family, mode):
    rows = run(run_fresh, family, mode)
    assert [r["phase"] for r in rows] == ["before_transformer", "before_vae", "after_call"] * 2
    assert all(r["status"] == "executed" for r in rows)
    assert all(r["after"] <= r["before"] for r in rows)
    assert all(r["left_behind"] == 0 for r in rows)
    if mode.endswith("lowmem"):  # pins at every onload: the cache has something to give back
        assert sum(r["delta"] for r in rows) > 0
    if mode == "model-cpu-offload":  # pins nothing
        assert all(r["before"] == 0 for r in rows)


def test_dropped_text_encoders_pinned_copies_are_freed_before_the_transformer(run_fresh, gpu_count):
    # Leaf level: block-level offloading puts a text encoder (no top-level ModuleList) into its
    # "unmatched" group, which diffusers 0.42 loads without a stream and so never pins.
    rows = run(run_fresh, "flux", "group-leaf-stream", drop_encoders=True)
    second_call_start = rows[3]
    assert second_call_start["phase"] == "before_transformer"
    assert second_call_start["delta"] > 0
    assert rows[0]["delta"] == 0  # while the encoders live, their pinned copies are not releasable


DROP = """
import gc, json, torch, weakref
from ddo_hooks import attach
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs, embed_prompt

pipe = build_pipeline("flux", dtype=torch.bfloat16)
pipe.enable_group_offload(torch.device("cuda:0"), offload_type="leaf_level", use_stream=True,
                          low_cpu_mem_usage={lcmu!r})
names = ("text_encoder", "text_encoder_2")
with attach(pipe) as attachment:
    gc.disable()  # nothing but reference counting until the drop: garbage from the first forward stays
    embeds = embed_prompt(pipe, "flux")  # the first forward: diffusers removes its lazy-prefetch hooks
    modules = [weakref.ref(m) for name in names for m in getattr(pipe, name).modules()]
    attachment.drop(*names, "tokenizer", "tokenizer_2")
    alive = sum(ref() is not None for ref in modules)
    gc.enable()
    pipe(**{{**call_kwargs("flux"), "prompt": None, **embeds}})
    first = next(r for r in attachment.reports if r.route == "pytorch_host_cache_release").release
print(json.dumps({{"modules": len(modules), "alive": alive, "phase": first.phase, "delta": first.allocator_bytes_delta,
                  "full": first.collection.full_collection, "survivors": list(first.collection.survivors)}}))
"""


@pytest.mark.parametrize("lcmu", [False, True], ids=["lcmu-false", "lcmu-true"])
def test_drop_frees_the_encoders_at_once_under_streams_and_the_next_boundary_collects_young(run_fresh, lcmu):
    # Under streams the first forward leaves diffusers' lazy-prefetch hook and execution trackers in
    # garbage cycles that hold the encoders' layers; drop() clears them (the CPU test stands in for it).
    result = run_fresh(DROP.format(lcmu=lcmu))
    assert result["modules"] > 0
    assert result["alive"] == 0, result
    assert (result["phase"], result["full"], result["survivors"]) == ("before_transformer", False, []), result
    assert result["delta"] > 0, result  # the encoders' pinned copies went back to the OS
