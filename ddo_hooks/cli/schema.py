"""The JSON Schemas checked into ``ddo_hooks/schemas/`` (the ``schema`` command), and their writer.

Regenerate after changing a model: ``python -m ddo_hooks.cli.schema``. A test fails when the
checked-in files drift from the models.

Examples:
    >>> generated_schemas()["ddo-report.schema.json"]["title"]
    'DDOReport'
    >>> SCHEMA_FILES["policy"]
    'hook-policy.schema.json'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_DIR", "SCHEMA_FILES", "generated_schema", "generated_schemas", "render", "write_schemas"]

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
"""The folder of the checked-in schema files (package data)."""

SCHEMA_FILES = {
    "policy": "hook-policy.schema.json",
    "report": "ddo-report.schema.json",
    "record": "ddo-record.schema.json",
}
"""Each schema the ``schema`` command prints, and the file it is checked in as."""


def generated_schema(which: str) -> dict[str, Any]:
    """The schema the models generate now: ``"policy"``, ``"report"`` or ``"record"`` (a line of a report file)."""
    if which == "policy":
        from ddo_hooks.policy.model import policy_json_schema

        return policy_json_schema()
    if which == "record":
        from ddo_hooks.reports.envelope import record_json_schema

        return record_json_schema()
    from ddo_hooks.reports.parse import report_json_schema

    return report_json_schema()


def generated_schemas() -> dict[str, dict[str, Any]]:
    """Every schema file name mapped to the schema the models generate now."""
    return {file: generated_schema(which) for which, file in SCHEMA_FILES.items()}


def render(schema: dict[str, Any]) -> str:
    """The exact text a schema file holds."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Write every generated schema into ``directory`` and return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, schema in generated_schemas().items():
        path = directory / name
        path.write_text(render(schema), encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_schemas():
        print(written)
