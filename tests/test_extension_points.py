"""Where a new built-in action, report route and preset go (docs/architecture.md) stays true.

Each has one table the rest follows: a built-in action is one module of ``ddo_hooks/actions/`` and its
line in ``BUILT_IN``; a report route's model in ``OurReport`` (``ROUTE_TYPES``); a preset's file in
``policy/presets/`` and its name in ``PRESETS``. These tests fail when one is added to one place and
not the other.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.file_modules import load_file

import ddo_hooks
import ddo_hooks.reports
from ddo_hooks.actions import BUILT_IN, by_name, names
from ddo_hooks.actions.contract import ActionOptions
from ddo_hooks.actions.registry import resolve_action, unregister_action
from ddo_hooks.boundaries import BOUNDARIES, component_name
from ddo_hooks.cli.main import main
from ddo_hooks.errors import InvalidArgumentError, PolicyError
from ddo_hooks.hooks.runner import bind_actions
from ddo_hooks.policy.model import PRESETS, HookPolicy, policy_json_schema, preset_file
from ddo_hooks.policy.parts import PinnedCopiesPolicy
from ddo_hooks.reports.base import RouteReport
from ddo_hooks.reports.ddo.routes import DDO_ROUTE_TYPES
from ddo_hooks.reports.parse import ROUTE_TYPES
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

ROOT = Path(ddo_hooks.__file__).parent.parent
PACKAGE = ROOT / "ddo_hooks"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def where_a_change_goes(subject: str) -> str:
    """The bullet of docs/architecture.md that says where ``subject`` goes, as one line."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    found = re.search(rf"^- {re.escape(subject)}:(.*?)(?=^- |^#|\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert found, f"docs/architecture.md says nothing of where {subject.lower()} goes"
    return " ".join(found.group(1).split())


def policy_with(action: Any) -> HookPolicy:
    return HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"actions": [action]}}})


# -- built-in actions ------------------------------------------------------------------------------


def test_the_docs_name_the_one_table_of_a_built_in_action():
    line = where_a_change_goes("A new built-in action")
    assert "`BUILT_IN`" in line, line
    assert "`actions/__init__.py`" in line, line
    assert re.search(r"^BUILT_IN: ", (PACKAGE / "actions" / "__init__.py").read_text(encoding="utf-8"), flags=re.M)


def test_every_built_in_action_is_one_module_that_declares_it_once():
    the_contract = {"__init__", "contract", "option_messages", "registry"}
    declared = {path.stem for path in (PACKAGE / "actions").glob("*.py")} - the_contract
    assert declared == set(names())
    for action in BUILT_IN:
        module = importlib.import_module(f"ddo_hooks.actions.{action.name}")
        assert module.ACTION is action
        assert action.name == module.NAME
        for part in (action.run, action.check, action.options, action.on_attach, action.on_detach):
            assert part is None or part.__module__ in (module.__name__, "ddo_hooks.actions.contract"), part
        assert set(action.routes) <= set(ROUTE_TYPES), action.routes
    prefixes = [action.component_prefix for action in BUILT_IN]
    assert len(set(prefixes)) == len(prefixes), prefixes  # two actions never record under one component


@pytest.mark.parametrize("name", names())
def test_a_built_in_action_is_registered_from_its_entry_and_stays(name: str):
    action, entry = resolve_action(name), by_name()[name]
    assert (action.run, action.check) == (entry.run, entry.check)
    assert action.component("after_call") == component_name(entry.component_prefix, "after_call")
    with pytest.raises(InvalidArgumentError, match="cannot be unregistered"):
        unregister_action(name)


@pytest.mark.parametrize("name", names())
def test_a_built_in_action_receives_its_options_model_or_its_options_as_written(name: str):
    model = by_name()[name].options
    (action,) = policy_with(name).actions("after_call")
    if model is None:
        assert action.options == {}
        return
    assert issubclass(model, ActionOptions)
    assert isinstance(action.options, model)
    for field, info in model.model_fields.items():
        assert info.description, f"{model.__name__}.{field} has no docstring (the policy page shows it)"
    refused = rf"options\.nope: unknown option of {name}; it takes {re.escape(model.takes())}"
    with pytest.raises(PolicyError, match=refused):
        policy_with({"name": name, "options": {"nope": 1}})


def test_attach_binds_every_boundarys_actions_in_one_pass_with_each_ones_check():
    pipe = build_pipeline("sd")
    actions = ["host_cache_release", "malloc_trim", "release_done_components", "stage_done_components"]
    policy = HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": {"actions": actions}}})
    bound = bind_actions(pipe, policy)
    assert tuple(bound) == BOUNDARIES
    assert [(spec.name, action.name) for spec, action in bound["after_call"]] == [(a, a) for a in actions]
    named = {"name": "release_done_components", "options": {"components": ["prior"]}}
    with pytest.raises(InvalidArgumentError, match=r"names 'prior', which this StableDiffusionPipeline does not hold"):
        bind_actions(pipe, policy_with(named))


THROWAWAY = textwrap.dedent(
    '''
    """The built-in action ``flush_caches``, a throwaway: one module, one option."""

    from ddo_hooks.actions.contract import ActionOptions, BoundaryContext, RegisteredAction
    from ddo_hooks.reports.boundary import ActionReport

    NAME = "flush_caches"


    class FlushCachesOptions(ActionOptions):
        depth: int = 1
        """How deep to flush."""


    def flush_caches(ctx: BoundaryContext[FlushCachesOptions]) -> ActionReport:
        """Flush nothing, as deep as the option says."""
        return ctx.action_report("executed", data={"depth": ctx.options.depth})


    ACTION = RegisteredAction(NAME, flush_caches, "flush", options=FlushCachesOptions, routes=("boundary_action",))
    '''
)


def test_a_built_in_action_with_one_option_is_one_new_module_and_one_line_of_the_table(tmp_path, monkeypatch):
    """The documented path (docs/architecture.md): a module in actions/, its line in BUILT_IN; nothing else."""
    path = tmp_path / "flush_caches.py"
    path.write_text(THROWAWAY, encoding="utf-8")
    module = load_file(path, "ddo_hooks_throwaway_flush_caches")
    monkeypatch.setattr(ddo_hooks.actions, "BUILT_IN", (*BUILT_IN, module.ACTION))  # its line in the table

    # it loads: the policy validates its options against its model, once
    policy = policy_with({"name": "flush_caches", "options": {"depth": 3}})
    (resolved,) = policy.actions("after_call")
    assert resolved.options == module.FlushCachesOptions(depth=3)
    with pytest.raises(PolicyError, match=r"options\.deep: unknown option of flush_caches; it takes depth"):
        policy_with({"name": "flush_caches", "options": {"deep": 3}})
    with pytest.raises(PolicyError, match=r"options\.depth: expected an integer, got 'deep'"):
        policy_with({"name": "flush_caches", "options": {"depth": "deep"}})
    # it is built in: listed, and it cannot be unregistered
    assert "flush_caches" in names()
    with pytest.raises(InvalidArgumentError, match="cannot be unregistered"):
        unregister_action("flush_caches")
    # it runs, and its reports go under its component
    pipe = build_pipeline("sd")
    with ddo_hooks.attach(pipe, policy) as attachment:
        pipe(**call_kwargs("sd"))
    (report,) = attachment.tracker.reports("flush_after_call")
    assert report.setup.boundary_action.data == {"depth": 3}
    # it shows in the policy's schema, with its option, and in the docs' table of actions
    schema = policy_json_schema()
    (entry,) = [
        e for e in schema["$defs"]["ActionSpec"]["oneOf"] if e["properties"]["name"].get("const") == "flush_caches"
    ]
    assert entry["properties"]["options"]["$ref"] == "#/$defs/FlushCachesOptions"
    assert schema["$defs"]["FlushCachesOptions"]["properties"]["depth"]["description"] == "How deep to flush."
    other = next(e for e in schema["$defs"]["ActionSpec"]["oneOf"] if "const" not in e["properties"]["name"])
    assert "flush_caches" in other["properties"]["name"]["not"]["enum"]
    assert "| `flush_caches` | `FlushCachesOptions` | `boundary_action`, under `flush_<boundary>` |" in (
        load_docs_hooks().action_table()
    )


def load_docs_hooks() -> Any:
    return load_file(ROOT / "docs" / "hooks.py", "ddo_docs_hooks")


def test_the_concepts_page_holds_the_table_of_actions_generated_from_the_one_table():
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    assert "<!-- generated: action-table -->" in page.split("## Actions: one module each", 1)[1].split("\n## ", 1)[0]
    rows = load_docs_hooks().action_table().splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{name}`" for name in names()]
    for action, row in zip(BUILT_IN, rows, strict=True):
        assert (action.options.__name__ if action.options else "its options as written") in row
        assert all(f"`{route}`" in row for route in action.routes)
        assert f"`{action.component_prefix}_<boundary>`" in row


def code_without_docstrings(path: Path) -> str:
    """A module's source with its docstrings left out: what it does, not what it says."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return ast.unparse(tree)


def test_the_attachment_and_the_runner_name_no_action():
    """What an action does at attach, at detach and at each boundary is the action's own (its module)."""
    for module in ("attachment", "attach_steps", "steps", "runner", "recorder", "phases", "signals"):
        code = code_without_docstrings(PACKAGE / "hooks" / f"{module}.py")
        named = [name for name in names() if name in code]
        assert named == [], f"hooks/{module}.py names {named}"
    for action in BUILT_IN:
        assert (action.name in code_without_docstrings(PACKAGE / "actions" / f"{action.name}.py")) is True


MYPY_CONFIG = """\
[mypy]
python_version = 3.11
follow_imports = silent
[mypy-torch.*,diffusers.*,transformers.*,accelerate.*,safetensors.*,numpy.*,psutil.*,yaml.*,huggingface_hub.*]
follow_imports = skip
ignore_missing_imports = True
"""

TYPOS = textwrap.dedent(
    """\
    from ddo_hooks.actions import release_done_components
    from ddo_hooks.actions.contract import BoundaryContext, RegisteredAction, ResolvedAction
    from ddo_hooks.actions.host_cache_release import HostCacheReleaseOptions
    from ddo_hooks.actions.release_done_components import ReleaseDoneComponentsOptions
    from ddo_hooks.policy.model import HookPolicy


    def in_the_action(ctx: BoundaryContext[ReleaseDoneComponentsOptions]) -> bool:
        return ctx.options.stable_filez  # 9: the action


    def at_attach(pipeline: object, entries: tuple[ResolvedAction[ReleaseDoneComponentsOptions], ...]) -> bool:
        return any(entry.options.stable_filez for entry in entries)  # 13: a step at attach


    def from_the_policy(policy: HookPolicy) -> None:
        for entry in policy.actions("after_call"):
            print(policy.fitted(entry, release_done_components.ACTION).options.stable_filez)  # 18: the policy


    def release(ctx: BoundaryContext[HostCacheReleaseOptions]) -> None:
        print(ctx.options.collect, ctx.options.min_releasable_bytes)


    MISMATCHED = RegisteredAction("mine", release, "mine", options=ReleaseDoneComponentsOptions)  # 25: the declaration
    MATCHED = RegisteredAction("mine", release, "mine", options=HostCacheReleaseOptions)
    """
)


def test_mypy_catches_an_options_typo_anywhere_between_the_policy_and_the_action(tmp_path):
    """The options keep their model's type from the policy (``fitted``) and the declaration to the context."""
    (tmp_path / "mypy.ini").write_text(MYPY_CONFIG, encoding="utf-8")
    (tmp_path / "typos.py").write_text(TYPOS, encoding="utf-8")
    command = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", ".cache", "typos.py"]
    env = {"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = sorted(int(line.split(":")[1]) for line in done.stdout.splitlines() if ": error: " in line)
    assert lines == [9, 13, 18, 25], done.stdout + done.stderr
    assert done.stdout.count('has no attribute "stable_filez"; maybe "stable_files"?') == 3, done.stdout


# -- report routes ---------------------------------------------------------------------------------


def route_models() -> list[type[RouteReport]]:
    """Every report model of a route that the report layer defines, its DDO shape's included."""
    for module in pkgutil.walk_packages(ddo_hooks.reports.__path__, "ddo_hooks.reports."):
        importlib.import_module(module.name)
    found, stack = [], [RouteReport]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if not getattr(sub, "__abstractmethods__", None):
                found.append(sub)
    return found


def test_the_docs_name_the_table_of_report_routes():
    line = where_a_change_goes("A new report route")
    for name in ("`OurReport`", "`ROUTE_TYPES`", "`reports/parse.py`", "`DDO_REPORT_TYPES`", "`reports/ddo/routes.py`"):
        assert name in line, line


def test_every_report_route_is_in_the_table_of_its_shape():
    ours = {model for model in route_models() if not model.__module__.startswith("ddo_hooks.reports.ddo.")}
    ddos = set(route_models()) - ours
    assert set(ROUTE_TYPES.values()) == ours
    assert set(DDO_ROUTE_TYPES.values()) == ddos
    for table in (ROUTE_TYPES, DDO_ROUTE_TYPES):
        for route, model in table.items():
            assert model.model_fields["route"].annotation.__args__ == (route,)


# -- presets -----------------------------------------------------------------------------------------


def test_the_docs_name_where_the_presets_are_listed():
    line = where_a_change_goes("A new preset")
    for name in ("`policy/presets/`", "`PRESETS`", "`policy/__init__.py`"):
        assert name in line, line


def test_every_preset_file_is_listed_and_loads(capsys: pytest.CaptureFixture[str]):
    files = sorted(p.stem for p in (PACKAGE / "policy" / "presets").glob("*.yaml"))
    assert files == sorted(PRESETS)
    page = (ROOT / "docs" / "policy.md").read_text(encoding="utf-8")
    for name in PRESETS:
        assert preset_file(name).is_file()
        policy = HookPolicy.preset(name)
        assert policy.enabled_boundaries(), name
        assert main(["validate-policy", name]) == 0
        assert f"| `{name}` |" in page, f"docs/policy.md's presets table has no row for {name}"
    capsys.readouterr()


def test_the_words_of_the_concepts_page_name_every_built_in_action_and_way_to_pin():
    """Each verb has one meaning (issue 29): the page that says which names the actions and options it covers."""
    words = (Path(__file__).resolve().parents[1] / "docs" / "concepts.md").read_text(encoding="utf-8")
    words = " ".join(words.split("## Words", 1)[1].split())
    assert all(f"`{name}`" in words for name in names() if name != "malloc_trim")
    ways = PinnedCopiesPolicy.model_fields["from_files"].annotation.__args__[0].__args__
    assert all(f"`from_files: {way}`" in words or f"`pinned_copies.from_files: {way}`" in words for way in ways)
    assert "`DdoHooksError`" in words
    assert "`BoundaryContext.dropped_names`" in words
