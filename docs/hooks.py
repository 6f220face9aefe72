"""mkdocs hooks: the reference pages generated from the models, and the published JSON Schemas.

A page asks for a generated section with a marker line of its own, its arguments after its name
(:func:`generated`):

* ``<!-- generated: policy-reference -->``: every field of :class:`ddo_hooks.HookPolicy`, from
  ``HookPolicy.model_json_schema()``;
* ``<!-- generated: report-reference ROUTE ... -->``: every field of the report routes named, from
  ``ddo_hooks.reports.parse.report_json_schema()`` (no route named: every route), so that each page
  of the report reference holds the routes of one family;
* ``<!-- generated: ddo-report-reference ROUTE ... -->``: the same for DDO's own report shape (the
  routes of ``ddo_hooks.reports.ddo.routes.DDO_REPORT_TYPES``), from the same schema;
* ``<!-- generated: ddo-release-statuses -->`` and ``<!-- generated: ddo-release-fields -->``: the
  mapping of DDO's release report to ddo_hooks', from :mod:`ddo_hooks.reports.ddo.mapping`;
* ``<!-- generated: boundary-table -->`` and ``<!-- generated: refusal-table -->``: the boundary
  names and the refusal reason codes, from :mod:`ddo_hooks.boundaries`;
* ``<!-- generated: action-table -->``: each built-in action, its options model, its report routes
  and its tracker component, from :data:`ddo_hooks.actions.BUILT_IN`;
* ``<!-- generated: renamed-table -->``: every old name and what it became, from
  :data:`ddo_hooks._moved.RENAMED`.

Each model of the schema becomes a section (a table of its fields: key, type, default and
description), reached from the top through the key paths a YAML or JSON document uses; a model
written inline in a ``oneOf`` (each built-in action's entry of a policy) too, under its title. Types and
descriptions come from the JSON Schema; a default the schema leaves out (a ``default_factory``)
comes from the pydantic field itself. Nothing is hand-copied, so the pages follow the models.

The checked-in schemas (``ddo_hooks/schemas/*.json``) are published with the site under
``schemas/``, so pages can link to them.

Table cells break only between words (:func:`on_page_content`): a name of code breaks only if it
is longer than :data:`WHOLE_NAME` characters, after ``_ . / = , -`` between two of its words, and a
word with a hyphen stays whole. ``tests/test_docs_widths.py`` measures every page's tables with
the same pieces (:func:`name_pieces`).

``tests/test_docs.py`` imports this file to check that every field is rendered.
"""

from __future__ import annotations

import html
import json
import re
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

__all__ = [
    "GENERATORS",
    "action_table",
    "WHOLE_NAME",
    "ddo_release_fields",
    "ddo_release_statuses",
    "ddo_report_reference",
    "generated",
    "name_pieces",
    "policy_reference",
    "renamed_table",
    "render_models",
    "report_reference",
]

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "ddo_hooks" / "schemas"
MARKER = re.compile(r"^<!-- generated: ([a-z-]+)((?: [\w-]+)*) -->$", re.MULTILINE)
_ROLE = re.compile(r":(?:meth|func|class|data|attr|mod|obj):`~?([^`]+)`")
_LONGEST_PATTERN_IN_A_CELL = 32  # a longer pattern (a size's, 60 characters) is written under its table


# -- rendering --------------------------------------------------------------------------------


def _models_of(roots: Iterable[type[BaseModel]]) -> dict[str, type[BaseModel]]:
    """Every pydantic model reachable from ``roots`` through field annotations, by class name."""
    found: dict[str, type[BaseModel]] = {}
    stack = list(roots)
    while stack:
        model = stack.pop()
        if model.__name__ in found:
            continue
        found[model.__name__] = model
        for field in model.model_fields.values():
            annotations = [field.annotation]
            while annotations:
                annotation = annotations.pop()
                if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                    stack.append(annotation)
                annotations.extend(typing.get_args(annotation))
    return found


def _text(description: str | None) -> str:
    """A docstring as one line of Markdown for a table cell."""
    if not description:
        return ""
    text = _ROLE.sub(lambda m: f"``{m.group(1).rsplit('.', 1)[-1]}``", description)
    text = text.replace("``", "`")
    text = re.sub(r"\s*\n\s*", " ", text.strip())
    return _escape_pipes(text)


def _escape_pipes(text: str) -> str:
    """Escape ``|`` outside code spans for a Markdown table cell (the table keeps those inside)."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(parts))


def _code(value: str) -> str:
    return f"`{value}`"


def _flow(value: Any) -> str:
    """A value as YAML flow text, as a policy file would spell it."""
    if value is None:
        return "null"
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


class _Renderer:
    def __init__(self, schema: dict[str, Any], models: dict[str, type[BaseModel]], anchor_prefix: str) -> None:
        self.schema = schema
        self.defs: dict[str, dict[str, Any]] = dict(schema.get("$defs", {}))
        self.models = models
        self.prefix = anchor_prefix
        self.paths: dict[str, list[str]] = {}
        self.order: list[str] = []
        self.patterns: list[str] = []  # the long patterns of the row being rendered, written under the table

    # The sections: models in breadth-first order from the roots, each with its key paths.
    def walk(self, roots: list[tuple[str, str]]) -> None:
        queue = list(roots)
        for name, path in roots:
            self.paths.setdefault(name, []).append(path)
        while queue:
            name, _ = queue.pop(0)
            if name in self.order:
                continue
            self.order.append(name)
            node = self._model(name)
            for key, sub in node.get("properties", {}).items():
                for child, suffix in self._children(sub):
                    for parent_path in self.paths[name]:
                        child_path = f"{parent_path}.{key}{suffix}" if parent_path else f"{key}{suffix}"
                        if child_path not in self.paths.setdefault(child, []):
                            self.paths[child].append(child_path)
                    queue.append((child, ""))

    def _model(self, name: str) -> dict[str, Any]:
        return self.schema if name == self.schema.get("title") and "properties" in self.schema else self.defs[name]

    def _children(self, node: dict[str, Any], suffix: str = "") -> list[tuple[str, str]]:
        """Models (with properties) that a property's schema refers to, with the path suffix."""
        found: list[tuple[str, str]] = []
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if "properties" in self.defs.get(name, {}):
                found.append((name, suffix))
            elif name in self.defs:  # a union of models (an action's entry): its members
                found += self._children(self.defs[name], suffix)
        for option in node.get("anyOf", []) + node.get("oneOf", []):
            if "properties" in option and "title" in option:  # a model written inline: a section of its own
                self.defs.setdefault(option["title"], option)
                found.append((option["title"], suffix))
            else:
                found += self._children(option, suffix)
        if isinstance(node.get("items"), dict):
            found += self._children(node["items"], f"{suffix}[]")
        if isinstance(node.get("additionalProperties"), dict):
            found += self._children(node["additionalProperties"], f"{suffix}.<key>")
        return found

    def anchor(self, name: str) -> str:
        return f"{self.prefix}-{name.lower()}"

    def type_of(self, node: dict[str, Any]) -> str:
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if "properties" not in self.defs.get(name, {}):
                return "any JSON value" if not self.defs.get(name) else self.type_of(self.defs[name])
            return f"[{name}](#{self.anchor(name)})"
        if "properties" in node and node.get("title") in self.defs:
            return f"[{node['title']}](#{self.anchor(node['title'])})"
        if "const" in node:
            return f"{_code(json.dumps(node['const']))} (constant)"
        if "enum" in node:
            return "one of " + ", ".join(_code(str(v)) for v in node["enum"])
        options = node.get("anyOf") or node.get("oneOf")
        if options:
            return " or ".join(self.type_of(option) for option in options)
        kind = node.get("type")
        if kind is None:
            return "any JSON value"
        text = {"integer": "integer", "number": "number", "boolean": "boolean", "null": "null"}.get(kind)
        if kind in ("integer", "number"):
            if "minimum" in node:
                text += f" ≥ {node['minimum']}"
            if "maximum" in node:
                text += f" ≤ {node['maximum']}"
        elif kind == "string":
            text = "string"
            if "minLength" in node:
                text = "non-empty string" if node["minLength"] == 1 else f"string of ≥ {node['minLength']} characters"
            if "pattern" in node:
                pattern = node["pattern"]
                if len(pattern) > _LONGEST_PATTERN_IN_A_CELL:
                    self.patterns.append(pattern)
                    text += " matching the pattern under the table"
                else:
                    text += f" matching {_code(pattern)}"
        elif kind == "array":
            items = node.get("items")
            text = "list of " + (self.type_of(items) if isinstance(items, dict) else "values")
        elif kind == "object":
            values = node.get("additionalProperties")
            text = f"mapping of string to {self.type_of(values)}" if isinstance(values, dict) else "mapping"
        return text or str(kind)

    def default_of(self, model_name: str, key: str, node: dict[str, Any], required: bool) -> str:
        if required:
            return "required"
        if "default" in node:
            return _code(_flow(node["default"]))
        model = self.models.get(model_name)
        field = model.model_fields.get(key) if model else None
        if field is not None and getattr(field.json_schema_extra, "__name__", "") == "_not_null_in_schema":
            return "left out"  # a key of DDO's shape written only sometimes, never null (reports/ddo/base.py)
        if field is not None and field.default_factory is not None:
            value = field.default_factory()  # type: ignore[call-arg]
            if isinstance(value, BaseModel):
                children = self._children(node)
                if children:
                    return f"[its defaults](#{self.anchor(children[0][0])})"
                value = value.model_dump(mode="json")
            return _code(_flow(value))
        return "none"

    def where(self, name: str) -> str:
        """The key paths of a model, siblings folded: ``boundaries.{before_transformer,before_vae}.actions[]``.

        Paths that differ in one key only (always the same one) are one path with the keys in braces.
        """
        groups: list[tuple[list[str], int | None, list[str]]] = []  # the keys, the one that varies, its values
        for path in self.paths.get(name, []):
            keys = path.split(".")
            for index, (first, varies, values) in enumerate(groups):
                differ = [i for i, (a, b) in enumerate(zip(first, keys, strict=False)) if a != b]
                if len(first) == len(keys) and len(differ) == 1 and varies in (None, differ[0]):
                    groups[index] = (first, differ[0], [*values, keys[differ[0]]])
                    break
            else:
                groups.append((keys, None, []))
        shown = []
        for keys, varies, values in groups:
            if varies is not None:
                keys = [*keys[:varies], "{" + ",".join([keys[varies], *values]) + "}", *keys[varies + 1 :]]
            shown.append(".".join(keys))
        return ", ".join(_code(s) for s in shown if s)

    def section(self, name: str, level: int, title: str | None = None) -> str:
        node = self._model(name)
        where = self.where(name)
        heading = title or (f"{where} ({name})" if where else name)
        lines = [f"{'#' * level} {heading} {{#{self.anchor(name)}}}", ""]
        if node.get("description"):
            lines += [_text(node["description"]), ""]
        lines += ["| Key | Type | Default | Description |", "|---|---|---|---|"]
        required = set(node.get("required", []))
        patterns = []
        for key, sub in node.get("properties", {}).items():
            description = sub.get("description") or self._ref_description(sub)
            self.patterns = []
            lines.append(
                f"| {_code(key)} | {_escape_pipes(self.type_of(sub))} "
                f"| {self.default_of(name, key, sub, key in required)} "
                f"| {_text(description)} |"
            )
            patterns += [f"The pattern of {_code(key)}: {_code(pattern)}." for pattern in self.patterns]
        lines.append("")
        if patterns:
            lines += [" ".join(patterns), ""]
        return "\n".join(lines)

    def _ref_description(self, node: dict[str, Any]) -> str | None:
        for child, _ in self._children(node):
            return self.defs[child].get("description")
        return None


def render_models(
    schema: dict[str, Any],
    roots: list[type[BaseModel]],
    *,
    anchor_prefix: str,
    level: int = 3,
    titles: dict[str, str] | None = None,
) -> str:
    """Render every model of ``schema`` reachable from ``roots`` as Markdown sections.

    Args:
        schema: A pydantic JSON Schema (``model_json_schema()`` or a ``TypeAdapter``'s).
        roots: The top-level models (the schema's own model, or each member of a union).
        anchor_prefix: Prefix of the section anchors, unique per page.
        level: The heading level of each section.
        titles: Headings for some models (by class name) instead of their key paths.
    """
    renderer = _Renderer(schema, _models_of(roots), anchor_prefix)
    renderer.walk([(root.__name__, "") for root in roots])
    titles = titles or {}
    return "\n".join(renderer.section(name, level, titles.get(name)) for name in renderer.order)


def policy_reference() -> str:
    """Every field of a hook policy, from ``HookPolicy.model_json_schema()``: each built-in action's options too."""
    from ddo_hooks.policy.model import HookPolicy

    schema = HookPolicy.model_json_schema()
    titles = {"HookPolicy": "Top level (HookPolicy)"}
    for entry in schema["$defs"]["ActionSpec"]["oneOf"]:
        name = entry["properties"]["name"].get("const")
        what = f"An entry of `{name}`" if name else "An entry of another action"
        titles[entry["title"]] = f"{what} ({entry['title']})"
    return render_models(schema, [HookPolicy], anchor_prefix="policy", titles=titles)


def _route(model: type[BaseModel]) -> str:
    return model.model_fields["route"].default


def _ddo_route(model: type[BaseModel]) -> str:
    return typing.get_args(model.model_fields["route"].annotation)[0]


def _route_sections(
    models: Iterable[type[BaseModel]], route_of: Callable[[type[BaseModel]], str], title: str, routes: tuple[str, ...]
) -> str:
    """Every field of the routes named of ``models`` (all of them where none is), one route after the other."""
    from ddo_hooks.reports.parse import report_json_schema

    found = {route_of(model): model for model in models}
    unknown = [route for route in routes if route not in found]
    if unknown:
        raise ValueError(f"no report route {unknown} (known: {', '.join(found)})")
    schema = report_json_schema()
    sections = []
    for route, model in found.items():
        if not routes or route in routes:  # each from its top
            heading = {model.__name__: f"{title} `{route}` ({model.__name__})"}
            sections.append(render_models(schema, [model], anchor_prefix="report", titles=heading))
    return "\n".join(sections)


def report_reference(*routes: str) -> str:
    """Every field of the report routes named (every route where none is), from ``report_json_schema()``."""
    from ddo_hooks.reports.parse import REPORT_TYPES

    return _route_sections(REPORT_TYPES, _route, "Route", routes)


def ddo_report_reference(*routes: str) -> str:
    """Every field of the routes named of DDO's own shape (every route ddo_hooks reads where none is)."""
    from ddo_hooks.reports.ddo.routes import DDO_REPORT_TYPES

    return _route_sections(DDO_REPORT_TYPES, _ddo_route, "DDO's route", routes)


def _cell(value: str | None) -> str:
    if value is None:
        return "*none*"
    return ", ".join(_code(part.strip()) for part in value.split(","))


def ddo_release_statuses() -> str:
    """DDO's release statuses beside ddo_hooks' status and no-op reason, from ``DDO_RELEASE_STATUSES``."""
    from ddo_hooks.reports.ddo.mapping import DDO_RELEASE_STATUSES, UNMATCHED_NOOP_REASONS

    rows = [
        f"| {_code(ddo)} | {_code(status)} | {_cell(reason)} | {_escape_pipes(note)} |"
        for ddo, (status, reason, note) in DDO_RELEASE_STATUSES.items()
    ]
    rows += [
        f"| *none* | `noop` | {_code(reason)} | {_escape_pipes(note)} |"
        for reason, note in UNMATCHED_NOOP_REASONS.items()
    ]
    head = ["| DDO `status` | ddo_hooks `status` | ddo_hooks `noop_reason` | How far they agree |", "|---|---|---|---|"]
    return "\n".join([*head, *rows]) + "\n"


def ddo_release_fields() -> str:
    """Every field of DDO's release report and of ddo_hooks', paired, from ``DDO_RELEASE_FIELDS``."""
    from ddo_hooks.reports.ddo.mapping import DDO_RELEASE_FIELDS

    rows = [f"| {_cell(p.ddo)} | {_cell(p.ours)} | {_escape_pipes(p.note)} |" for p in DDO_RELEASE_FIELDS]
    head = ["| DDO's field | ddo_hooks' field | Correspondence |", "|---|---|---|"]
    return "\n".join([*head, *rows]) + "\n"


def boundary_table() -> str:
    """The boundaries in firing order, from :data:`ddo_hooks.boundaries.BOUNDARY_NOTES`."""
    from ddo_hooks.boundaries import BOUNDARIES, BOUNDARY_NOTES

    rows = [f"| `{name}` | {BOUNDARY_NOTES[name][0]} | {BOUNDARY_NOTES[name][1]} |" for name in BOUNDARIES]
    return "\n".join(["| Boundary | Fires | What it can give back |", "|---|---|---|", *rows]) + "\n"


def refusal_table() -> str:
    """The refusal reason codes, from :data:`ddo_hooks.boundaries.REFUSAL_REASONS`."""
    from ddo_hooks.boundaries import REFUSAL_REASONS

    rows = [f"| `{code}` | {_escape_pipes(when)} |" for code, when in REFUSAL_REASONS.items()]
    return "\n".join(["| Reason code | When |", "|---|---|", *rows]) + "\n"


def action_table() -> str:
    """Each built-in action, its options model, report routes and tracker component, from ``actions.BUILT_IN``."""
    from ddo_hooks import actions

    rows = []
    for action in actions.BUILT_IN:
        if action.options is None:
            options = "none: its options as written"
        else:
            options = _code(action.options.__name__)
            if action.defaults is not None:  # the first line of its docstring names the section
                section = (action.defaults.__doc__ or "").splitlines()[0].rstrip(".").replace("``", "`")
                options += f" (defaults: {section[0].lower()}{section[1:]})"
        routes = " or ".join(_code(route) for route in action.routes)
        rows.append(f"| `{action.name}` | {options} | {routes}, under `{action.component_prefix}_<boundary>` |")
    head = ["| Action | Options model | Its reports: route, component |", "|---|---|---|"]
    return "\n".join([*head, *rows]) + "\n"


def renamed_table() -> str:
    """Every old name and what it became, from :data:`ddo_hooks._moved.RENAMED`."""
    from ddo_hooks._moved import RENAMED

    kinds = {"module": " (module)", "name": "", "attribute": " (attribute)"}
    rows = [
        f"| `{old}`{kinds[renamed.kind]} | `{renamed.new}` | {_escape_pipes(renamed.why)} |"
        for old, renamed in RENAMED.items()
    ]
    return "\n".join(["| Old name | New name | Why |", "|---|---|---|", *rows]) + "\n"


def pipeline_matrix() -> str:
    """Every pipeline class of the installed diffusers with its verdict (``docs/pipeline_matrix.py``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ddo_pipeline_matrix", Path(__file__).with_name("pipeline_matrix.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.matrix_markdown()


GENERATORS: dict[str, Callable[..., str]] = {
    "policy-reference": policy_reference,
    "report-reference": report_reference,
    "ddo-report-reference": ddo_report_reference,
    "ddo-release-statuses": ddo_release_statuses,
    "ddo-release-fields": ddo_release_fields,
    "boundary-table": boundary_table,
    "refusal-table": refusal_table,
    "action-table": action_table,
    "renamed-table": renamed_table,
    "pipeline-matrix": pipeline_matrix,
}


# -- mkdocs events ----------------------------------------------------------------------------


def generated(match: re.Match[str]) -> str:
    """The Markdown of one marker line (a :data:`MARKER` match): its generator, given the marker's arguments."""
    name, arguments = match.group(1), match.group(2).split()
    if name not in GENERATORS:
        raise ValueError(f"unknown generated section {name!r} (known: {', '.join(GENERATORS)})")
    return GENERATORS[name](*arguments)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each ``<!-- generated: NAME ARGUMENT ... -->`` marker line with the generated Markdown."""
    try:
        return MARKER.sub(generated, markdown)
    except ValueError as error:
        raise ValueError(f"{page.file.src_uri}: {error}") from error


# -- table cells: names break between their words, never mid-word ----------------------------

WHOLE_NAME = 24
"""A name (a run of code without spaces) of a table cell this long or shorter never breaks."""

_PATTERN = re.compile(r"[\\^$]")
_NAME_BREAK = re.compile(r"(?<=\w[_./=,\-])(?=\w)")
# Where a browser may break a line on its own: after a hyphen or a dash in a word, and in code at
# brackets, operators and the like (``^[a-z] / [a-z]``); a piece that holds one is kept whole.
_DASHED = re.compile(r"\S[\-\u2010\u2013\u2014]\S")
_CODE_BREAKS_ITSELF = re.compile(r"[^\w\s.,:;=/'\"]")
_CELL = re.compile(r"(<t[dh](?:\s[^>]*)?>)(.*?)(</t[dh]>)", re.DOTALL)
_CELL_PART = re.compile(r"<code>([^<]*)</code>|(<[^>]+>)|([^<]+)")


def name_pieces(name: str) -> list[str]:
    """The pieces a name of a table cell may break into: itself, or, if it is long, its words.

    A name of up to :data:`WHOLE_NAME` characters stays whole (``before_transformer``,
    ``low_cpu_mem_usage=True``, ``lowest-peak``); a longer one (a key path, one of DDO's long
    field names) breaks after ``_ . / = , -`` where a word character stands on both sides. A
    pattern (it holds a backslash, ``^`` or ``$``) is no name and stays whole: ``[a-z]`` is no
    place to break. ``tests/test_docs_widths.py`` measures the tables with the same pieces.
    """
    if len(html.unescape(name)) <= WHOLE_NAME or _PATTERN.search(name):
        return [name]
    return _NAME_BREAK.split(name)


def _whole(word: str, breaks_itself: re.Pattern[str] = _DASHED) -> str:
    """A word (or piece of code) a browser could break by itself, kept whole (``.ddo-whole``: extra.css)."""
    return f'<span class="ddo-whole">{word}</span>' if breaks_itself.search(html.unescape(word)) else word


def _cell_code(code: str) -> str:
    return "".join(
        part if part.isspace() or not part else "<wbr>".join(_whole(p, _CODE_BREAKS_ITSELF) for p in name_pieces(part))
        for part in re.split(r"(\s+)", code)
    )


def _cell_text(text: str) -> str:
    return "".join(_whole(part) if part and not part.isspace() else part for part in re.split(r"(\s+)", text))


def _table_cell(html_cell: str) -> str:
    def part(match: re.Match[str]) -> str:
        code, tag, text = match.groups()
        if code is not None:
            return f"<code>{_cell_code(code)}</code>"
        return tag if tag is not None else _cell_text(text)

    return _CELL_PART.sub(part, html_cell)


def on_page_content(html_page: str, page: Any, config: Any, files: Any) -> str:
    """Table cells break only between words: long names get ``<wbr>`` between theirs, dashed words stay whole.

    A name in a cell's code breaks only as :func:`name_pieces` says (a ``<wbr>`` after each of
    its breaking points, outside tags and entities). What a browser would break on its own, a word
    with a hyphen or a dash (``lowest- / peak``) or a piece of code with a bracket or an operator
    (``^[a-z] / [a-z]``), is wrapped in ``<span class="ddo-whole">`` (``white-space: nowrap`` in
    ``docs/stylesheets/extra.css``).
    """
    return _CELL.sub(lambda m: m.group(1) + _table_cell(m.group(2)) + m.group(3), html_page)


def on_files(files: Any, config: Any) -> Any:
    """Publish the checked-in JSON Schemas under ``schemas/``."""
    from mkdocs.structure.files import File

    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        files.append(File.generated(config, f"schemas/{path.name}", abs_src_path=str(path)))
    return files
