"""The built-in actions, one module each, and the one table of them: :data:`BUILT_IN`.

Each module declares its action once (its ``ACTION``, a
:class:`~ddo_hooks.actions.contract.RegisteredAction`): its name, its options model, its function, its
attach check, its steps at attach and detach, its report routes and the prefix of its tracker component.
Everything else follows from the table: the actions a policy can name without registering them
(:mod:`~ddo_hooks.actions.registry`), the validation of their options where a policy loads, what the
runner calls, the policy's JSON Schema and the docs' table of actions. A new built-in action is a new
module here and one line in :data:`BUILT_IN`.

This layer sits below the policy (which validates the options) and above the release core and the
reports (which the actions call and answer with). Modules: :mod:`~ddo_hooks.actions.contract` (what
every action is written on, your own included), :mod:`~ddo_hooks.actions.option_messages` (how an
options model reads a policy's keys and says what it refused), :mod:`~ddo_hooks.actions.registry` (actions by name),
:mod:`~ddo_hooks.actions.host_cache_release`, :mod:`~ddo_hooks.actions.malloc_trim`,
:mod:`~ddo_hooks.actions.release_done_components` and :mod:`~ddo_hooks.actions.stage_done_components`.

Examples:
    >>> names()
    ('host_cache_release', 'malloc_trim', 'release_done_components', 'stage_done_components')
    >>> by_name()["release_done_components"].options.__name__
    'ReleaseDoneComponentsOptions'
"""

from __future__ import annotations

from typing import Any

from ddo_hooks.actions import host_cache_release, malloc_trim, release_done_components, stage_done_components
from ddo_hooks.actions.contract import ActionOptions, RegisteredAction

__all__ = ["BUILT_IN", "by_name", "names", "options_models"]

BUILT_IN: tuple[RegisteredAction[Any], ...] = (
    host_cache_release.ACTION,
    malloc_trim.ACTION,
    release_done_components.ACTION,
    stage_done_components.ACTION,
)
"""The built-in actions, in the order the docs list them; ddo_hooks registers them itself (they cannot be
unregistered). Everything that lists the built-in actions reads this table when it runs."""


def by_name() -> dict[str, RegisteredAction[Any]]:
    """Each built-in action by its name, from :data:`BUILT_IN` as it is now."""
    return {action.name: action for action in BUILT_IN}


def names() -> tuple[str, ...]:
    """The names of the built-in actions, in table order."""
    return tuple(action.name for action in BUILT_IN)


def options_models() -> dict[str, type[ActionOptions] | None]:
    """Each built-in action's options model (``None``: its options as written), by name."""
    return {action.name: action.options for action in BUILT_IN}
