"""Old module names, kept for one release: importing one warns once and gives the module it became.

The report modules are named after their routes, and no two modules share a name any longer (there
were three ``auxiliary.py``). Each old name in :data:`MOVED_MODULES` is served by a finder at the end
of ``sys.meta_path`` (so it costs nothing to any other import): the first import of it warns with a
:class:`DeprecationWarning` that names the new module, and returns that very module, so its classes
are the same objects under both names. The aliases go in ddo-hooks 0.2.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED_MODULES: dict[str, str] = {
    "ddo_hooks.reports.release": "ddo_hooks.reports.host_cache",
    "ddo_hooks.reports.pages": "ddo_hooks.reports.done_components",
    "ddo_hooks.reports.auxiliary": "ddo_hooks.reports.auxiliary_sources",
    "ddo_hooks.reports.ddo.auxiliary": "ddo_hooks.reports.ddo.vmm_auxiliary",
    "ddo_hooks.offload.auxiliary": "ddo_hooks.offload.source_detachment",
}
"""Old dotted name -> the module it became."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves each old name of :data:`MOVED_MODULES` with its new module, after a warning."""

    def __init__(self) -> None:
        self.specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED_MODULES else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED_MODULES[spec.name]
        warnings.warn(
            f"{spec.name} was renamed {new}; import it from there, as the old name goes in ddo-hooks 0.2",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self.specs[new] = module.__spec__  # the import system sets the old name's spec on it next
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module was imported under its new name): give it its own spec back."""
        module.__spec__ = self.specs[module.__name__]


def install() -> None:
    """Put the finder at the end of ``sys.meta_path``, once."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
