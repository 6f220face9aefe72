"""The whole pipeline pinned from its files under each fast runtime, on CUDA.

Tiny real pipelines are saved and loaded back in bf16 (their weights views of the files), then offloaded by
diffusers at block level, one block a group, with streams and ``record_stream=True`` (``low_cpu_mem_usage=True``),
or by DDO 0.1.0rc2's ``enable_pipeline_offload(pipe, preset="auto")`` told not to pin copies of its own
(``DDO_PIN_CPU_MEMORY=0``). Attached with ``pinned_copies.from_files: register`` and ``keep_encoders_pinned``, ten
plain calls are bitwise equal to the same runtime without ddo_hooks (for DDO: its default, which pins its own
copies); the runtime pins nothing of its own at setup, and every weight it copies from at a call is pinned (the
files' pages); ``drop()`` of the text encoder works; ``detach()`` gives every weight and source back the view it had
before attach, and a call after it is still equal.
"""

import pytest

pytestmark = pytest.mark.gpu

SCENARIO = """
import gc, json, tempfile, warnings, torch
warnings.simplefilter("ignore")
from diffusers import DiffusionPipeline
from ddo_hooks import HookPolicy, attach
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

family, runtime = {family!r}, {runtime!r}
folder = tempfile.mkdtemp()
build_pipeline(family, dtype=torch.bfloat16).save_pretrained(folder)

def load(own_pins=True):
    pipe = DiffusionPipeline.from_pretrained(folder, dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    if runtime == "ddo":
        import diffusers_dynamic_offloader as ddo
        environ = {{}} if own_pins else {{"DDO_PIN_CPU_MEMORY": "0"}}
        ddo.enable_pipeline_offload(pipe, preset="auto", execution_device="cuda:0", environ=environ)
    else:
        pipe.enable_group_offload(torch.device("cuda:0"), offload_device=torch.device("cpu"),
                                  offload_type="block_level", num_blocks_per_group=1, use_stream=True,
                                  record_stream=True, low_cpu_mem_usage=True)
    return pipe

def outputs(pipe, calls=10):
    return [pipe(**call_kwargs(family, seed=n)).images.float().cpu() for n in range(calls)]

def owned():
    gc.collect()  # a dropped pipeline sits in reference cycles with its hooks
    torch.cuda.synchronize()
    torch._C._host_emptyCache()
    return torch._C._cuda_hostMemoryStats()["allocated_bytes"]["current"]  # torch 2.10+: what the allocator owns

def held(pipe):
    # what each component reads at a call: its groups' CPU sources, else its weights on the CPU (DDO's runtime)
    found = {{}}
    for name, module in pipe.components.items():
        if not isinstance(module, torch.nn.Module):
            continue
        groups = diffusers_compat.offload_groups(module)
        tensors = [t for g in groups for t in diffusers_compat.group_cpu_sources(g).values()]
        if not groups:
            tensors = [p for p in module.parameters() if p.device.type == "cpu"]
        found[name] = tensors
    return found

def ptrs(pipe):
    return {{n: [t.data_ptr() for t in ts] for n, ts in held(pipe).items()}}

plain_pipe = load()
plain = outputs(plain_pipe)
own_before = owned()
del plain_pipe
own_dropped = owned()
pipe = load(own_pins=False)
own_setup = owned()
before = ptrs(pipe)
pinned_copies = {{"from_files": "register", "keep_encoders_pinned": True}}
policy = HookPolicy.from_mapping({{"version": 1, "pinned_copies": pinned_copies}})
attachment = attach(pipe, policy)
report = attachment.from_files_report.repack
got = outputs(pipe)
pinned = {{n: [bool(t.is_pinned()) for t in ts if t.dtype.is_floating_point] for n, ts in held(pipe).items()}}
own_calls = owned()
if family == "sd":
    attachment.drop("text_encoder")
attachment.detach()
after = ptrs(pipe)
print(json.dumps({{
    "components": {{c.component: [c.status, c.reason, c.detail] for c in report.components}},
    "pinned_bytes": report.pinned_bytes_after, "tensor_bytes": report.tensor_bytes,
    "owned": {{"runtime_own_pins": own_before - own_dropped, "setup": own_setup - own_dropped,
               "after_calls": own_calls - own_dropped}},
    "pinned": pinned, "equal": [bool(torch.equal(a, b)) for a, b in zip(plain, got)],
    "views_back": {{n: after[n] == before[n] for n in after}},
    "equal_after_detach": family == "sd" or bool(plain[0].equal(outputs(pipe, 1)[0])),  # sd: its encoder dropped
}}))
"""


REGISTERED = {
    ("flux", "block-rs"): {"transformer", "vae"},  # at block level diffusers streams no text encoder
    ("sd", "block-rs"): {"unet", "vae"},
    ("flux", "ddo"): {"transformer", "text_encoder", "text_encoder_2"},  # DDO offloads the VAE without a stream
    ("sd", "ddo"): {"unet", "text_encoder"},
}
"""The components pinned from their files under each runtime: those whose sources the runtime copies from."""


@pytest.mark.parametrize("runtime", ["block-rs", "ddo"])
@pytest.mark.parametrize("family", ["flux", "sd"])
def test_the_whole_pipeline_pinned_from_its_files_under_each_fast_runtime(run_fresh, gpu_count, family, runtime):
    if runtime == "ddo":
        pytest.importorskip("diffusers_dynamic_offloader", reason="DDO is carried as a wheel (scripts/gpu_session.sh)")
    found = run_fresh(SCENARIO.format(family=family, runtime=runtime), timeout=300)
    statuses = {name: (status, reason) for name, (status, reason, _) in found["components"].items()}
    registered = [name for name, status in statuses.items() if status == ("registered", None)]
    assert set(registered) == REGISTERED[family, runtime]
    assert all(
        reason in ("on_device", "no_pinned_copies") for status, reason in statuses.values() if status == "skipped"
    )
    assert all(all(found["pinned"][name]) for name in registered)
    assert found["pinned_bytes"] >= found["tensor_bytes"] > 0
    assert found["owned"]["setup"] == 0  # the runtime pinned nothing of its own
    if runtime == "ddo":
        assert found["owned"]["runtime_own_pins"] > 0  # which DDO does by default
    assert found["equal"] == [True] * 10
    assert all(found["views_back"].values())
    assert found["equal_after_detach"]
