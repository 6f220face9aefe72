"""The ring runtime on CUDA: copies on a side stream under the compute, bitwise equal to the pipeline on the GPU.

Tiny real pipelines (Flux with 3 double and 4 single blocks and a 4-block T5; SD3 with 4 joint blocks), wide
enough (512) that their block linears stream under the runtime's own 1 MiB threshold, are saved in bf16 and
loaded back (their weights views of the files). Each makes ten plain calls resident on the GPU (``pipe.to("cuda")``,
the limit), then ten under ``attach`` with the ring runtime (``streamed-box`` with every component streaming and
poison on: a slot is filled with NaN before each copy, so a read before its copy finished changes the output).
Every call is bitwise equal; the ring's hooks make no host synchronize (PyTorch's sync debug mode set to error
around them) and no GPU allocation; every source the ring copies from is pinned (the files' registered pages);
``detach()`` puts every weight back where it was, and the pipeline moved to the GPU after it calls equal too.
"""

import pytest

pytestmark = pytest.mark.gpu

SCENARIO = """
import json, sys, tempfile, warnings, torch
warnings.simplefilter("ignore")
sys.path.insert(0, "tests")
from diffusers import DiffusionPipeline
from ddo_hooks import HookPolicy, attach
from ddo_hooks.streaming.ring import Ring
from support.ring_pipelines import deep_flux, sd3_kwargs, tiny_sd3
from ddo_hooks.testing.tiny_pipelines import call_kwargs

family = {family!r}
if family == "flux":
    build, kwargs = (lambda: deep_flux(heads=32)), (lambda seed: call_kwargs("flux", seed=seed))
else:
    build, kwargs = (lambda: tiny_sd3(heads=8, head_dim=64)), sd3_kwargs
folder = tempfile.mkdtemp()
build().to(torch.bfloat16).save_pretrained(folder)

def load():
    absent = {{}} if family == "flux" else {{"text_encoder_3": None, "tokenizer_3": None}}  # SD3 without T5
    pipe = DiffusionPipeline.from_pretrained(folder, dtype=torch.bfloat16, **absent)
    pipe.set_progress_bar_config(disable=True)
    return pipe

def outputs(pipe, calls=10):
    return [pipe(**kwargs(seed)).images.float().cpu() for seed in range(calls)]

resident = load().to("cuda")
expected = outputs(resident)
del resident
torch.cuda.empty_cache()

checked = {{"begins": 0, "allocations": 0, "unpinned": 0}}
begin, end = Ring.begin, Ring.end
def watched(step):
    def run(ring, unit):
        before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
        torch.cuda.set_sync_debug_mode("error")  # a host synchronize in the hooks raises
        try:
            result = step(ring, unit)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        checked["allocations"] += torch.cuda.memory_stats().get("allocation.all.allocated", 0) - before
        checked["begins"] += step is begin
        checked["unpinned"] += sum(not s.is_pinned() for s in unit.sources)
        return result
    return run
Ring.begin, Ring.end = watched(begin), watched(end)

pipe = load()
modules = {{n: m for n, m in pipe.components.items() if isinstance(m, torch.nn.Module)}}
def where(module):
    return [(t.device.type, t.data_ptr()) for t in module.state_dict(keep_vars=True).values()]
before = {{n: where(m) for n, m in modules.items()}}
policy = HookPolicy.preset("streamed-box").model_dump(mode="json")
policy["offload"].update(stream_above=0, resident_bytes="4MiB", poison=True)
attachment = attach(pipe, HookPolicy.from_mapping(policy))
report = attachment.ring_report.ring
ring = attachment._ring.ring
got = outputs(pipe)
waited = ring.waited
attachment.detach()
after = {{n: where(m) for n, m in modules.items()}}
again = outputs(pipe.to("cuda"), 1)  # the weights are back on the host: resident again, the limit's output
print(json.dumps({{
    "equal": [bool(torch.equal(a, b)) for a, b in zip(expected, got)],
    "after_detach_equal": bool(torch.equal(again[0], expected[0])),
    "restored": before == after,
    "status": report.status, "components": {{c.component: [c.status, c.units] for c in report.components}},
    "ring_bytes": report.ring_bytes, "copied_bytes": ring.copied_bytes, "waited": waited,
    "resident_weights": attachment._ring.resident_weights if attachment._ring else None, **checked,
}}))
"""


@pytest.mark.parametrize("family", ["flux", "sd3"])
def test_ten_calls_through_the_ring_on_cuda_are_bitwise_equal_to_the_pipeline_on_the_gpu(run_fresh, gpu_count, family):
    found = run_fresh(SCENARIO.format(family=family), timeout=600)
    assert found["equal"] == [True] * 10
    assert found["after_detach_equal"]
    assert found["restored"]
    assert found["status"] == "executed"
    assert found["components"]["transformer"][0] == "streamed"
    assert found["begins"] > 10 * 4
    assert found["allocations"] == 0
    assert found["unpinned"] == 0
    assert found["copied_bytes"] > found["ring_bytes"]  # it wrapped round
