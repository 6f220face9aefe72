"""Import a Python file that is in no package (a benchmark, a script, a docs helper) as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file(path: Path, name: str, *, beside: bool = False) -> ModuleType:
    """Execute ``path`` as the module ``name`` (registered in ``sys.modules``, as dataclasses need).

    ``beside=True`` puts the file's folder on ``sys.path`` while it runs, for imports of its siblings.
    """
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.parent)
    if beside:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        if beside:
            sys.path.remove(folder)
    return module
