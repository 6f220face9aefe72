"""Old names, kept for one release: the one table of them (:data:`RENAMED`), and how each still works.

Every old name of ddo_hooks is a row of :data:`RENAMED`: the old dotted name, the name it became, why,
and what it is: a module (``import ddo_hooks.reports.release``), a name of a module
(``ddo_hooks.errors.DDOError``) or an attribute of a class (``BoundaryContext.left``). Each use of
one warns with a :class:`DeprecationWarning` (:func:`warn_renamed`) that names the new one and gives
what it became. A moved module is served by a finder at the end of ``sys.meta_path`` (so it costs
nothing to any other import): the first import of it warns and returns the new module itself, so its
classes are the same objects under both names; a module that is gone, its names spread over others,
is served as a module of its old names, each of which warns when it is read. A module that lost a name
reads it through :func:`old_attribute` (its ``__getattr__``), a class through :func:`warn_old`. Each
warning names the user's line, however the old name is reached (an ``import``,
``importlib.import_module``, ``unittest.mock.patch``, ``pkgutil.resolve_name``), so that Python's
default filters, which show a :class:`DeprecationWarning` only in ``__main__``, show it there
(:func:`outside_stacklevel`). The docs' "Renamed" page lists the table; the names go in ddo-hooks
:data:`GOES_IN`, and a test fails once the version reaches it while the table still holds one.

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
import pkgutil
import sys
import warnings
from types import FrameType, ModuleType
from typing import Any, Literal, NamedTuple

GOES_IN = "0.2"
"""The release in which every old name goes."""

DDO_IS_ANOTHER_PACKAGE = "DDO is the diffusers-dynamic-offloader package"
"""Why ``DDOError`` was renamed ``DdoHooksError``."""

_DDO_NAMES = "DDO's name means something else"
_ACTIONS = "each built-in action is one module of ddo_hooks.actions"
_NAMED = "each action's name is in its own module"
_ROUTE = "a report module is named after its route"
_ONE_MODULE = "no two modules share a name"
_WEIGHTS_FILES = "a component's weights files are found, opened and told changed in one module"
_STEPS = "each step of an attachment checks what it made at each call's start"
_LEDGER = "what was done to a module or an offload group is one ledger: LEDGER.read(it).noted, .rebound, .repacked"


class Renamed(NamedTuple):
    """What an old name became."""

    new: str
    """The new dotted name; ``()`` after it: call it for what the old name held."""
    why: str = ""
    """Why it was renamed (empty where the new name says it)."""
    kind: Literal["module", "name", "attribute"] = "name"
    """A module, a name of a module, or an attribute of a class."""


RENAMED: dict[str, Renamed] = {
    "ddo_hooks.reports.release": Renamed("ddo_hooks.reports.host_cache", _ROUTE, "module"),
    "ddo_hooks.reports.pages": Renamed("ddo_hooks.reports.done_components", _ROUTE, "module"),
    "ddo_hooks.reports.auxiliary": Renamed("ddo_hooks.reports.auxiliary_sources", _ROUTE, "module"),
    "ddo_hooks.reports.ddo.auxiliary": Renamed("ddo_hooks.reports.ddo.vmm_auxiliary", _ROUTE, "module"),
    "ddo_hooks.offload.auxiliary": Renamed("ddo_hooks.offload.source_detachment", _ONE_MODULE, "module"),
    # "DDO" is the other package, and its shape of reports
    "ddo_hooks.DDOError": Renamed("ddo_hooks.errors.DdoHooksError", DDO_IS_ANOTHER_PACKAGE),
    "ddo_hooks.errors.DDOError": Renamed("ddo_hooks.errors.DdoHooksError", DDO_IS_ANOTHER_PACKAGE),
    "ddo_hooks.DDOReport": Renamed("ddo_hooks.DdoHooksReport", "a report of ddo_hooks' own shape; DDO's are DDO*"),
    "ddo_hooks.reports.parse.DDOReport": Renamed(
        "ddo_hooks.reports.parse.DdoHooksReport", "a report of ddo_hooks' own shape; DDO's are DDO*"
    ),
    "ddo_hooks.apply_dynamic_offload": Renamed("ddo_hooks.offload.apply_offload_runtime", _DDO_NAMES),
    "ddo_hooks.DynamicOffloadApplyResult": Renamed("ddo_hooks.offload.OffloadRuntimeApplication", _DDO_NAMES),
    # the offload names left the top namespace for ddo_hooks.offload
    **{
        f"ddo_hooks.{name}": Renamed(f"ddo_hooks.offload.{name}")
        for name in (
            "IntervalObservingAdapter",
            "OffloadRuntime",
            "OffloadedComponent",
            "PayloadInterval",
            "SourceObservationAdapter",
            "available_runtimes",
            "register_offload_runtime",
            "unregister_offload_runtime",
        )
    },
    "MetricsTracker.record_ddo_metrics": Renamed("MetricsTracker.record", _DDO_NAMES, kind="attribute"),
    # "dropped" is the one word for a component that left the pipeline
    "BoundaryContext.left": Renamed("BoundaryContext.dropped_names", kind="attribute"),
    # a weights file's identity, its index and which files a pipeline reads: one module of its own
    "ddo_hooks.release.file_views.note_files": Renamed("ddo_hooks.release.weights_files.note_files", _WEIGHTS_FILES),
    **{
        f"ddo_hooks.reports.host_cache.{name}": Renamed(
            f"ddo_hooks.reports.allocator.{name}", "the allocator's counters are read by several reports"
        )
        for name in ("unavailable_snapshot", "validate_active_counter")
    },
    "ddo_hooks.release.file_views.Unbound": Renamed(
        "ddo_hooks.release.file_copies.Unbound", "comparing copies with their files is a module of its own"
    ),
    "ddo_hooks.release.file_identity": Renamed("ddo_hooks.release.weights_files", _WEIGHTS_FILES, "module"),
    # one module per built-in action (ddo_hooks.actions), on the contract every action is written on
    "ddo_hooks.hooks.actions": Renamed("ddo_hooks.actions.registry", _ACTIONS, "module"),
    **{
        f"ddo_hooks.hooks.actions.{name}": Renamed(f"ddo_hooks.actions.registry.{name}")
        for name in ("ENTRY_POINT_GROUP", "available_actions", "register_action", "resolve_action", "unregister_action")
    },
    "ddo_hooks.hooks.actions.BoundaryContext": Renamed("ddo_hooks.actions.contract.BoundaryContext"),
    "ddo_hooks.hooks.actions.RegisteredAction": Renamed("ddo_hooks.actions.contract.RegisteredAction"),
    "ddo_hooks.hooks.actions.bind_actions": Renamed("ddo_hooks.hooks.runner.bind_actions"),
    "ddo_hooks.hooks.actions.BoundActions": Renamed("ddo_hooks.hooks.runner.BoundActions"),
    "ddo_hooks.hooks.builtin_actions": Renamed("ddo_hooks.actions", _ACTIONS, "module"),
    "ddo_hooks.hooks.builtin_actions.BUILT_IN": Renamed("ddo_hooks.actions.by_name()", "the table is a tuple"),
    "ddo_hooks.hooks.builtin_actions.BuiltIn": Renamed(
        "ddo_hooks.actions.contract.RegisteredAction", "the one declaration of an action; it takes the name first"
    ),
    "ddo_hooks.hooks.builtin_actions.check_weights_files": Renamed(
        "ddo_hooks.hooks.attach_steps.check_weights_files", _STEPS
    ),
    "ddo_hooks.hooks.attachment.check_weights_files": Renamed(
        "ddo_hooks.hooks.attach_steps.check_weights_files", _STEPS
    ),
    **{
        f"ddo_hooks.hooks.builtin_actions.{name}": Renamed(f"ddo_hooks.actions.{module}.{name}")
        for name, module in (
            ("check_named_components", "release_done_components"),
            ("host_cache_release", "host_cache_release"),
            ("malloc_trim", "malloc_trim"),
            ("release_done_components", "release_done_components"),
            ("stage_done_components", "stage_done_components"),
        )
    },
    "ddo_hooks.hooks.cores": Renamed("ddo_hooks.actions.host_cache_release", "the check is its action's", "module"),
    "ddo_hooks.hooks.cores.check_release_core": Renamed("ddo_hooks.actions.host_cache_release.check_release_core"),
    "ddo_hooks.hooks.cores.ddo_core_setting": Renamed("ddo_hooks.actions.host_cache_release.ddo_core_setting"),
    "ddo_hooks.policy.builtins": Renamed("ddo_hooks.actions", _ACTIONS, "module"),
    "ddo_hooks.policy.builtins.BUILT_IN_ACTIONS": Renamed("ddo_hooks.actions.names()", "the table is BUILT_IN"),
    "ddo_hooks.policy.builtins.BUILT_IN_OPTIONS": Renamed(
        "ddo_hooks.actions.options_models()", "the table is BUILT_IN"
    ),
    "ddo_hooks.policy.builtins.ActionOptions": Renamed("ddo_hooks.actions.contract.ActionOptions"),
    "ddo_hooks.policy.builtins.NoOptions": Renamed("ddo_hooks.actions.contract.NoOptions"),
    "ddo_hooks.policy.builtins.builtin_options": Renamed(
        "ddo_hooks.actions.registry.validated_options", "your own actions have options models too"
    ),
    # the host-cache action has one name, host_cache_release, and "release" names the act
    **{
        f"ddo_hooks.{module}.ReleasePolicy": Renamed(
            "ddo_hooks.actions.host_cache_release.HostCacheReleaseOptions", "the options of host_cache_release"
        )
        for module in ("policy.builtins", "policy.parts")
    },
    **{
        f"ddo_hooks.{module}.{name}": Renamed(f"ddo_hooks.actions.host_cache_release.{name}")
        for module in ("policy.builtins", "policy.parts")
        for name in ("core_conflict", "shown_setting")
    },
    "ddo_hooks.policy.builtins.DoneComponentsOptions": Renamed(
        "ddo_hooks.actions.release_done_components.ReleaseDoneComponentsOptions", "named after its action"
    ),
    "ddo_hooks.boundaries.HOST_CACHE_RELEASE": Renamed("ddo_hooks.actions.host_cache_release.NAME", _NAMED),
    "ddo_hooks.boundaries.HOST_CACHE_COMPONENT_PREFIX": Renamed(
        "ddo_hooks.actions.host_cache_release.COMPONENT_PREFIX", _NAMED
    ),
    "ddo_hooks.boundaries.MALLOC_TRIM": Renamed("ddo_hooks.actions.malloc_trim.NAME", _NAMED),
    "ddo_hooks.boundaries.RELEASE_DONE_COMPONENTS": Renamed("ddo_hooks.actions.release_done_components.NAME", _NAMED),
    "ddo_hooks.boundaries.STAGE_DONE_COMPONENTS": Renamed("ddo_hooks.actions.stage_done_components.NAME", _NAMED),
    "ddo_hooks.release.weights_files.NOTED": Renamed("ddo_hooks.ledger.LEDGER", _LEDGER),
    "ddo_hooks.release.file_views.REBOUND": Renamed("ddo_hooks.ledger.LEDGER", _LEDGER),
    "ddo_hooks.release.pinned_copies.REPACKED": Renamed("ddo_hooks.ledger.LEDGER", _LEDGER),
}  # fmt: skip
"""Every old name: old dotted name -> what it became (:class:`Renamed`). The docs' "Renamed" page lists it."""

MOVED_MODULES: dict[str, str] = {
    old: renamed.new
    for old, renamed in RENAMED.items()
    if renamed.kind == "module" and not any(other.startswith(f"{old}.") for other in RENAMED)
}
"""The old module names that are their new module itself: old dotted name -> the module it became."""


def warn_renamed(old: str, new: str, why: str = "") -> None:
    """Warn, with a :class:`DeprecationWarning`, that ``old`` is ``new`` now, at the line that used the old name.

    That line is the first frame outside the import machinery and ddo_hooks (:func:`outside_stacklevel`):
    Python shows a :class:`DeprecationWarning` by default only when it is attributed to ``__main__``,
    so one attributed to ``importlib.import_module``, ``pkgutil.resolve_name`` or
    ``unittest.mock.patch``, which import a name for the user, would never be seen.
    """
    because = f" ({why})" if why else ""
    message = f"{old} is now {new}{because}; use the new name, as the old one goes in ddo-hooks {GOES_IN}"
    warnings.warn(message, DeprecationWarning, stacklevel=outside_stacklevel())


def warn_old(old: str) -> Renamed:
    """Warn that the old name ``old``, a row of :data:`RENAMED`, is its new one now; return the row."""
    renamed = RENAMED[old]
    warn_renamed(old, renamed.new, renamed.why)
    return renamed


def resolve(new: str) -> Any:
    """What the dotted name ``new`` of :data:`RENAMED` names (called, where it ends in ``()``).

    Examples:
        >>> resolve("ddo_hooks.errors.DdoHooksError").__name__
        'DdoHooksError'
    """
    if new.endswith("()"):
        return pkgutil.resolve_name(new[:-2])()
    return pkgutil.resolve_name(new)


def old_attribute(module: str, name: str) -> Any:
    """The module ``module``'s old name ``name``, after a warning: a module's ``__getattr__`` for its old names.

    Raises:
        AttributeError: ``name`` is no old name of ``module`` either.
    """
    old = f"{module}.{name}"
    if old not in RENAMED or RENAMED[old].kind != "name":
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return resolve(warn_old(old).new)


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


class _OldModule(ModuleType):
    """A module that is gone, its names spread over others: each of its old names warns when it is read."""

    def __getattr__(self, name: str) -> Any:
        return old_attribute(self.__name__, name)

    def __dir__(self) -> list[str]:
        prefix = f"{self.__name__}."
        return sorted(
            old.removeprefix(prefix) for old in RENAMED if old.startswith(prefix) and "." not in old[len(prefix) :]
        )


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves each old module name of :data:`RENAMED`, after a warning: its new module, or a module of its old names."""

    def __init__(self) -> None:
        self.specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        renamed = RENAMED.get(fullname)
        return importlib.util.spec_from_loader(fullname, self) if renamed and renamed.kind == "module" else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = warn_old(spec.name).new
        if spec.name not in MOVED_MODULES:
            return _OldModule(spec.name)
        module = importlib.import_module(new)
        self.specs[new] = module.__spec__  # the import system sets the old name's spec on it next
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module was imported under its new name): give it its own spec back."""
        if module.__name__ in self.specs:
            module.__spec__ = self.specs[module.__name__]


def install() -> None:
    """Put the finder at the end of ``sys.meta_path``, once."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
