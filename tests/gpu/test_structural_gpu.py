"""The structural pipelines (sub-pipelines, several loops, odd call ends) under group offloading with streams.

Each pipeline runs in a fresh process on cuda:0, leaf-level group offloading with
``use_stream=True`` and ``low_cpu_mem_usage=True`` (which pins at every onload), VQ models kept
on the GPU (diffusers cannot group-offload them), and PaintByExample's image encoder too (its
``forward`` returns its ``uncond_vector`` parameter, which the pipeline uses after the hook
offloaded it: on the H200 a device mismatch in its `_encode_image`). Two calls give the
same boundaries as on the CPU, every executed boundary releases, and the cache gives bytes back.
"""

import pytest
from test_structural_pipelines import EXPECTED

from ddo_hooks.testing.structural import STRUCTURAL

pytestmark = pytest.mark.gpu

SCENARIO = """
import json, warnings, torch
warnings.simplefilter("ignore")
from diffusers import VQModel
from ddo_hooks import HookPolicy, attach
from ddo_hooks.testing.structural import build_structural, structural_call_kwargs

name = {name!r}
pipe = build_structural(name)
kept = [n for n, c in pipe.components.items() if isinstance(c, VQModel)]
kept += ["image_encoder"] if name == "paint_by_example" else []
pipe.enable_group_offload(torch.device("cuda:0"), offload_device=torch.device("cpu"), offload_type="leaf_level",
                          use_stream=True, low_cpu_mem_usage=True, exclude_modules=kept or None)
with attach(pipe, HookPolicy.from_mapping({{"version": 1, "device": "cuda:0"}})) as attachment:
    pipe(**structural_call_kwargs(name))
    pipe(**structural_call_kwargs(name))
rows = []
for r in attachment.reports:
    if r.route == "phase_boundary_refusal":
        rows.append({{"boundary": f"{{r.body.boundary}}:{{r.body.reason}}", "status": "refused"}})
    else:
        rows.append({{"boundary": r.release.phase, "status": r.release.status, "delta": r.release.allocator_bytes_delta,
                     "ms": round(r.release.elapsed_seconds * 1e3, 2)}})
print(json.dumps({{"kept_on_gpu": kept, "rows": rows}}))
"""


@pytest.mark.parametrize("name", list(STRUCTURAL))
def test_structural_pipelines_under_group_offloading_with_streams(run_fresh, gpu_count, name):
    result = run_fresh(SCENARIO.format(name=name))
    rows = result["rows"]
    assert [r["boundary"] for r in rows] == EXPECTED[name] * 2
    executed = [r for r in rows if r["status"] != "refused"]
    assert all(r["status"] == "executed" for r in executed)
    assert sum(r["delta"] for r in executed) > 0  # low_cpu_mem_usage pins at every onload
