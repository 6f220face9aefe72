"""Done components give back their file pages under group offloading with streams, call after call, on CUDA.

Tiny real pipelines are saved and loaded back in bf16 (their weights views of the files), offloaded at
leaf level with streams and ``record_stream=False``; ten plain calls with ``lowest-peak`` against the same
pipeline with nothing attached. With ``low_cpu_mem_usage=True`` the encoders' weights stay file views, each
call gives back every resident page of them before the transformer, and the outputs stay bitwise equal; with
``low_cpu_mem_usage=False`` group offloading has replaced them by pinned copies, and they are left as
``not_file_backed``. Detaching leaves the forward hooks and the class as they were.
"""

import pytest

pytestmark = pytest.mark.gpu

SCENARIO = """
import json, tempfile, warnings, torch
warnings.simplefilter("ignore")
from diffusers import DiffusionPipeline
from ddo_hooks import HookPolicy, attach
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

family, lcmu = {family!r}, {lcmu!r}
folder = tempfile.mkdtemp()
build_pipeline(family, dtype=torch.bfloat16).save_pretrained(folder)

def load():
    pipe = DiffusionPipeline.from_pretrained(folder, dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    pipe.enable_group_offload(torch.device("cuda:0"), offload_device=torch.device("cpu"), offload_type="leaf_level",
                              use_stream=True, record_stream=False, low_cpu_mem_usage=lcmu)
    return pipe

def outputs(pipe):
    return [pipe(**call_kwargs(family, seed=n)).images.float().cpu() for n in range(10)]

plain = outputs(load())
pipe = load()
cls = type(pipe)
hooks = {{n: len(m._forward_pre_hooks) for n, m in pipe.components.items() if isinstance(m, torch.nn.Module)}}
attachment = attach(pipe, HookPolicy.preset("lowest-peak"))
got = outputs(pipe)
reports = [r.release for r in attachment.reports if r.route == "done_components_release"]
attachment.detach()
print(json.dumps({{
    "equal": [bool(torch.equal(a, b)) for a, b in zip(plain, got)],
    "releases": [{{"boundary": r.boundary, "status": r.status, "released": r.released_bytes, "components": [
                      [c.component, c.outcome, c.reason, c.file_bytes, c.resident_bytes] for c in r.components]}}
                 for r in reports],
    "detached": type(pipe) is cls and {{n: len(m._forward_pre_hooks) for n, m in pipe.components.items()
                                       if isinstance(m, torch.nn.Module)}} == hooks,
}}))
"""

ENCODERS = {"flux": ["text_encoder", "text_encoder_2"], "sd": ["text_encoder"]}


@pytest.mark.parametrize("family", ["flux", "sd"])
def test_the_encoders_file_pages_are_given_back_every_call_and_the_outputs_stay_equal(run_fresh, gpu_count, family):
    result = run_fresh(SCENARIO.format(family=family, lcmu=True))
    assert result["equal"] == [True] * 10
    assert result["detached"]
    releases = result["releases"]
    assert [r["boundary"] for r in releases] == ["before_transformer"] * 10
    for release in releases:
        assert release["status"] == "executed"
        assert [c[0] for c in release["components"]] == ENCODERS[family]
        for _, outcome, reason, file_bytes, resident in release["components"]:
            assert (outcome, reason) == ("released", None)
            assert resident >= 0.95 * file_bytes  # every page came back in the call, and went again


def test_pinned_copies_are_not_file_views_and_are_left_saying_so(run_fresh, gpu_count):
    result = run_fresh(SCENARIO.format(family="flux", lcmu=False))
    assert result["equal"] == [True] * 10
    assert result["detached"]
    for release in result["releases"]:
        assert release["status"] == "noop"
        assert {c[2] for c in release["components"]} == {"not_file_backed"}
