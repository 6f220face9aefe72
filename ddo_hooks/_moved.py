"""Old names, kept for one release: each warns (:func:`warn_renamed`) and gives what it became.

The report modules are named after their routes, and no two modules share a name any longer (there
were three ``auxiliary.py``). Each old name in :data:`MOVED_MODULES` is served by a finder at the end
of ``sys.meta_path`` (so it costs nothing to any other import): the first import of it warns with a
:class:`DeprecationWarning` that names the new module, and returns that very module, so its classes
are the same objects under both names. The old names of ``ddo_hooks``' attributes, of
``ddo_hooks.errors.DDOError`` and of ``BoundaryContext.left`` warn through :func:`warn_renamed` too,
in the same words. The aliases go in ddo-hooks 0.2.

Examples:
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_renamed("ddo_hooks.old", "ddo_hooks.new", "why")
    >>> print(caught[0].message)
    ddo_hooks.old is now ddo_hooks.new (why); use the new name, as the old one goes in ddo-hooks 0.2
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

DDO_IS_ANOTHER_PACKAGE = "DDO is the diffusers-dynamic-offloader package"
"""Why ``DDOError`` was renamed ``DdoHooksError``."""


def warn_renamed(old: str, new: str, why: str = "", *, stacklevel: int = 3) -> None:
    """Warn, with a :class:`DeprecationWarning` at the caller's caller, that ``old`` is ``new`` now."""
    because = f" ({why})" if why else ""
    message = f"{old} is now {new}{because}; use the new name, as the old one goes in ddo-hooks 0.2"
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


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
        warn_renamed(spec.name, new)
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
