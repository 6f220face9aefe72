"""The JSON Schema checked into the package matches the models that generate it."""

from __future__ import annotations

import json

import pytest

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
