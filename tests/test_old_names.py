"""Names changed so that each word means one thing keep working for one release: each warns once, naming the new one.

The report modules are named after their routes and no two modules share a name
(``ddo_hooks._moved.MOVED_MODULES``); the base error is no longer named after DDO, another package;
``BoundaryContext.left`` is ``dropped_names``, "dropped" being the one word for a component that left.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import ddo_hooks
from ddo_hooks import BoundaryContext, HookPolicy
from ddo_hooks._moved import MOVED_MODULES
from ddo_hooks.errors import DdoHooksError, InvalidArgumentError
from ddo_hooks.reports.tracker import MetricsTracker

PACKAGE = Path(ddo_hooks.__file__).resolve().parent


@pytest.mark.parametrize(("old", "new"), MOVED_MODULES.items())
def test_an_old_module_name_warns_once_and_is_the_new_module(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    said = rf"^{old} is now {new}; use the new name, as the old one goes in ddo-hooks 0.2$"
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
