"""Repacking pinned copies on the real CUDA host allocator (the CPU tests use the fake one).

Each scenario runs in a fresh process: a twin pipeline (same seed, same weights) that is not
repacked gives the reference outputs, call after call, and the allocator's own counters say what
the copies own.
"""

import pytest

pytestmark = pytest.mark.gpu

TWINS = """
import gc, json, torch
from ddo_hooks import HookPolicy, attach
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

family = {family!r}
owned = lambda: torch._C._cuda_hostMemoryStats()["allocated_bytes"]["current"]
LEVELS = {{"leaf": dict(offload_type="leaf_level"), "block": dict(offload_type="block_level", num_blocks_per_group=1)}}

def offloaded(level, record_stream):
    pipe = build_pipeline(family, dtype=torch.bfloat16)
    pipe.enable_group_offload(torch.device("cuda:0"), offload_device=torch.device("cpu"), use_stream=True,
                              low_cpu_mem_usage=False, record_stream=record_stream, **LEVELS[level])
    return pipe

results = {{}}
for level in LEVELS:
    for record_stream in (False, True):
        plain = offloaded(level, record_stream)
        kept = attach(plain, HookPolicy.from_mapping({{"version": 1, "pinned_copies": {{"repack": False}}}}))
        gc.collect()  # the previous variant's pipelines, in hook cycles
        torch._C._host_emptyCache()
        start = owned()
        repacked = offloaded(level, record_stream)
        before = owned()
        attachment = attach(repacked)
        repack = attachment.repack_report.repack
        equal = []
        for call in range(3):
            a = plain(**call_kwargs(family, seed=call), return_dict=False)[0]
            b = repacked(**call_kwargs(family, seed=call), return_dict=False)[0]
            equal.append(bool(torch.equal(a, b)))
        results[f"{{level}}/record_stream={{record_stream}}"] = {{
            "status": repack.status, "equal": equal, "releases": [r.status for r in repack.releases],
            "components": {{c.component: [c.status, c.reason, c.tensor_bytes, c.pinned_bytes_before,
                                         c.pinned_bytes_after] for c in repack.components}},
            "owned_before": before - start, "owned_after_attach": repack.after.allocated_bytes - start,
            "delta": repack.allocator_bytes_delta}}
        attachment.detach(), kept.detach()
        del plain, repacked
print(json.dumps(results))
"""


@pytest.mark.parametrize("family", ["flux", "sd", "wan"])
def test_repacked_pipelines_give_bitwise_equal_outputs_and_own_their_slabs(run_fresh, gpu_count, family):
    # Leaf and block level, record_stream off and on, each against an unrepacked twin (same seed).
    for variant, result in run_fresh(TWINS.format(family=family), timeout=600).items():
        assert result["status"] == "executed", (variant, result)
        assert result["equal"] == [True, True, True], (variant, result)
        parts = result["components"].values()
        assert {status for status, *_ in parts} <= {"repacked", "skipped"}, (variant, result)
        # What the allocator owns for this pipeline's copies after the repack is exactly the slabs (and
        # what was left as it was): the rounded blocks went back.
        assert result["owned_after_attach"] == sum(after for *_, after in parts), (variant, result)
        assert result["owned_before"] - result["owned_after_attach"] == result["delta"] > 0, (variant, result)
        assert set(result["releases"]) == {"executed"}, (variant, result)


FULL_SIZE = """
import json, sys, torch
sys.path.insert(0, "benchmarks")
import pinned_workload as workload
from diffusers import FluxTransformer2DModel
from transformers import T5Config, T5EncoderModel
from ddo_hooks.release.repack import repack_pinned_copies

raw = lambda: torch._C._cuda_hostMemoryStats()["allocated_bytes"]
cfg = workload.SIZES["full"]
with torch.device("meta"):
    models = {{"transformer": FluxTransformer2DModel(patch_size=1, in_channels=64, guidance_embeds=True,
                                                    **cfg["transformer"], **cfg["joint"]),
              "text_encoder_2": T5EncoderModel(T5Config(**cfg["t5"], feed_forward_proj="gated-gelu",
                                                        is_encoder_decoder=False))}}
figures = {{}}
for name, model in models.items():
    model.to_empty(device="cpu").to(torch.bfloat16)  # the values do not matter: only the bytes
    from diffusers.hooks import apply_group_offloading
    apply_group_offloading(model, onload_device=torch.device("cuda:0"), offload_device=torch.device("cpu"),
                           offload_type={level!r}, use_stream=True, low_cpu_mem_usage=False,
                           **({{"num_blocks_per_group": 1}} if {level!r} == "block_level" else {{}}))
    torch._C._host_emptyCache()
    before = raw()["current"]
    report = repack_pinned_copies(model).repack
    (component,) = report.components
    figures[name] = {{"status": component.status, "tensor_bytes": component.tensor_bytes,
                     "rounded": component.pinned_bytes_before, "slabs": component.pinned_bytes_after,
                     "owned_before": before, "owned_after": raw()["current"], "peak": raw()["peak"],
                     "seconds": component.seconds, "elapsed": report.elapsed_seconds}}
    del model
    models[name] = None
print(json.dumps(figures))
"""


@pytest.mark.parametrize("level", ["leaf_level", "block_level"])
def test_the_flux_shaped_workloads_copies_own_at_most_2_percent_above_their_bytes(run_fresh, gpu_count, level):
    # Components are repacked one after the other: before the first, the allocator owns the
    # transformer's rounded copies; the peak is at most one component's copies above that.
    figures = run_fresh(FULL_SIZE.format(level=level), timeout=900)
    transformer, t5 = figures["transformer"], figures["text_encoder_2"]
    if level == "block_level":  # diffusers makes T5 one group without a stream at block level: nothing pinned
        assert t5["status"] == "skipped", figures
        del figures["text_encoder_2"]
    for name, f in figures.items():
        assert f["status"] == "repacked", (name, f)
        assert f["rounded"] / f["tensor_bytes"] > 1.5, (name, f)
        assert f["owned_after"] - (f["owned_before"] - f["rounded"]) == f["slabs"], (name, f)
        assert f["slabs"] <= 1.02 * f["tensor_bytes"], (name, f)
    assert transformer["peak"] <= transformer["owned_before"] + transformer["rounded"], figures
    owned = sum(f["tensor_bytes"] for f in figures.values())
    assert figures[list(figures)[-1]]["owned_after"] <= 1.02 * owned, figures


DROP_AND_DETACH = """
import json, torch
from ddo_hooks import HookPolicy, attach
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs, embed_prompt

owned = lambda: torch._C._cuda_hostMemoryStats()["allocated_bytes"]["current"]
pipe = build_pipeline("flux", dtype=torch.bfloat16)
pipe.enable_group_offload(torch.device("cuda:0"), offload_device=torch.device("cpu"), use_stream=True,
                          offload_type="leaf_level", low_cpu_mem_usage=False)
attachment = attach(pipe, HookPolicy.preset("lowest-peak"))
slabs = {{c.component: c.pinned_bytes_after for c in attachment.repack_report.repack.components}}
first = pipe(**call_kwargs("flux"), return_dict=False)[0]
embeds = embed_prompt(pipe, "flux")
before_drop = owned()
attachment.drop("text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2")
second = pipe(**{{**call_kwargs("flux"), "prompt": None, **embeds}}, return_dict=False)[0]
releases = [r.release for r in attachment.reports if r.route == "pytorch_host_cache_release"]
dropped_at = next(r for r in releases[3:] if r.phase == "before_transformer")
attachment.detach()
third = pipe(**{{**call_kwargs("flux"), "prompt": None, **embeds}}, return_dict=False)[0]
print(json.dumps({{"encoder_slabs": slabs["text_encoder"] + slabs["text_encoder_2"], "before_drop": before_drop,
                  "delta_at_next_boundary": dropped_at.allocator_bytes_delta, "owned_end": owned(),
                  "same_after_detach": bool(torch.equal(second, third)),
                  "first_finite": bool(first.isfinite().all())}}))
"""


def test_a_dropped_repacked_encoder_gives_its_slabs_back_and_detach_keeps_the_pipeline_working(run_fresh, gpu_count):
    result = run_fresh(DROP_AND_DETACH.format())
    assert result["delta_at_next_boundary"] >= result["encoder_slabs"], result
    assert result["same_after_detach"], result
    assert result["first_finite"], result
