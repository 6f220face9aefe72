"""The JSON Schemas checked into the package match the models that generate them; the policy's lists every option."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from ddo_hooks.actions import BUILT_IN, names
from ddo_hooks.cli.schema import SCHEMA_DIR, generated_schemas, render, write_schemas
from ddo_hooks.reports.parse import report_json_schema

REGENERATE = "the checked-in schema drifted from the models: run `python -m ddo_hooks.cli.schema` and commit the result"


def test_the_checked_in_report_schema_equals_the_generated_one():
    checked_in = (SCHEMA_DIR / "ddo-report.schema.json").read_text(encoding="utf-8")
    assert checked_in == render(report_json_schema()), REGENERATE


@pytest.mark.parametrize("name", sorted(generated_schemas()))
def test_every_generated_schema_is_checked_in_unchanged(name: str):
    path = SCHEMA_DIR / name
    assert path.is_file(), REGENERATE
    assert path.read_text(encoding="utf-8") == render(generated_schemas()[name]), REGENERATE


def test_no_stale_schema_is_checked_in():
    checked_in = {path.name for path in SCHEMA_DIR.glob("*.json")}
    assert checked_in <= set(generated_schemas()), REGENERATE


def test_write_schemas_writes_exactly_the_rendered_text(tmp_path):
    paths = write_schemas(tmp_path / "schemas")
    generated = generated_schemas()
    assert sorted(p.name for p in paths) == sorted(generated)
    for path in paths:
        assert path.read_text(encoding="utf-8") == render(generated[path.name])


def test_rendering_is_stable_sorted_json_ending_in_a_newline():
    text = render({"b": 1, "a": [2]})
    assert text == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n'
    assert json.loads(text) == {"a": [2], "b": 1}


def test_the_report_schema_is_a_draft_2020_12_schema_titled_ddo_report():
    schema = report_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "DDOReport"


# -- the policy's schema: every built-in action's options ---------------------------------------------

POLICY_SCHEMA = json.loads((SCHEMA_DIR / "hook-policy.schema.json").read_text(encoding="utf-8"))
ROOT = SCHEMA_DIR.parent.parent


def policy_problems(policy: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(POLICY_SCHEMA)
    return sorted(error.message for error in validator.iter_errors(policy))


def with_action(action: dict) -> dict:
    return {"version": 1, "boundaries": {"after_call": {"actions": [action]}}}


@pytest.mark.parametrize(
    "path",
    [*sorted((ROOT / "ddo_hooks" / "policy" / "presets").glob("*.yaml")), *sorted((ROOT / "examples").glob("*.yaml"))],
    ids=lambda p: p.name,
)
def test_every_preset_and_example_policy_fits_the_schema(path):
    assert policy_problems(yaml.safe_load(path.read_text(encoding="utf-8"))) == []


def test_the_schema_lists_each_built_in_actions_options_one_entry_per_name():
    entries = POLICY_SCHEMA["$defs"]["ActionSpec"]["oneOf"]
    named = {entry["properties"]["name"].get("const"): entry for entry in entries}
    assert list(named) == [*names(), None]  # each built-in action by its name, then any other action
    for action in BUILT_IN:
        options = named[action.name]["properties"]["options"]
        if action.options is None:
            assert options["type"] == "object"
            continue
        model = POLICY_SCHEMA["$defs"][options["$ref"].rpartition("/")[2]]
        assert model["additionalProperties"] is False
        assert sorted(model.get("properties", {})) == sorted(action.options.model_fields)
    assert set(named["release_done_components"]["properties"]["options"]["$ref"].split("/")[-1:]) == {
        "ReleaseDoneComponentsOptions"
    }
    done = POLICY_SCHEMA["$defs"]["ReleaseDoneComponentsOptions"]["properties"]
    assert {"components", "stable_files", "evict"} <= set(done)


def test_an_editor_refuses_a_typo_in_a_built_in_actions_options_and_takes_your_own_actions_options():
    assert policy_problems(with_action({"name": "release_done_components", "options": {"stable_files": True}})) == []
    assert policy_problems(with_action({"name": "release_done_components", "options": {"stable_filez": True}}))
    assert policy_problems(with_action({"name": "host_cache_release", "options": {"collect": "ful"}}))
    assert policy_problems(with_action({"name": "stage_done_components", "options": {"now": True}}))
    assert policy_problems(with_action({"name": "malloc_trim", "options": {"anything": [1]}}))  # it takes none
    assert policy_problems(with_action({"name": "my_pkg.flush", "options": {"stable_filez": True}})) == []
    assert policy_problems(with_action("release_done_components")) == []
