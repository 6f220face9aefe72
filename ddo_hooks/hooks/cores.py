r"""Which release core each boundary's ``host_cache_release`` calls, and the refusal at attach of one that cannot run.

A policy chooses DDO's core with ``core: ddo``, in ``release`` or in a boundary's action options
(:class:`~ddo_hooks.policy.parts.ReleasePolicy`). :func:`check_release_cores` runs at
:func:`~ddo_hooks.attach`, before any hook is installed, so that a process where DDO's core
cannot run learns it before the first call, at the line that asked for it.

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> policy = HookPolicy.from_yaml_text("version: 1\nboundaries:\n  after_call:\n"
    ...     "    actions: [{name: host_cache_release, options: {core: ddo}}]\n")
    >>> ddo_core_settings(policy)
    [('boundaries', 'after_call', 'actions', 0, 'options', 'core')]
"""

from __future__ import annotations

from ddo_hooks._diagnostics import KeyPath, format_key_path
from ddo_hooks.boundaries import HOST_CACHE_RELEASE
from ddo_hooks.errors import PolicyError
from ddo_hooks.policy.model import HookPolicy

__all__ = ["check_release_cores", "ddo_core_settings"]


def ddo_core_settings(policy: HookPolicy) -> list[KeyPath]:
    """The key paths of the ``core`` settings that make an enabled boundary's release run on DDO's core.

    A boundary whose action options leave ``core`` out takes it from ``release`` (``("release", "core")``).
    """
    found: list[KeyPath] = []
    for boundary in policy.enabled_boundaries():
        written = policy.boundary(boundary).actions
        for i, spec in enumerate(policy.actions(boundary)):
            if spec.name != HOST_CACHE_RELEASE or spec.options["core"] != "ddo":
                continue
            path: KeyPath = (
                ("boundaries", boundary, "actions", i, "options", "core")
                if "core" in written[i].options
                else ("release", "core")
            )
            if path not in found:
                found.append(path)
    return found


def check_release_cores(policy: HookPolicy) -> None:
    """Refuse a policy whose releases would run on DDO's core where that core cannot run.

    Raises:
        PolicyError: DDO is not importable, not at the version ddo_hooks was tested with, or
            torch has no ``torch._C._accelerator_emptyHostCache``; the message names the setting
            (``file:line:col: release.core``), what is wrong and the fix.
    """
    settings = ddo_core_settings(policy)
    if not settings:
        return
    from ddo_hooks.release.ddo_core import core_problem

    problem = core_problem()
    if problem is None:
        return
    path = settings[0]
    raise PolicyError(
        f"{policy.locate(path)}: {format_key_path(path)}: ddo (DDO's release core) cannot run here: {problem}; "
        "or set core: ddo_hooks (the default), which runs wherever ddo_hooks does"
    )
