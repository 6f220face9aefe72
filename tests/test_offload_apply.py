"""``apply_offload_runtime``: the runtime per component, the phase hooks, the policy's detachment, errors;
the runtime registry and the public models of the ``auxiliary_cpu_source_detach`` route."""

from __future__ import annotations

import pytest
import torch
from diffusers.hooks import HookRegistry
from diffusers.hooks.group_offloading import _is_group_offload_enabled
from pydantic import ValidationError

from ddo_hooks import HookPolicy, InvalidArgumentError, MetricsTracker, attach
from ddo_hooks.hooks.signals import HOOK_NAMES
from ddo_hooks.offload import (
    OffloadRuntime,
    OffloadRuntimeApplication,
    PayloadInterval,
    apply_offload_runtime,
    available_runtimes,
    register_offload_runtime,
    unregister_offload_runtime,
)
from ddo_hooks.offload.apply import AUXILIARY_COMPONENT
from ddo_hooks.offload.runtimes import OBSERVER_HOOK, DiffusersGroupOffloadAdapter, get_offload_runtime
from ddo_hooks.reports.auxiliary_sources import AuxiliarySourceDetach, ComponentSourceObservation
from ddo_hooks.testing.tiny_pipelines import FAMILIES, build_pipeline, call_kwargs

MODULES = {"flux": ["transformer", "vae", "text_encoder", "text_encoder_2"], "sd": ["unet", "vae", "text_encoder"]}


def hook_names(module: torch.nn.Module) -> set[str]:
    names: set[str] = set()
    for sub in module.modules():
        if hasattr(sub, "_diffusers_hook"):
            names |= set(HookRegistry.check_if_exists_or_initialize(sub).hooks)
    return names


def aux_policy(**settings: object) -> HookPolicy:
    return HookPolicy.from_mapping({"version": 1, "auxiliary_sources": {"enabled": True, **settings}})


def mmap_loaded(pipe, name: str, tmp_path) -> None:
    """Reload a component through torch.load(mmap=True): its tensors become views of the file mapping."""
    module = getattr(pipe, name)
    torch.save(module.state_dict(), tmp_path / f"{name}.pt")
    module.load_state_dict(torch.load(tmp_path / f"{name}.pt", mmap=True, weights_only=True), assign=True)


@pytest.mark.parametrize("family", ["flux", "sd"])
def test_every_module_component_gets_the_runtime_and_its_adapter(family):
    pipe = build_pipeline(family)
    result = apply_offload_runtime(pipe, onload_device="cpu")
    assert isinstance(result, OffloadRuntimeApplication)
    assert sorted(result.components) == sorted(MODULES[family])
    assert list(result.components) == [n for n in pipe.components if n in MODULES[family]]  # the pipeline's order
    for name, component in result.components.items():
        assert component.module is getattr(pipe, name)
        assert component.runtime == "diffusers_group_offload"
        assert isinstance(component.adapter, DiffusersGroupOffloadAdapter)
        assert _is_group_offload_enabled(component.module)
        assert OBSERVER_HOOK in hook_names(component.module)
    assert result.attachment.pipeline is pipe
    assert not result.attachment.detached
    assert result.policy == HookPolicy.default()
    assert result.auxiliary_report is None
    assert AUXILIARY_COMPONENT not in result.tracker.components()
    assert "diffusers_group_offload" in repr(result)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("offload_type", ["block_level", "leaf_level"])
def test_offloaded_outputs_equal_those_of_a_plain_pipeline(family, offload_type):
    pipe, plain = build_pipeline(family), build_pipeline(family)
    result = apply_offload_runtime(pipe, onload_device="cpu", runtime_options={"offload_type": offload_type})
    output = pipe(**call_kwargs(family))
    expected = plain(**call_kwargs(family))
    key = "frames" if family == "wan" else "images"
    assert torch.equal(getattr(output, key), getattr(expected, key))
    components = [c for c, _ in result.tracker.records()]
    assert components == ["host_cache_before_transformer", "host_cache_before_vae", "host_cache_after_call"]


def test_the_policy_runs_the_detachment_once_before_the_first_forward(tmp_path):
    pipe = build_pipeline("flux")
    mmap_loaded(pipe, "transformer", tmp_path)
    result = apply_offload_runtime(pipe, aux_policy(max_copy_bytes="1MiB"), onload_device="cpu")
    [report] = result.tracker.reports(AUXILIARY_COMPONENT)
    assert report is result.auxiliary_report
    detach = report.detach
    assert (detach.status, detach.max_copy_bytes) == ("executed", 2**20)
    assert detach.copied_tensors == len(list(pipe.transformer.parameters()))  # the mmap views
    assert detach.skipped_tensors["owns_storage"] > 0  # the components built in memory own theirs
    assert all(c.execution_started is False for c in detach.components)
    pipe(**call_kwargs("flux"))
    assert len(result.tracker.reports(AUXILIARY_COMPONENT)) == 1
    assert result.tracker.components()[0] == AUXILIARY_COMPONENT
    assert MetricsTracker.from_jsonl(result.tracker.to_jsonl()).reports() == result.tracker.reports()


def test_a_policy_ceiling_too_small_records_a_refusal_and_changes_nothing(tmp_path):
    pipe = build_pipeline("flux")
    mmap_loaded(pipe, "transformer", tmp_path)
    storages = [p.untyped_storage().data_ptr() for p in pipe.transformer.parameters()]
    result = apply_offload_runtime(pipe, aux_policy(max_copy_bytes=1024), onload_device="cpu")
    detach = result.auxiliary_report.detach
    assert (detach.status, detach.refusal_reason) == ("refused", "exceeds_ceiling")
    assert [p.untyped_storage().data_ptr() for p in pipe.transformer.parameters()] == storages
    pipe(**call_kwargs("flux"))


def test_the_built_in_adapter_reports_the_loader_tensors_diffusers_retains(tmp_path):
    """With streams and low_cpu_mem_usage=True, diffusers keeps the loader tensors themselves as the CPU
    sources of its streamed groups; diffusers' own _init_cpu_param_dict makes them here (streams need CUDA)."""
    pipe = build_pipeline("flux")
    mmap_loaded(pipe, "transformer", tmp_path)
    result = apply_offload_runtime(pipe, onload_device="cpu", components=["transformer"])
    for module in pipe.transformer.modules():
        registry = getattr(module, "_diffusers_hook", None)
        group = registry.get_hook("group_offloading").group if registry else None
        if group is not None and group.offload_leader is not pipe.transformer and not group.cpu_param_dict:
            group.stream, group.low_cpu_mem_usage = object(), True  # a block group, as with use_stream=True
            group.cpu_param_dict, group.stream = group._init_cpu_param_dict(), None
    adapter = result.components["transformer"].adapter
    in_blocks = {n: "transformer_blocks" in n for n, _ in pipe.transformer.named_parameters()}
    sources = {PayloadInterval.of_tensor(p) for n, p in pipe.transformer.named_parameters() if in_blocks[n]}
    assert adapter.native_binding_count() == len(sources) == sum(in_blocks.values())
    assert set(adapter.retained_cpu_intervals()) == sources
    storages = {n: p.data_ptr() for n, p in pipe.transformer.named_parameters()}
    detach = result.detach_auxiliary_cpu_sources().detach
    assert detach.status == "executed", detach.detail
    assert detach.skipped_tensors == {"runtime_source": len(sources)}
    assert detach.copied_tensors == len(storages) - len(sources)  # the tensors outside the streamed groups
    for name, parameter in pipe.transformer.named_parameters():
        assert (parameter.data_ptr() == storages[name]) is in_blocks[name], name


def test_the_adapter_sees_a_forward_of_its_own_component_only():
    pipe = build_pipeline("flux")
    result = apply_offload_runtime(pipe, onload_device="cpu", components=["transformer", "text_encoder_2"])
    adapters = {name: c.adapter for name, c in result.components.items()}
    assert not any(a.execution_started() for a in adapters.values())
    pipe.text_encoder_2(input_ids=torch.tensor([[4, 5, 1]]))
    assert adapters["text_encoder_2"].execution_started()
    assert not adapters["transformer"].execution_started()
    detach = result.detach_auxiliary_cpu_sources().detach
    assert (detach.refusal_reason, detach.offending) == ("execution_started", ("text_encoder_2",))


def test_detach_removes_the_phase_hooks_and_observers_and_keeps_the_runtime():
    pipe = build_pipeline("flux")
    result = apply_offload_runtime(pipe, onload_device="cpu", components=["transformer"])
    assert {OBSERVER_HOOK, HOOK_NAMES["denoiser"], "group_offloading"} <= hook_names(pipe.transformer)
    result.detach()
    result.detach()  # a second call does nothing
    assert hook_names(pipe.transformer) & {OBSERVER_HOOK, HOOK_NAMES["denoiser"]} == set()
    assert "group_offloading" in hook_names(pipe.transformer)
    assert result.attachment.detached
    pipe(**call_kwargs("flux"))
    attach(pipe).detach()  # the pipeline is free to be attached again
    with pytest.raises(InvalidArgumentError, match="already has diffusers group offloading applied"):
        apply_offload_runtime(pipe, onload_device="cpu", components=["transformer"])


def test_the_apply_result_is_a_handle_like_an_attachment():
    pipe = build_pipeline("flux")
    with apply_offload_runtime(pipe, onload_device="cpu", components=["transformer"]) as result:
        assert not result.detached
        pipe(**call_kwargs("flux"))
    assert result.detached
    assert result.attachment.detached
    assert hook_names(pipe.transformer) & {OBSERVER_HOOK, HOOK_NAMES["denoiser"]} == set()
    assert [r.release.phase for r in result.tracker.reports()] == ["before_transformer", "before_vae", "after_call"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"onload_device": "gpu0"}, r"onload_device='gpu0' is not a device"),
        ({"onload_device": 3}, r"onload_device=3 must be a str"),
        ({"components": "transformer"}, r"components='transformer' must be a non-empty list"),
        ({"components": []}, r"components=\[\] must be a non-empty list"),
        ({"components": ["transformr"]}, r"components names 'transformr'.*choose from"),
        ({"components": ["tokenizer"]}, r"components names 'tokenizer', which is not a module component"),
        ({"components": ["vae", "vae"]}, r"lists a component twice"),
        ({"runtime": "accelerate"}, r"runtime='accelerate' is not a registered offload runtime"),
        ({"runtime_options": ["use_stream"]}, r"runtime_options must be a mapping"),
        ({"runtime_options": {"use_streams": True}}, r"runtime_options has unknown key\(s\) \['use_streams'\]"),
        ({"runtime_options": {"use_stream": True}}, r"rejected runtime_options=.*'transformer'.*use_stream=False"),
        ({"runtime_options": {"offload_type": "layer"}}, r"rejected runtime_options=.*'layer' is not a valid"),
        ({"tracker": []}, r"tracker must be a ddo_hooks.MetricsTracker"),
    ],
)
def test_bad_arguments_name_the_argument_and_change_nothing(kwargs, match):
    pipe = build_pipeline("flux")
    arguments = {"onload_device": "cpu", "components": ["transformer", "vae"], **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        apply_offload_runtime(pipe, **arguments)
    assert not any(_is_group_offload_enabled(getattr(pipe, name)) for name in ("transformer", "vae"))
    assert hook_names(pipe.transformer) == set()
    attach(pipe).detach()  # no attachment was left behind


def test_not_a_pipeline_is_an_invalid_argument():
    with pytest.raises(InvalidArgumentError, match="pipe must be a diffusers DiffusionPipeline, got Linear"):
        apply_offload_runtime(torch.nn.Linear(2, 2), onload_device="cpu")


class Broken:
    """Not a source-observation adapter."""


@pytest.fixture
def broken_runtime():
    builtin = get_offload_runtime("diffusers_group_offload")
    runtime = register_offload_runtime(OffloadRuntime("test.broken", builtin.apply, lambda module: Broken()))
    yield runtime
    unregister_offload_runtime("test.broken")


def test_a_runtime_whose_adapter_breaks_the_protocol_is_refused_and_hooks_are_removed(broken_runtime):
    pipe = build_pipeline("flux")
    assert "test.broken" in available_runtimes()
    with pytest.raises(InvalidArgumentError, match="made a Broken for 'transformer', which does not implement"):
        apply_offload_runtime(pipe, onload_device="cpu", components=["transformer"], runtime="test.broken")
    assert HOOK_NAMES["denoiser"] not in hook_names(pipe.transformer)
    attach(pipe).detach()


def test_runtime_registration_checks_its_input(broken_runtime):
    builtin = get_offload_runtime("diffusers_group_offload")
    with pytest.raises(InvalidArgumentError, match="already registered; pass replace=True"):
        register_offload_runtime(broken_runtime)
    assert register_offload_runtime(broken_runtime, replace=True) is broken_runtime
    with pytest.raises(InvalidArgumentError, match="is built in and cannot be replaced"):
        register_offload_runtime(builtin, replace=True)
    with pytest.raises(InvalidArgumentError, match=r"'Bad Name' is not a runtime name; use a lowercase letter"):
        register_offload_runtime(OffloadRuntime("Bad Name", builtin.apply, builtin.adapter))
    with pytest.raises(InvalidArgumentError, match="adapter must be callable"):
        register_offload_runtime(OffloadRuntime("test.x", builtin.apply, None))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="must be an OffloadRuntime"):
        register_offload_runtime("test.x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="cannot be unregistered"):
        unregister_offload_runtime("diffusers_group_offload")
    with pytest.raises(InvalidArgumentError, match=r"no offload runtime named 'test\.x'"):
        unregister_offload_runtime("test.x")


# --- the route's public models ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"status": "executed"}, "needs host_before and host_after"),
        ({"status": "refused"}, "refusal_reason is set exactly"),
        ({"status": "refused", "refusal_reason": "partial_alias", "copied_bytes": 8}, "copies nothing"),
        ({"status": "refused", "refusal_reason": "exceeds_ceiling", "selected_bytes": 4}, "greater than"),
        ({"status": "noop", "noop_reason": "disabled", "offending": ("x",)}, "offending names"),
        ({"status": "noop", "noop_reason": "disabled", "skipped_bytes": {"pinned": 4}}, "same reasons"),
    ],
)
def test_the_report_model_rejects_incoherent_reports(fields, match):
    with pytest.raises(ValidationError, match=match):
        AuxiliarySourceDetach(detail="x", max_copy_bytes=16, elapsed_seconds=0.0, **fields)


def test_an_observation_counts_intervals_only_when_reported():
    with pytest.raises(ValidationError, match="exactly when interval_observation='reported'"):
        ComponentSourceObservation(component="t", runtime="r", adapter="a", attached=True, retained_intervals=1)


@pytest.mark.parametrize(("start", "end"), [(-1, 4), (8, 4), (True, 4), (0, 2.5)])
def test_a_payload_interval_is_an_ordered_pair_of_addresses(start, end):
    with pytest.raises(InvalidArgumentError, match="PayloadInterval"):
        PayloadInterval(start, end)


def test_the_offload_names_left_the_top_level_and_their_old_names_warn():
    import ddo_hooks
    import ddo_hooks.offload as offload

    assert not set(offload.__all__) & set(dir(ddo_hooks))
    assert "apply_dynamic_offload" not in dir(ddo_hooks)
    renamed = r"^ddo_hooks.apply_dynamic_offload is now ddo_hooks.offload.apply_offload_runtime \(DDO's"
    with pytest.warns(DeprecationWarning, match=renamed):
        assert ddo_hooks.apply_dynamic_offload is apply_offload_runtime
    with pytest.warns(DeprecationWarning, match=r"^ddo_hooks.OffloadRuntime is now ddo_hooks.offload.OffloadRuntime;"):
        assert ddo_hooks.OffloadRuntime is OffloadRuntime
    with pytest.raises(AttributeError, match="no attribute 'apply_nothing'"):
        offload.apply_nothing  # noqa: B018
