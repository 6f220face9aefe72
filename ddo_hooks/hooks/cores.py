r"""Which release core a boundary's ``host_cache_release`` calls, and the refusal at attach of one that cannot run.

A policy chooses DDO's core with ``core: ddo``, in ``release`` or in a boundary's action options
(:class:`~ddo_hooks.policy.builtins.ReleasePolicy`). :func:`check_release_core` is the attach check of
``host_cache_release`` (its entry in :data:`~ddo_hooks.hooks.builtin_actions.BUILT_IN`): it runs at
:func:`~ddo_hooks.attach`, before any hook is installed, so that a process where DDO's core cannot run
learns it before the first call, at the line that asked for it.

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> policy = HookPolicy.from_yaml_text("version: 1\nboundaries:\n  after_call:\n"
    ...     "    actions: [{name: host_cache_release, options: {core: ddo}}]\n")
    >>> ddo_core_setting(policy, policy.actions("after_call")[0])
    ('boundaries', 'after_call', 'actions', 0, 'options', 'core')
    >>> ddo_core_setting(policy, policy.actions("before_vae")[0]) is None
    True
"""

from __future__ import annotations

from typing import Any

from ddo_hooks._diagnostics import KeyPath, format_key_path
from ddo_hooks.errors import PolicyError
from ddo_hooks.policy.model import HookPolicy
from ddo_hooks.policy.parts import ResolvedAction

__all__ = ["check_release_core", "ddo_core_setting"]


def ddo_core_setting(policy: HookPolicy, action: ResolvedAction) -> KeyPath | None:
    """The key path of the ``core`` setting that makes ``action`` (a ``host_cache_release``) run on DDO's core.

    ``None`` when it runs on ddo_hooks' own core, or not at all (its boundary or the policy is disabled).
    An action whose options leave ``core`` out takes it from ``release`` (``("release", "core")``).

    Examples:
        >>> policy = HookPolicy.from_mapping({"version": 1, "release": {"core": "ddo"}})
        >>> ddo_core_setting(policy, policy.actions("before_vae")[0])
        ('release', 'core')
    """
    if action.boundary not in policy.enabled_boundaries() or action.options.core != "ddo":
        return None
    return (*action.at, "options", "core") if "core" in action.written else ("release", "core")


def check_release_core(pipeline: Any, policy: HookPolicy, action: ResolvedAction) -> None:
    """Refuse a ``host_cache_release`` that would run on DDO's core where that core cannot run.

    Args:
        pipeline: The pipeline being attached (not needed here).
        policy: The policy being attached.
        action: The action, as :meth:`~ddo_hooks.policy.model.HookPolicy.actions` resolves it.

    Raises:
        PolicyError: DDO is not importable, not at the version ddo_hooks was tested with, or
            torch has no ``torch._C._accelerator_emptyHostCache``; the message names the setting
            (``file:line:col: release.core``), what is wrong and the fix.

    Examples:
        >>> policy = HookPolicy.default()  # ddo_hooks' own core, which runs wherever ddo_hooks does
        >>> check_release_core(None, policy, policy.actions("after_call")[0])
    """
    path = ddo_core_setting(policy, action)
    if path is None:
        return
    from ddo_hooks.release.ddo_core import core_problem

    problem = core_problem()
    if problem is None:
        return
    raise PolicyError(
        f"{policy.locate(path)}: {format_key_path(path)}: ddo (DDO's release core) cannot run here: {problem}; "
        "or set core: ddo_hooks (the default), which runs wherever ddo_hooks does"
    )
