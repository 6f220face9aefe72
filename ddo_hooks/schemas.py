"""The JSON Schemas checked into ``ddo_hooks/schemas/``, and the function that writes them.

Regenerate after changing a model: ``python -m ddo_hooks.schemas``. A test fails when the
checked-in files drift from the models.

Examples:
    >>> generated_schemas()["ddo-report.schema.json"]["title"]
    'DDOReport'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddo_hooks.policy import policy_json_schema
from ddo_hooks.reports import report_json_schema

__all__ = ["SCHEMA_DIR", "generated_schemas", "render", "write_schemas"]

SCHEMA_DIR = Path(__file__).with_name("schemas")


def generated_schemas() -> dict[str, dict[str, Any]]:
    """Every schema file name mapped to the schema the models generate now."""
    return {"ddo-report.schema.json": report_json_schema(), "hook-policy.schema.json": policy_json_schema()}


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
