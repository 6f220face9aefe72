"""Attaching and detaching are exact inverses; attaching twice is an error."""

from __future__ import annotations

import copy
import inspect
import pickle

import pytest
import torch
from diffusers.hooks import HookRegistry

from ddo_hooks import InvalidArgumentError, attach
from ddo_hooks.hooks.signals import HOOK_NAMES, LOADING_METHODS
from ddo_hooks.testing.tiny_pipelines import FAMILIES, build_pipeline, call_kwargs

OUR_ATTRIBUTES = {"progress_bar", "check_inputs", "maybe_free_model_hooks", *LOADING_METHODS}


def modules_of(pipe):
    for name, component in pipe.components.items():
        if isinstance(component, torch.nn.Module):
            for sub_name, module in component.named_modules():
                yield f"{name}.{sub_name}".rstrip("."), module


def state(pipe):
    """Every attribute of the pipeline and of every module, by identity."""
    snapshot = {"<pipeline>": {k: id(v) for k, v in vars(pipe).items()}}
    for path, module in modules_of(pipe):
        snapshot[path] = {k: id(v) for k, v in vars(module).items()}
    return snapshot


def without_call_state(pipe, family, snapshot):
    """Drop the attributes a plain pipeline call itself replaces (its per-call state and caches)."""
    pipe(**call_kwargs(family))
    again = state(pipe)
    return {
        owner: {k: v for k, v in attributes.items() if again[owner].get(k) == v}
        for owner, attributes in snapshot.items()
    }


def hook_names(pipe):
    names = set()
    for _, module in modules_of(pipe):
        if hasattr(module, "_diffusers_hook"):
            names |= set(HookRegistry.check_if_exists_or_initialize(module).hooks)
    return names


@pytest.mark.parametrize("family", FAMILIES)
def test_detach_leaves_no_hook_wrapper_or_attribute_behind(family):
    pipe = build_pipeline(family)
    pipe(**call_kwargs(family))  # the pipeline's own per-call attributes exist from now on
    before = state(pipe)
    stable = without_call_state(pipe, family, before)
    attachment = attach(pipe)
    assert set(HOOK_NAMES.values()) <= hook_names(pipe)
    assert OUR_ATTRIBUTES & set(vars(pipe))
    pipe(**call_kwargs(family))
    attachment.detach()
    after = state(pipe)
    assert {owner: set(attributes) for owner, attributes in after.items()} == {
        owner: set(attributes) for owner, attributes in before.items()
    }
    assert {owner: {k: after[owner][k] for k in attributes} for owner, attributes in stable.items()} == stable
    assert not hook_names(pipe)
    assert not OUR_ATTRIBUTES & set(vars(pipe))


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_signatures_and_names_are_unchanged_while_attached(family):
    pipe = build_pipeline(family)
    denoiser = getattr(pipe, "transformer", None) or pipe.unet
    hooked = [denoiser, pipe.vae.decoder]
    before = [(inspect.signature(m.forward), m.forward.__name__) for m in hooked]
    with attach(pipe):
        assert [(inspect.signature(m.forward), m.forward.__name__) for m in hooked] == before
    assert [(inspect.signature(m.forward), m.forward.__name__) for m in hooked] == before


def test_outputs_are_bit_identical_on_a_fixed_input_before_during_and_after():
    pipe = build_pipeline("flux")
    generator = torch.Generator().manual_seed(3)
    inputs = {
        "hidden_states": torch.randn(1, 16, 64, generator=generator),
        "encoder_hidden_states": torch.randn(1, 8, 32, generator=generator),
        "pooled_projections": torch.randn(1, 32, generator=generator),
        "timestep": torch.tensor([0.5]),
        "img_ids": torch.zeros(16, 3),
        "txt_ids": torch.zeros(8, 3),
        "guidance": torch.tensor([3.5]),
    }
    with torch.no_grad():
        before = pipe.transformer(**inputs).sample
        attachment = attach(pipe)
        during = pipe.transformer(**inputs).sample
        attachment.detach()
        after = pipe.transformer(**inputs).sample
    assert torch.equal(before, during)
    assert torch.equal(before, after)


def test_a_second_detach_is_a_noop():
    pipe = build_pipeline("sd")
    attachment = attach(pipe)
    attachment.detach()
    snapshot = state(pipe)
    attachment.detach()
    assert attachment.detached
    assert state(pipe) == snapshot


def test_attaching_twice_is_an_error_that_says_what_to_do():
    pipe = build_pipeline("sd")
    with attach(pipe), pytest.raises(InvalidArgumentError, match="already has ddo_hooks attached; call detach"):
        attach(pipe)


def test_attaching_again_after_detach_works_and_fires_again():
    pipe = build_pipeline("sd")
    attach(pipe).detach()
    with attach(pipe) as attachment:
        pipe(**call_kwargs("sd"))
    assert len(attachment.reports) == 3


def test_a_wrapper_someone_else_rewrapped_stays_in_place_and_goes_inert():
    pipe = build_pipeline("sd")
    attachment = attach(pipe)
    ours = pipe.progress_bar
    pipe.progress_bar = lambda *a, **k: ours(*a, **k)  # another library wraps on top of ours
    theirs = pipe.progress_bar
    attachment.detach()
    assert pipe.progress_bar is theirs
    pipe(**call_kwargs("sd"))
    assert attachment.reports == []


def test_detach_keeps_an_existing_registry_and_its_hooks():
    pipe = build_pipeline("flux")
    pipe.transformer.enable_group_offload(torch.device("cpu"), offload_type="block_level", num_blocks_per_group=1)
    names_before = set(HookRegistry.check_if_exists_or_initialize(pipe.transformer).hooks)
    with attach(pipe):
        assert HOOK_NAMES["denoiser"] in HookRegistry.check_if_exists_or_initialize(pipe.transformer).hooks
    assert set(HookRegistry.check_if_exists_or_initialize(pipe.transformer).hooks) == names_before
    pipe(**call_kwargs("flux"))


def test_attach_refuses_what_is_not_a_pipeline():
    with pytest.raises(InvalidArgumentError, match="needs a diffusers DiffusionPipeline, got Linear"):
        attach(torch.nn.Linear(2, 2))


def test_attach_refuses_a_policy_of_the_wrong_type():
    with pytest.raises(InvalidArgumentError, match="policy must be a HookPolicy, a path to a YAML policy or None"):
        attach(build_pipeline("sd"), {"version": 1})


def test_attach_refuses_a_tracker_of_the_wrong_type():
    with pytest.raises(InvalidArgumentError, match=r"tracker must be a ddo_hooks\.MetricsTracker, got list"):
        attach(build_pipeline("sd"), tracker=[])


@pytest.mark.parametrize("copy_it", [pickle.dumps, copy.deepcopy, copy.copy], ids=["pickle", "deepcopy", "copy"])
def test_an_attached_pipeline_refuses_to_be_pickled_or_copied_and_says_to_detach_first(copy_it):
    pipe = build_pipeline("sd")
    attachment = attach(pipe)
    with pytest.raises(InvalidArgumentError, match=r"StableDiffusionPipeline has ddo_hooks attached.*detach\(\)"):
        copy_it(pipe)
    attachment.detach()
    copied = pickle.loads(copy_it(pipe)) if copy_it is pickle.dumps else copy_it(pipe)
    assert type(copied) is type(pipe)  # detached, it copies as it did before attach
