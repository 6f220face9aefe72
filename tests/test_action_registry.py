"""A registry of one's own: its actions reach the attachments given it, and nothing else."""

from __future__ import annotations

import pytest

from ddo_hooks import HookPolicy, attach
from ddo_hooks.actions.registry import REGISTRY, ActionRegistry, available_actions
from ddo_hooks.errors import InvalidArgumentError, PolicyError
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs


@pytest.fixture(scope="module")
def sd():
    return build_pipeline("sd")


def counting_policy() -> HookPolicy:
    return HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"actions": ["mine.count"]}}})


def test_an_action_of_a_registry_of_ones_own_runs_where_attach_is_given_that_registry(sd):
    mine = ActionRegistry()
    calls = []

    @mine.register("mine.count")
    def count(ctx):
        calls.append(ctx.call_index)
        return ctx.action_report("executed", data={"call": ctx.call_index})

    with attach(sd, counting_policy(), registry=mine) as attachment:
        sd(**call_kwargs("sd", steps=1))
    assert calls == [1]
    assert [r.route for r in attachment.reports if r.route == "boundary_action"] == ["boundary_action"]
    assert REGISTRY.registered("mine.count") is None
    assert "mine.count" not in available_actions()
    with pytest.raises(PolicyError, match=r"unknown action 'mine\.count'.* with @ddo_hooks\.register_action\('mine"):
        attach(sd, counting_policy())  # the process's registry never saw it
    with pytest.raises(PolicyError, match=r"Register it with this registry's register\('mine\.other'\)"):
        ActionRegistry().resolve("mine.other")


def test_attach_refuses_a_registry_that_is_not_one(sd):
    with pytest.raises(InvalidArgumentError, match=r"registry must be a ddo_hooks\.actions\.registry\.ActionRegistry"):
        attach(sd, registry={"mine.count": print})


def test_register_action_takes_every_field_of_the_declaration_but_the_name_and_the_function():
    import dataclasses

    from ddo_hooks.actions.contract import RegisteredAction
    from ddo_hooks.actions.registry import Declaration

    fields = {field.name for field in dataclasses.fields(RegisteredAction)}
    assert set(Declaration.__annotations__) == fields - {"name", "run"}


def test_an_action_registered_with_defaults_gets_the_settings_of_that_section_under_its_own(sd):
    from ddo_hooks.actions.contract import ActionOptions

    class Window(ActionOptions):
        min_releasable_bytes: int = 0
        collect: str = "auto"

    mine, seen = ActionRegistry(), []
    mine.register("mine.window", lambda ctx: seen.append(ctx.options), options=Window, defaults=lambda p: p.release)
    policy = HookPolicy.from_mapping({
        "version": 1, "release": {"min_releasable_bytes": "1MiB"},
        "boundaries": {"after_call": {"actions": [{"name": "mine.window", "options": {"collect": "full"}}]}},
    })  # fmt: skip
    with attach(sd, policy, registry=mine):
        sd(**call_kwargs("sd", steps=1))
    assert [(o.min_releasable_bytes, o.collect) for o in seen] == [(2**20, "full")]


def test_a_policy_loaded_with_a_registry_of_ones_own_checks_its_options_there_and_attach_finds_its_actions_there(sd):
    from ddo_hooks.actions.contract import ActionOptions

    class Depth(ActionOptions):
        depth: int = 1

    mine, seen = ActionRegistry(), []
    mine.register("mine.deep", lambda ctx: seen.append(ctx.options.depth), options=Depth)
    text = "version: 1\nboundaries:\n  after_call:\n    actions: [{name: mine.deep, options: {depht: 2}}]\n"
    refused = r"<string>:4:43: .*options\.depht: unknown option of mine\.deep; it takes depth"
    with pytest.raises(PolicyError, match=refused):
        HookPolicy.from_yaml_text(text, registry=mine)  # refused at load, at its line: the model is mine's
    assert HookPolicy.from_yaml_text(text).registry is REGISTRY  # the process's has no mine.deep: kept as written

    policy = HookPolicy.from_yaml_text(text.replace("depht", "depth"), registry=mine)
    assert policy.registry is mine
    assert policy.actions("after_call")[0].options == Depth(depth=2)
    with attach(sd, policy):  # no registry= : the policy's
        sd(**call_kwargs("sd", steps=1))
    assert seen == [2]
    with attach(sd, "default", registry=mine) as attachment:  # a preset loaded for it finds its actions there
        assert attachment.policy.registry is mine


def test_a_copy_of_a_policy_deep_or_not_keeps_its_registry():
    import copy

    mine = ActionRegistry()
    policy = HookPolicy.preset("default", registry=mine)
    copies = [copy.copy(policy), copy.deepcopy(policy), policy.model_copy(deep=True)]
    assert [c.registry is mine for c in copies] == [True, True, True]


def test_a_policy_loader_refuses_a_registry_that_is_not_one():
    with pytest.raises(InvalidArgumentError, match=r"registry must be a ddo_hooks\.actions\.registry\.ActionRegistry"):
        HookPolicy.preset("default", registry="mine")
