"""The options contract of an action: what the policy writes reaches the action, and only that, every call.

An action without an options model gets a deep copy of what the policy writes, each call; a built-in
replaced with ``replace=True`` comes back whole with ``unregister_action``; an options field with an
alias is set under either spelling; and a refused option says its choices and types in the policy's
words, never Python's (``typing.Literal[...]``, ``<class 'NoneType'>``).
"""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import Field

from ddo_hooks import HookPolicy, attach, register_action, unregister_action
from ddo_hooks.actions.contract import ActionOptions
from ddo_hooks.actions.host_cache_release import HostCacheReleaseOptions, release_section
from ddo_hooks.actions.registry import options_model, registered
from ddo_hooks.errors import InvalidArgumentError, PolicyError
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs


@pytest.fixture
def plugged():
    names = []

    def plug(name, function, **kwargs):
        register_action(name, function, **kwargs)
        names.append(name)

    yield plug
    for name in names:
        unregister_action(name)


def after_call(*actions) -> HookPolicy:
    return HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"actions": list(actions)}}})


def test_an_action_without_a_model_gets_a_fresh_deep_copy_of_its_options_each_call(plugged):
    seen = []

    def count(ctx):  # changes what it was given, deep down
        seen.append((ctx.options["nested"]["n"], list(ctx.options["nested"]["items"])))
        ctx.options["nested"]["n"] += 1
        ctx.options["nested"]["items"].append("x")

    plugged("my_pkg.count", count)
    written = {"nested": {"n": 0, "items": []}}
    policy = after_call({"name": "my_pkg.count", "options": written})
    pipe = build_pipeline("sd")
    with attach(pipe, policy):
        pipe(**call_kwargs("sd"))
        pipe(**call_kwargs("sd"))
    assert seen == [(0, []), (0, [])]
    assert policy.boundary("after_call").actions[0].options == {"nested": {"n": 0, "items": []}}
    assert policy.actions("after_call")[0].options == {"nested": {"n": 0, "items": []}}
    assert written == {"nested": {"n": 0, "items": []}}


def test_a_built_in_replaced_with_replace_comes_back_whole_with_unregister_action():
    built_in = registered("host_cache_release")
    register_action("host_cache_release", lambda ctx: None, replace=True)
    try:
        assert registered("host_cache_release") is not built_in
    finally:
        unregister_action("host_cache_release")
    assert registered("host_cache_release") is built_in
    assert (options_model("host_cache_release"), built_in.defaults) == (HostCacheReleaseOptions, release_section)
    with pytest.raises(InvalidArgumentError, match="the built-in action 'host_cache_release' cannot be unregistered"):
        unregister_action("host_cache_release")  # not replaced now: nothing to restore


class Window(ActionOptions):
    from_: int = Field(0, alias="from")
    """The first step."""


@pytest.mark.parametrize("key", ["from", "from_"])
def test_an_option_with_an_alias_is_set_under_either_spelling(plugged, key):
    plugged("my_pkg.window", lambda ctx: None, options=Window)
    assert after_call({"name": "my_pkg.window", "options": {key: 3}}).actions("after_call")[0].options.from_ == 3


def test_an_option_given_under_both_spellings_and_an_unknown_one_name_the_alias(plugged):
    plugged("my_pkg.window", lambda ctx: None, options=Window)
    with pytest.raises(PolicyError, match=r"options\.from_: given twice, as 'from' and as 'from_'; give it once"):
        after_call({"name": "my_pkg.window", "options": {"from": 1, "from_": 2}})
    with pytest.raises(PolicyError, match=r"options\.form: unknown option of my_pkg\.window; it takes from$"):
        after_call({"name": "my_pkg.window", "options": {"form": 1}})


class Choosy(ActionOptions):
    mode: Literal["fast", "slow"] | None = None
    """How."""
    limit: Literal["auto"] | int = "auto"
    """How many."""


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"mode": "medium"}, "options.mode: 'medium' is not one of fast, slow, null"),
        ({"mode": "fsat"}, "options.mode: 'fsat' is not one of fast, slow, null; did you mean 'fast'?"),
        ({"limit": "many"}, "options.limit: 'many' is not 'auto' or an integer"),
    ],
)
def test_a_refused_option_names_its_choices_and_types_in_the_policys_words(plugged, options, said):
    plugged("my_pkg.choosy", lambda ctx: None, options=Choosy)
    with pytest.raises(PolicyError) as raised:
        after_call({"name": "my_pkg.choosy", "options": options})
    message = str(raised.value)
    assert message.endswith(said), message
    assert "typing." not in message
    assert "<class" not in message


def test_every_problem_of_an_actions_options_is_said_at_once_where_it_loads_and_where_it_is_bound(plugged):
    written = {"name": "my_pkg.choosy", "options": {"mode": "medium", "limit": "many", "extra": 1, "more": 2}}
    said = [
        "options.mode: 'medium' is not one of fast, slow, null",
        "options.limit: 'many' is not 'auto' or an integer",
        "options.extra: unknown option of my_pkg.choosy",
        "options.more: unknown option of my_pkg.choosy",
    ]
    policy = after_call(written)  # no action of that name yet: its options are kept as written
    plugged("my_pkg.choosy", lambda ctx: None, options=Choosy)
    with pytest.raises(PolicyError) as bound:  # bound at attach: said as loading would have said it
        attach(build_pipeline("sd"), policy)
    with pytest.raises(PolicyError) as loaded:
        after_call(written)
    for raised in (bound, loaded):
        lines = str(raised.value).splitlines()
        assert sorted(line.split("actions[0].", 1)[1].split(";")[0] for line in lines) == sorted(
            one.split(";")[0] for one in said
        ), lines
