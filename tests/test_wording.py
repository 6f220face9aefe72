"""Messages in the project's words: an option of the wrong type, a bad action name, a UNet's boundary."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ddo_hooks import HookPolicy, InvalidArgumentError, PolicyError, attach, register_action, unregister_action
from ddo_hooks.actions.contract import ActionOptions
from ddo_hooks.testing.tiny_pipelines import build_pipeline


class Options(ActionOptions):
    label: str | None = None
    """A label."""
    count: int = 1
    """A count."""


@pytest.fixture
def action() -> Iterator[str]:
    register_action("tests.worded", options=Options)(lambda ctx: None)
    try:
        yield "tests.worded"
    finally:
        unregister_action("tests.worded")


def policy_error(text: str) -> str:
    with pytest.raises(PolicyError) as raised:
        HookPolicy.from_yaml_text(text, source="p.yaml")
    return str(raised.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("{label: [512, 1024]}", "label: expected a string, got a list"),
        ("{count: many}", "count: expected an integer, got 'many'"),
    ],
)
def test_a_custom_options_wrong_type_is_said_as_the_built_in_options_say_it(action, value, expected):
    message = policy_error(
        f"version: 1\nboundaries:\n  after_call:\n    actions: [{{name: {action}, options: {value}}}]\n"
    )
    assert message.endswith(f"boundaries.after_call.actions[0].options.{expected}")
    assert "Input should" not in message
    built_in = policy_error("version: 1\nrelease: {min_releasable_bytes: 0, trigger: [1]}\n")
    assert "release.trigger: a list is not one of" in built_in  # the same way of showing the value


def test_an_action_name_is_explained_in_words_not_by_its_pattern():
    with pytest.raises(InvalidArgumentError) as raised:
        register_action("Log Memory")(lambda ctx: None)
    assert str(raised.value) == (
        "'Log Memory' is not an action name; use a lowercase letter, then a-z, 0-9, '_', '.' or '-' "
        "(such as my_pkg.log_memory)"
    )
    message = policy_error("version: 1\nboundaries:\n  after_call: {actions: [Log_Memory]}\n")
    assert message.endswith("'Log_Memory' is not an action name; use a lowercase letter, then a-z, 0-9, '_', '.' or "
                            "'-' (such as my_pkg.log_memory)")  # fmt: skip
    assert "^[a-z]" not in message


@pytest.mark.parametrize("name", ["before_unet", "before_denoiser", "before_dit"])
def test_a_unets_boundary_is_before_transformer_whatever_it_is_called(name):
    message = policy_error(f"version: 1\nboundaries:\n  {name}: {{enabled: false}}\n")
    assert f"boundaries.{name}: unknown key; did you mean 'before_transformer' (the boundary before the denoiser" in (
        message
    )
    with attach(build_pipeline("sd")) as attachment, pytest.raises(InvalidArgumentError) as raised:
        attachment.boundary(name)
    assert f"unknown boundary {name!r}; did you mean 'before_transformer' (the boundary" in str(raised.value)


def test_a_misspelt_boundary_still_gets_the_nearest():
    assert "did you mean 'before_vae'?" in policy_error("version: 1\nboundaries:\n  before_vea: {enabled: false}\n")
