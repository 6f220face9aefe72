"""The release core on the real CUDA host allocator (torch 2.11 on the H200).

Each test runs its scenario in a fresh process (see conftest.run_fresh) and prints the
figures it measured.
"""

import pytest

pytestmark = pytest.mark.gpu

MiB = 2**20

PRELUDE = """
import gc, json, torch
from ddo_hooks import release_pytorch_host_cache
def raw_owned():
    return torch._C._cuda_hostMemoryStats()["allocated_bytes"]["current"]
"""


def test_cached_blocks_are_released_and_rss_falls(run_fresh, gpu_count):
    r = run_fresh(
        PRELUDE
        + """
torch.zeros(1, device="cuda:0")
blocks = [torch.empty(384 * 2**20, dtype=torch.uint8, pin_memory=True).fill_(1) for _ in range(4)]
live_rounded = raw_owned()
del blocks
report = release_pytorch_host_cache(enabled=True, phase="after_call", device="cuda:0")
rel = report.release
print(json.dumps({
    "status": rel.status, "released": rel.released, "entry_point": rel.entry_point,
    "before_owned": rel.before.allocated_bytes, "after_owned": rel.after.allocated_bytes,
    "delta": rel.allocator_bytes_delta, "pinned_rounded": live_rounded,
    "rss_before": rel.host_before.rss_bytes, "rss_after": rel.host_after.rss_bytes,
    "elapsed": rel.elapsed_seconds, "timings": rel.timings.model_dump(),
    "reported_active_after": rel.after.reported_active_bytes,
    "active_consistent_after": rel.after.active_counter_consistent,
    "raw_keys": sorted(torch._C._cuda_hostMemoryStats()),
}))
"""
    )
    assert r["status"] == "executed"
    assert r["released"]
    assert r["entry_point"] == "torch._C._host_emptyCache"
    assert r["before_owned"] == r["pinned_rounded"] >= 4 * 384 * MiB
    assert r["after_owned"] == 0
    assert r["delta"] == r["before_owned"]
    assert r["rss_before"] - r["rss_after"] >= 0.95 * r["delta"]


def test_live_pinned_tensors_stay_owned_and_intact(run_fresh, gpu_count):
    r = run_fresh(
        PRELUDE
        + """
torch.zeros(1, device="cuda:0")
live = torch.arange(64 * 2**20, dtype=torch.int32).pin_memory()
expected = live.clone()
live_owned = raw_owned()
dead = torch.empty(256 * 2**20, dtype=torch.uint8, pin_memory=True)
del dead
rel = release_pytorch_host_cache(enabled=True, phase="before_vae", device="cuda:0").release
print(json.dumps({
    "status": rel.status, "live_owned": live_owned, "before": rel.before.allocated_bytes,
    "after": rel.after.allocated_bytes, "delta": rel.allocator_bytes_delta,
    "still_pinned": live.is_pinned(), "intact": bool(torch.equal(live, expected)),
}))
"""
    )
    assert r["status"] == "executed"
    assert r["still_pinned"]
    assert r["intact"]
    assert r["after"] == r["live_owned"]
    assert r["delta"] == r["before"] - r["live_owned"] >= 256 * MiB


def test_fresh_process_is_a_noop_and_creates_no_context(run_fresh, gpu_count):
    r = run_fresh(
        PRELUDE
        + """
rel = release_pytorch_host_cache(enabled=True, phase="before_transformer", device="cuda:0").release
flag = torch.cuda.is_initialized()
contexts = [torch._C._cuda_hasPrimaryContext(i) for i in range(torch.cuda.device_count())]
print(json.dumps({"status": rel.status, "reason": rel.noop_reason, "flag": flag, "contexts": contexts}))
"""
    )
    assert r["status"] == "noop"
    assert r["reason"] == "cuda_not_initialized"
    assert r["flag"] is False
    assert not any(r["contexts"])


def test_pinned_without_python_flag_is_released(run_fresh, gpu_count):
    """Pinning initializes CUDA in C++ without torch.cuda.is_initialized(): the raw counters
    show the cached blocks, so the boundary executes (the documented decision)."""
    r = run_fresh(
        PRELUDE
        + """
t = torch.empty(256 * 2**20, dtype=torch.uint8).pin_memory()
del t
flag_before = torch.cuda.is_initialized()
wrapper_stats = torch.cuda.host_memory_stats()
rel = release_pytorch_host_cache(enabled=True, phase="after_call").release
print(json.dumps({
    "flag_before": flag_before, "wrapper_stats_empty": wrapper_stats == {}, "status": rel.status,
    "device": rel.device, "synchronized": rel.synchronized, "delta": rel.allocator_bytes_delta,
    "flag_after": torch.cuda.is_initialized(),
    "contexts": [torch._C._cuda_hasPrimaryContext(i) for i in range(torch.cuda.device_count())],
}))
"""
    )
    assert r["flag_before"] is False
    assert r["wrapper_stats_empty"]
    assert r["status"] == "executed"
    assert r["delta"] >= 256 * MiB
    # No CUDA tensor was made, so nothing was in flight: no synchronize, no current-device
    # query, and torch's lazy init did not run.
    assert r["synchronized"] is False
    assert r["device"] == "cuda"
    assert r["flag_after"] is False
    assert r["contexts"][1:] == [False] * (len(r["contexts"]) - 1)


def test_release_on_one_device_creates_no_context_on_another(run_fresh, gpu_count):
    if gpu_count < 2:
        pytest.skip("needs two CUDA devices (run on the nvidia-h200-x2 kind)")
    r = run_fresh(
        PRELUDE
        + """
torch.zeros(1, device="cuda:0")
t = torch.empty(64 * 2**20, dtype=torch.uint8, pin_memory=True); del t
on0 = release_pytorch_host_cache(enabled=True, phase="after_call", device="cuda:0").release
ctx1_after_0 = torch._C._cuda_hasPrimaryContext(1)
on1 = release_pytorch_host_cache(enabled=True, phase="after_call", device="cuda:1").release
print(json.dumps({
    "on0": [on0.status, on0.synchronized, on0.allocator_bytes_delta],
    "ctx1_after_0": ctx1_after_0,
    "on1": [on1.status, on1.synchronized, on1.detail],
    "ctx1_after_1": torch._C._cuda_hasPrimaryContext(1),
}))
"""
    )
    assert r["on0"][:2] == ["executed", True]
    assert r["on0"][2] >= 64 * MiB
    assert r["ctx1_after_0"] is False
    assert r["on1"][:2] == ["executed", False]
    assert r["ctx1_after_1"] is False


def test_forked_child_gets_a_noop(run_fresh, gpu_count):
    r = run_fresh(
        PRELUDE
        + """
import multiprocessing as mp
torch.zeros(1, device="cuda:0")
t = torch.empty(64 * 2**20, dtype=torch.uint8, pin_memory=True); del t
def child(q):
    q.put(release_pytorch_host_cache(enabled=True, phase="after_call", device="cuda:0").release.noop_reason)
ctx = mp.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,)); p.start(); reason = q.get(timeout=60); p.join()
parent = release_pytorch_host_cache(enabled=True, phase="after_call", device="cuda:0").release
print(json.dumps({"child": reason, "parent": parent.status, "parent_delta": parent.allocator_bytes_delta}))
"""
    )
    assert r["child"] == "forked_child"
    assert r["parent"] == "executed"
    assert r["parent_delta"] >= 64 * MiB


def test_collection_cost_breakdown_with_loaded_models(run_fresh, gpu_count):
    """With ~a pipeline's worth of Python objects alive, 'auto' collection stays cheap while a
    dropped module in a reference cycle is still freed by the boundary."""
    r = run_fresh(
        PRELUDE
        + """
import weakref, time
torch.zeros(1, device="cuda:0")
import diffusers, transformers  # the object population of a real host process
keep = [torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(50)]) for _ in range(400)]
gc.collect()
def cyclic_module():
    m = torch.nn.Linear(4096, 4096)
    m.pinned = torch.empty(128 * 2**20, dtype=torch.uint8, pin_memory=True)
    m.self_ref = [m]  # a cycle, as forward wrappers make
    return m
results = {}
for strategy in ("full", "young", "auto"):
    m = cyclic_module()
    for _ in range(3):
        gc.collect()  # age the cycle into the oldest generation
    ref = weakref.ref(m); del m
    rel = release_pytorch_host_cache(enabled=True, phase="before_transformer", device="cuda:0",
                                     collect=strategy, expect_freed={"dropped": ref}).release
    results[strategy] = {"collect_s": rel.timings.collect_seconds, "release_s": rel.timings.release_seconds,
                         "elapsed_s": rel.elapsed_seconds, "full": rel.collection.full_collection,
                         "freed": ref() is None, "delta": rel.allocator_bytes_delta}
    gc.collect(); torch._C._host_emptyCache()
rel = release_pytorch_host_cache(enabled=True, phase="after_call", device="cuda:0", collect="auto").release
results["auto_nothing_dropped"] = {"collect_s": rel.timings.collect_seconds, "full": rel.collection.full_collection,
                                   "overhead_s": rel.elapsed_seconds - rel.timings.release_seconds}
results["tracked_objects"] = len(gc.get_objects())
print(json.dumps(results))
"""
    )
    assert r["full"]["freed"]
    assert r["full"]["delta"] >= 128 * MiB
    assert r["auto"]["freed"]
    assert r["auto"]["full"]
    assert r["auto"]["delta"] >= 128 * MiB
    assert not r["young"]["freed"]
    assert r["auto_nothing_dropped"]["full"] is False
