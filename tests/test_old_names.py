"""Names changed so that each word means one thing keep working for one release: each warns, naming the new one.

Every old name is a row of one table, ``ddo_hooks._moved.RENAMED`` (listed on docs/renamed.md): the report
modules are named after their routes and no two modules share a name; the base error and ddo_hooks' own
report union are no longer named after DDO, another package; ``BoundaryContext.left`` is ``dropped_names``,
"dropped" being the one word for a component that left; the built-in actions are one module each.
The names go in ddo-hooks 0.2: a test fails once the version reaches it while the table holds one.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import ddo_hooks
from ddo_hooks import BoundaryContext, HookPolicy
from ddo_hooks._moved import GOES_IN, MOVED_MODULES, RENAMED, Renamed, resolve
from ddo_hooks.errors import DdoHooksError, InvalidArgumentError
from ddo_hooks.reports.tracker import MetricsTracker

PACKAGE = Path(ddo_hooks.__file__).resolve().parent


@pytest.mark.parametrize(("old", "new"), MOVED_MODULES.items())
def test_an_old_module_name_warns_once_and_is_the_new_module(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    why = f" ({RENAMED[old].why})" if RENAMED[old].why else ""
    said = "^" + re.escape(f"{old} is now {new}{why}; use the new name, as the old one goes in ddo-hooks 0.2") + "$"
    with pytest.warns(DeprecationWarning, match=said):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(old) is module  # once: the second import is silent


def test_names_imported_from_an_old_module_are_the_new_modules_objects(monkeypatch):
    monkeypatch.delitem(sys.modules, "ddo_hooks.reports.release", raising=False)
    with pytest.warns(DeprecationWarning, match="ddo_hooks.reports.host_cache"):
        from ddo_hooks.reports.release import HostCacheReleaseReport
    assert HostCacheReleaseReport is ddo_hooks.HostCacheReleaseReport


def test_the_new_module_keeps_its_own_name_and_no_old_one_is_a_file(monkeypatch):
    for old, new in MOVED_MODULES.items():
        monkeypatch.delitem(sys.modules, old, raising=False)
        with pytest.warns(DeprecationWarning, match=f"is now {new}"):
            module = importlib.import_module(old)
        assert (module.__name__, module.__spec__.name) == (new, new)
        assert module.__spec__.origin == str(PACKAGE.joinpath(*new.split(".")[1:]).with_suffix(".py"))
        assert not PACKAGE.joinpath(*old.split(".")[1:]).with_suffix(".py").exists()


def test_the_base_error_has_one_name_and_the_old_one_warns():
    assert issubclass(InvalidArgumentError, DdoHooksError)
    renamed = r"DDOError is now ddo_hooks.errors.DdoHooksError \(DDO is the diffusers-dynamic-offloader package\)"
    with pytest.warns(DeprecationWarning, match=rf"^ddo_hooks.{renamed}"):
        assert ddo_hooks.DDOError is DdoHooksError
    import ddo_hooks.errors as errors

    with pytest.warns(DeprecationWarning, match=rf"^ddo_hooks.errors.{renamed}"):
        assert errors.DDOError is DdoHooksError
    assert "DDOError" not in dir(ddo_hooks)
    with pytest.raises(AttributeError, match="has no attribute 'DDOErrors'"):
        errors.DDOErrors  # noqa: B018


def test_boundary_context_left_is_dropped_names_under_its_old_name():
    ctx = BoundaryContext(
        pipeline=None, boundary="after_call", action="mine", call_index=1, device="cuda",
        tracker=MetricsTracker(), policy=HookPolicy.default(), dropped_names=("text_encoder",),
    )  # fmt: skip
    said = "^BoundaryContext.left is now BoundaryContext.dropped_names; use the new name"
    with pytest.warns(DeprecationWarning, match=said):
        assert ctx.left == ("text_encoder",)


def test_metrics_tracker_record_ddo_metrics_is_record_under_its_old_name():
    from ddo_hooks import release_pytorch_host_cache

    tracker = MetricsTracker()
    said = r"^MetricsTracker.record_ddo_metrics is now MetricsTracker.record \(DDO's name means something else\)"
    with pytest.warns(DeprecationWarning, match=said):
        tracker.record_ddo_metrics(release_pytorch_host_cache(phase="after_call"), component="c")
    assert [component for component, _ in tracker.records()] == ["c"]


# -- seen with Python's default warning filters, whichever way the old name is imported -------------

ROUTES = {
    "import statement": "import {module}",
    "importlib.import_module": "importlib.import_module({module!r})",
    "unittest.mock.patch": "with unittest.mock.patch({module!r} + '.HostCacheReleaseReport'): pass",
    "pkgutil.resolve_name": "pkgutil.resolve_name({module!r})",
    "attribute, from-import": "from ddo_hooks import DDOError",
    "attribute, mock.patch": "with unittest.mock.patch('ddo_hooks.DDOError', create=False): pass",
    "attribute, pkgutil.resolve_name": "pkgutil.resolve_name('ddo_hooks:DDOError')",
}


@pytest.mark.parametrize("route", ROUTES)
def test_an_old_name_warns_where_the_user_imports_it_under_the_default_filters(route: str):
    """Python shows a DeprecationWarning by default only when it is attributed to ``__main__``: the
    warning must name the user's line, not a frame of importlib, pkgutil or unittest.mock."""
    statement = ROUTES[route].format(module="ddo_hooks.reports.release")
    code = f"import importlib, pkgutil, unittest.mock\n\n{statement}\n"
    env = {name: value for name, value in os.environ.items() if name != "PYTHONWARNINGS"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    old = "ddo_hooks.reports.release" if "attribute" not in route else "ddo_hooks.DDOError"
    assert f"<string>:3: DeprecationWarning: {old} is now " in run.stderr, run.stderr


# -- the one table of old names -----------------------------------------------------------------------

ROOT = PACKAGE.parent
NAMES = {old: renamed for old, renamed in RENAMED.items() if renamed.kind == "name"}
MODULES = {old: renamed for old, renamed in RENAMED.items() if renamed.kind == "module"}


def said(old: str, renamed: Renamed) -> str:
    because = f" ({renamed.why})" if renamed.why else ""
    return f"{old} is now {renamed.new}{because}; use the new name, as the old one goes in ddo-hooks {GOES_IN}"


@pytest.mark.parametrize("old", NAMES)
def test_every_old_name_warns_in_the_tables_words_and_is_what_it_became(old: str):
    module, _, name = old.rpartition(".")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(importlib.import_module(module), name)
    assert [str(w.message) for w in caught if w.category is DeprecationWarning][-1] == said(old, NAMES[old])
    assert value == resolve(NAMES[old].new)
    assert not resolve(NAMES[old].new).__class__.__name__.startswith("_Old")


@pytest.mark.parametrize("old", MODULES)
def test_every_old_module_warns_and_serves_its_old_names(old: str, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"^{re.escape(said(old, MODULES[old]))}$"):
        module = importlib.import_module(old)
    names = [name.rpartition(".")[2] for name in NAMES if name.rpartition(".")[0] == old]
    if old in MOVED_MODULES:
        assert names == []
        assert module is importlib.import_module(MOVED_MODULES[old])
        return
    assert sorted(dir(module)) == sorted(names)
    for name in names:
        with pytest.warns(DeprecationWarning, match=re.escape(said(f"{old}.{name}", NAMES[f"{old}.{name}"]))):
            getattr(module, name)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        module.nope  # noqa: B018


def test_the_old_names_of_the_actions_are_what_the_actions_are_now():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from ddo_hooks.hooks.builtin_actions import BUILT_IN
        from ddo_hooks.policy.builtins import BUILT_IN_ACTIONS, BUILT_IN_OPTIONS, ReleasePolicy, builtin_options

    assert tuple(BUILT_IN) == tuple(BUILT_IN_OPTIONS) == BUILT_IN_ACTIONS
    assert BUILT_IN["host_cache_release"].component_prefix == "host_cache"
    assert builtin_options("host_cache_release", {"collect": "full"}) == ReleasePolicy(collect="full")
    assert HookPolicy.default().release == ReleasePolicy()


def overdue(version: str, table: dict[str, Renamed]) -> bool:
    """Whether the old names are still there in the release they go in."""
    major, minor = (int(part) for part in version.split(".")[:2])
    going = tuple(int(part) for part in GOES_IN.split("."))
    return (major, minor) >= going and bool(table)


def test_the_old_names_go_in_0_2():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'\nversion = "{ddo_hooks.__version__}"\n' in pyproject
    assert not overdue(ddo_hooks.__version__, RENAMED), (
        f"ddo-hooks {ddo_hooks.__version__} still holds {len(RENAMED)} old names: ddo_hooks._moved.RENAMED said they "
        f"go in {GOES_IN}; remove them (and their aliases), or move GOES_IN on, on purpose"
    )
    assert overdue("0.2.0", RENAMED)
    assert not overdue("0.2.0", {})
    assert not overdue("0.1.9", RENAMED)


def test_the_renamed_page_lists_every_old_name_from_the_table():
    from support.file_modules import load_file

    page = (ROOT / "docs" / "renamed.md").read_text(encoding="utf-8")
    assert "<!-- generated: renamed-table -->" in page
    rows = load_file(ROOT / "docs" / "hooks.py", "ddo_docs_hooks").renamed_table().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(RENAMED)
    assert all(f"| `{RENAMED[row.split('`')[1]].new}` |" in row for row in rows)


def test_the_weights_files_names_that_left_file_views_and_file_identity_still_work_and_warn(monkeypatch):
    """Split out to ddo_hooks.release.weights_files (ff1ed68) without a row: the old names raised at once."""
    from ddo_hooks.release import file_views, weights_files

    with pytest.warns(DeprecationWarning, match=r"^ddo_hooks\.release\.file_views\.note_files is now ddo_hooks\.rele"):
        assert file_views.note_files is weights_files.note_files
    monkeypatch.delitem(sys.modules, "ddo_hooks.release.file_identity", raising=False)
    with pytest.warns(DeprecationWarning, match=r"^ddo_hooks\.release\.file_identity is now ddo_hooks\.release\.weig"):
        from ddo_hooks.release.file_identity import open_regular, read_index
    assert (open_regular, read_index) == (weights_files.open_regular, weights_files.read_index)
