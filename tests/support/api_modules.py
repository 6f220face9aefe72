"""The public modules of ddo_hooks, as the API reference shows them: one list for every test that walks them.

A public module is a module or package under ``ddo_hooks/`` no part of whose dotted name starts
with ``_``. They are listed from the source tree with :func:`pkgutil.iter_modules`, which imports nothing.
"""

from __future__ import annotations

import pkgutil
from pathlib import Path

import ddo_hooks

PACKAGE = Path(ddo_hooks.__file__).resolve().parent


def public_modules() -> dict[str, bool]:
    """``{dotted name: is a package}`` of every public module, the top package included."""
    found = {"ddo_hooks": True}

    def walk(folder: Path, prefix: str) -> None:
        for info in pkgutil.iter_modules([str(folder)]):
            if info.name.startswith("_"):
                continue
            name = f"{prefix}.{info.name}"
            found[name] = info.ispkg
            if info.ispkg:
                walk(folder / info.name, name)

    walk(PACKAGE, "ddo_hooks")
    return found


def module_file(name: str, is_package: bool) -> Path:
    """The file of a public module: its ``__init__.py`` for a package."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path / "__init__.py" if is_package else path.with_suffix(".py")
