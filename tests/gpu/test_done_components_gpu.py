"""Done components give back their file pages under group offloading with streams, call after call, on CUDA.

Tiny real pipelines are saved and loaded back in bf16 (their weights views of the files), offloaded at
leaf level with streams and ``record_stream=False``; ten plain calls with ``lowest-peak`` against the same
pipeline with nothing attached. With ``low_cpu_mem_usage=True`` the encoders' weights stay file views, each
call gives back every resident page of them before the transformer, and the outputs stay bitwise equal. With
``low_cpu_mem_usage=False`` group offloading has replaced them by pinned copies, which they keep (the pipeline
does not come to depend on its files) unless the policy declares the files stable: then the first call points
them back at the files (the copies are freed and no pinned source is left), and from then on it goes as with
``True``. Detaching leaves the forward hooks and the class as they were, and pins the copies again: after
detach, rewriting the encoders' files changes nothing where they held copies before attach.
"""

import pytest

pytestmark = pytest.mark.gpu

SCENARIO = """
import json, tempfile, warnings, torch
warnings.simplefilter("ignore")
from diffusers import DiffusionPipeline
from ddo_hooks import HookPolicy, attach
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

family, lcmu, policy = {family!r}, {lcmu!r}, {policy!r}
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
attachment = attach(pipe, HookPolicy.preset(policy) if isinstance(policy, str) else HookPolicy.from_mapping(policy))
got = outputs(pipe)
reports = [r.release for r in attachment.reports if r.route == "done_components_release"]
encoders = [m for n, m in pipe.components.items() if n.startswith("text_encoder")]

def sources():
    return [t for m in encoders for g in diffusers_compat.offload_groups(m)
            for t in diffusers_compat.group_cpu_sources(g).values()]

pinned_before = sum(bool(t.is_pinned()) for t in sources())
attachment.detach()
staged = [[c.component for c in r.repack.components if c.status == "repacked"]
          for r in attachment.reports if r.route == "pinned_copy_repack" and r.repack.phase != "attach"]
if not lcmu:  # the pipeline held copies before attach: after detach, its files are not read any more
    for path in __import__("pathlib").Path(folder).glob("text_encoder*/*.safetensors"):
        with open(path, "r+b") as file:
            header = int.from_bytes(file.read(8), "little")
            file.seek(8 + header)
            file.write(bytes(path.stat().st_size - 8 - header))
after = plain[0].equal(pipe(**call_kwargs(family, seed=0)).images.float().cpu())
weights = sum(p.numel() * p.element_size() for m in encoders for p in m.parameters())
print(json.dumps({{
    "equal": [bool(torch.equal(a, b)) for a, b in zip(plain, got)],
    "releases": [{{"boundary": r.boundary, "status": r.status, "released": r.released_bytes, "components": [
                      [c.component, c.outcome, c.reason, c.file_bytes, c.resident_bytes] for c in r.components],
                  "replaced": sum(c.replaced_bytes for c in r.components)}}
                 for r in reports],
    "staged": staged, "pinned_before_detach": pinned_before, "sources": len(sources()),
    "pinned_after_detach": sum(bool(t.is_pinned()) for t in sources()), "equal_after_detach": after,
    "weights": weights,
    "detached": type(pipe) is cls and {{n: len(m._forward_pre_hooks) for n, m in pipe.components.items()
                                       if isinstance(m, torch.nn.Module)}} == hooks,
}}))
"""

ENCODERS = {"flux": ["text_encoder", "text_encoder_2"], "sd": ["text_encoder"]}


def stable(preset: str) -> dict:
    """``preset`` with its ``release_done_components`` declaring the weights files stable."""
    from ddo_hooks import HookPolicy

    policy = HookPolicy.preset(preset).model_dump(mode="json")
    for boundary in policy["boundaries"].values():
        for action in boundary["actions"]:
            if action["name"] == "release_done_components":
                action["options"]["stable_files"] = True
    return policy


@pytest.mark.parametrize(("family", "lcmu"), [("flux", True), ("sd", True), ("flux", False), ("sd", False)])
def test_the_encoders_file_pages_are_given_back_every_call_and_the_outputs_stay_equal(
    run_fresh, gpu_count, family, lcmu
):
    result = run_fresh(SCENARIO.format(family=family, lcmu=lcmu, policy=stable("lowest-peak")))
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
    replaced = [r["replaced"] for r in releases]
    assert replaced[1:] == [0] * 9
    assert replaced[0] == 0 if lcmu else replaced[0] >= result["weights"]  # the pinned copies, freed
    assert result["sources"] > 0
    assert result["pinned_before_detach"] == 0  # staged at each use from then on, as with low_cpu_mem_usage=True
    assert result["pinned_after_detach"] == (0 if lcmu else result["sources"])  # detach pins them again
    assert result["staged"] == ([] if lcmu else [ENCODERS[family]])  # at detach
    assert result["equal_after_detach"]


@pytest.mark.parametrize("family", ["flux", "sd"])
def test_without_stable_files_pinned_copies_are_kept_and_the_files_are_never_read(run_fresh, gpu_count, family):
    result = run_fresh(SCENARIO.format(family=family, lcmu=False, policy="lowest-peak"))
    assert result["equal"] == [True] * 10
    for release in result["releases"]:
        assert {c[0]: (c[1], c[2]) for c in release["components"]} == dict.fromkeys(
            ENCODERS[family], ("left", "own_copies")
        )
        assert release["replaced"] == 0
    assert result["pinned_before_detach"] == result["sources"] > 0
    assert result["staged"] == []
    assert result["equal_after_detach"]  # its files were rewritten: it never read them


STAGING = {"version": 1, "boundaries": {
    "before_transformer": {"actions": ["stage_done_components"]}, "before_vae": {"enabled": False},
    "after_call": {"actions": [{"name": "release_done_components", "options": {"stable_files": True}},
                               "host_cache_release"]},
}}  # fmt: skip


def test_copies_given_back_after_a_call_are_pinned_again_at_the_next(run_fresh, gpu_count):
    """lowest-latency's pair, without its idle wait: give back after each call, pin again in the next."""
    result = run_fresh(SCENARIO.format(family="flux", lcmu=False, policy=STAGING))
    assert result["equal"] == [True] * 10
    assert result["detached"]
    assert result["staged"] == [["text_encoder", "text_encoder_2"]] * 10  # calls 2 to 10, then detach
    assert [r["boundary"] for r in result["releases"]] == ["after_call"] * 10
    assert all(r["replaced"] >= result["weights"] for r in result["releases"])  # the pinned copies, each call
    assert result["pinned_before_detach"] == 0
    assert result["pinned_after_detach"] == result["sources"]
    assert result["equal_after_detach"]
