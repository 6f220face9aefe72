"""One option's corridor, YAML to the action's argument, as ``scripts/option_corridor.py`` traces it; and loading
a preset validates each section once and dumps nothing."""

from __future__ import annotations

import collections
import functools
import importlib.util
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, TypeAdapter

SCRIPT = Path(__file__).parents[1] / "scripts" / "option_corridor.py"


def load_script():
    spec = importlib.util.spec_from_file_location("option_corridor", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(sys.gettrace() is not None, reason="a tracer (coverage, a debugger) is already installed")
def test_min_releasable_bytes_crosses_these_files_in_these_forms():
    found, past = load_script().corridor()
    assert found == {
        "ddo_hooks/policy/yaml_loader.py": {"str", "mapping of str"},  # the YAML, with its position
        "ddo_hooks/policy/passes.py": {"mapping of str", "HostCacheReleaseOptions of int"},  # parsed; entries resolved
        "ddo_hooks/sizes.py": {"str", "int"},  # '64MiB' read as a size
        "ddo_hooks/actions/contract.py": {"int", "mapping of int", "HostCacheReleaseOptions of int"},  # merged, once
        "ddo_hooks/actions/host_cache_release.py": {"HostCacheReleaseOptions of int", "mapping of int"},  # the action
        "ddo_hooks/release/host_cache.py": {"int"},  # the argument of release_pytorch_host_cache
    }
    assert past == {"ddo_hooks/release/host_cache.py"}  # the action's options cross the other five
    assert {form.rsplit(" of ", 1)[-1] for held in found.values() for form in held} == {"str", "int"}


def test_loading_a_preset_validates_each_section_once_each_entry_once_and_dumps_nothing(monkeypatch):
    from ddo_hooks import HookPolicy

    counts: collections.Counter[str] = collections.Counter()

    def counted(what, name):
        @functools.wraps(what)
        def wrapper(first, *args, **kwargs):
            counts[name(first)] += 1
            return what(first, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(TypeAdapter, "validate_python", counted(TypeAdapter.validate_python, lambda a: repr(a._type)))
    validate = BaseModel.model_validate.__func__
    monkeypatch.setattr(BaseModel, "model_validate", classmethod(counted(validate, lambda cls: cls.__name__)))
    monkeypatch.setattr(BaseModel, "model_dump", counted(BaseModel.model_dump, lambda _: "model_dump"))
    HookPolicy.preset("default")
    sections = {name: n for name, n in counts.items() if name.startswith("typing.Annotated")}
    assert len(sections) == len(HookPolicy.model_fields)
    assert set(sections.values()) == {1}
    assert counts["HostCacheReleaseOptions"] == 3  # its three entries, each once over the release section
    assert counts["model_dump"] == 0
