"""Every private attribute of torch, diffusers, accelerate and DDO that ddo_hooks touches still exists.

A new release that renames or removes one fails here, with a message naming the attribute, the
library and its version (see ddo_hooks/_compat/).
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
from pathlib import Path

import pytest

import ddo_hooks
from ddo_hooks._compat import Touch
from ddo_hooks._compat import accelerate as accelerate_compat
from ddo_hooks._compat import ddo as ddo_compat
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks._compat import torch as torch_compat

TOUCHES = (*torch_compat.TOUCHES, *diffusers_compat.TOUCHES, *accelerate_compat.TOUCHES, *ddo_compat.TOUCHES)


@pytest.mark.parametrize("touch", TOUCHES, ids=lambda t: f"{t.library}:{t.attribute.split()[0]}")
def test_each_touched_private_attribute_is_where_ddo_hooks_expects_it(touch: Touch):
    try:
        version = importlib.metadata.version(touch.library)
    except importlib.metadata.PackageNotFoundError:  # DDO is optional: .ci/run's DDO pass runs its probe
        if os.environ.get("DDO_HOOKS_REQUIRE_DDO") == "1":
            pytest.fail(f"{touch.library} is not installed, and DDO_HOOKS_REQUIRE_DDO=1 requires it")
        pytest.skip(f"{touch.library} is not installed")
    if not touch.expected(version):
        pytest.skip(f"{touch.attribute} is not expected in {touch.library} {version} (this build)")
    assert touch.probe(), touch.missing_message(version)


def test_a_changed_attribute_fails_with_its_name_and_the_version():
    gone = Touch("diffusers", "HookRegistry._made_up", "an example", lambda: False, since=(0, 41))
    assert gone.expected("0.42.1")
    assert not gone.expected("0.40.0")
    message = gone.missing_message("0.42.1")
    assert message.startswith("diffusers 0.42.1: HookRegistry._made_up is missing or changed;")
    assert "present since 0.41" in message


PRIVATE = {
    "_C",
    "_hf_hook",
    "_old_forward",
    "_diffusers_hook",
    "cpu_param_dict",
    "invalidate_child_registries_cache",
    "_is_in_bad_fork",
    "_base",
    "_use_count",
    "_storage_Use_Count",
    "_cdata",
    "_execution_device",
    "_keep_in_fp32_modules",
    "_supports_group_offloading",
    "_GROUP_OFFLOADING",
    "_LAZY_PREFETCH_GROUP_OFFLOADING",
    "_DYNAMIC_OFFLOAD_HOOK",
}


def private_touches(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every attribute access, or getattr/hasattr/setattr by name, of a PRIVATE name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.endswith("attr"):
            names = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            found += [(node.lineno, name) for name in names if name in PRIVATE]
    return found


def test_only_compat_modules_touch_private_attributes_of_other_libraries():
    package = Path(ddo_hooks.__file__).parent
    offenders = [
        f"{path.relative_to(package)}:{line}: {name}"
        for path in sorted(package.rglob("*.py"))
        if "_compat" not in path.parts
        for line, name in private_touches(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "\n".join(offenders)


def test_the_private_attribute_scan_finds_a_touch():
    assert private_touches("x = module._hf_hook\ny = getattr(m, '_diffusers_hook', None)\n") == [
        (1, "_hf_hook"),
        (2, "_diffusers_hook"),
    ]
