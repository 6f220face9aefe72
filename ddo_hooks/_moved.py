"""Old names, kept for one release: each warns (:func:`warn_renamed`) and gives what it became.

The report modules are named after their routes, and no two modules share a name any longer (there
were three ``auxiliary.py``). Each old name in :data:`MOVED_MODULES` is served by a finder at the end
of ``sys.meta_path`` (so it costs nothing to any other import): the first import of it warns with a
:class:`DeprecationWarning` that names the new module, and returns that very module, so its classes
are the same objects under both names. The old names of ``ddo_hooks``' attributes, of
``ddo_hooks.errors.DDOError`` and of ``BoundaryContext.left`` warn through :func:`warn_renamed` too,
in the same words. Each warning names the user's line, however the old name is reached (an
``import``, ``importlib.import_module``, ``unittest.mock.patch``, ``pkgutil.resolve_name``), so
that Python's default filters, which show a :class:`DeprecationWarning` only in ``__main__``,
show it there (:func:`outside_stacklevel`). The aliases go in ddo-hooks 0.2.

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
from types import FrameType, ModuleType

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


def warn_renamed(old: str, new: str, why: str = "") -> None:
    """Warn, with a :class:`DeprecationWarning`, that ``old`` is ``new`` now, at the line that used the old name.

    That line is the first frame outside the import machinery and ddo_hooks (:func:`outside_stacklevel`):
    Python shows a :class:`DeprecationWarning` by default only when it is attributed to ``__main__``,
    so one attributed to ``importlib.import_module``, ``pkgutil.resolve_name`` or
    ``unittest.mock.patch``, which import a name for the user, would never be seen.
    """
    because = f" ({why})" if why else ""
    message = f"{old} is now {new}{because}; use the new name, as the old one goes in ddo-hooks 0.2"
    warnings.warn(message, DeprecationWarning, stacklevel=outside_stacklevel())


MACHINERY = ("importlib", "pkgutil", "unittest.mock", "ddo_hooks")
"""The modules (and their submodules) that import or serve a name for its user: never the line a warning names."""


def outside_stacklevel() -> int:
    """The ``stacklevel`` that :func:`warnings.warn`, called by this function's caller, needs to name the user's line.

    The user's line is the first frame, going up from the caller, whose module is not in
    :data:`MACHINERY`. The count is :func:`warnings.warn`'s own: it passes over the frames of
    ``importlib._bootstrap`` (files whose name holds ``importlib`` and ``_bootstrap``) without
    counting them, on every Python from 3.10 (``skip_file_prefixes``, from 3.12, is not needed).

    Examples:
        >>> import importlib, sys, warnings
        >>> _ = sys.modules.pop("ddo_hooks.reports.release", None)  # so that it is imported (and warns) again
        >>> user = {"__name__": "__main__", "importlib": importlib}  # a user's script
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     exec(compile("importlib.import_module('ddo_hooks.reports.release')", "user.py", "exec"), user)
        >>> caught[0].filename, caught[0].lineno  # not importlib/__init__.py
        ('user.py', 1)
    """
    frame: FrameType | None = sys._getframe(1)  # the caller of warnings.warn: level 1
    level = 1
    while frame is not None and _is_machinery(frame.f_globals.get("__name__")):
        frame = frame.f_back
        while frame is not None and _skipped_by_warnings(frame.f_code.co_filename):
            frame = frame.f_back
        level += 1
    return level


def _is_machinery(module: object) -> bool:
    return isinstance(module, str) and any(module == name or module.startswith(f"{name}.") for name in MACHINERY)


def _skipped_by_warnings(filename: str) -> bool:
    """Whether :func:`warnings.warn` passes over this frame without counting it (its ``_is_internal_filename``)."""
    return "importlib" in filename and "_bootstrap" in filename


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
