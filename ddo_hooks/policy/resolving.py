"""Each action of a policy resolved once: the options it receives, valid, over the policy's defaults of them.

:func:`resolve_actions` gives each boundary's entries, each a
:class:`~ddo_hooks.actions.contract.ResolvedAction`, when the policy loads; :func:`fitted` gives one of them the
options of the action registered under its name at attach (validated again only where that action was
registered, or replaced, after the policy loaded).

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> policy = HookPolicy.from_mapping({"version": 1, "release": {"collect": "young"}})
    >>> [action.options.collect for action in resolve_actions(policy)["after_call"]]
    ['young']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import KeyPath, Positions, below
from ddo_hooks.actions.contract import OptionsT, RegisteredAction, ResolvedAction
from ddo_hooks.actions.registry import registered
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.errors import PolicyError
from ddo_hooks.policy.messages import located_line
from ddo_hooks.policy.parts import ActionSpec, BoundaryPolicy

__all__ = ["Sections", "fitted", "resolve_actions"]


class Sections(Protocol):
    """What resolving reads of a policy: its boundaries, and its sections by name (an action's ``defaults``)."""

    def boundary(self, name: str) -> BoundaryPolicy:
        """The settings of one boundary."""
        ...


def resolve_actions(policy: Sections) -> dict[str, tuple[ResolvedAction[Any], ...]]:
    """Each boundary's actions, in order, each with the options it receives, over the policy's defaults of them.

    The options of ``host_cache_release`` are merged with the ``release`` section here, by validating,
    so that a ``core: ddo`` in one with a setting it cannot honour in the other is refused at its line.

    Raises:
        PydanticCustomError: Options that do not fit once merged, located below the entry.
    """
    resolved = {}
    for name in BOUNDARIES:
        found = []
        for index, spec in enumerate(policy.boundary(name).actions):
            at = ("boundaries", name, "actions", index)
            found.append(ResolvedAction(spec.name, _options_of(policy, spec, at), name, index, spec.options))
        resolved[name] = tuple(found)
    return resolved


def _options_of(policy: Sections, spec: ActionSpec, at: KeyPath) -> Any:
    if spec.settings is None:
        return spec.options
    action = registered(spec.name)
    defaults = None if action is None or action.defaults is None else getattr(policy, action.defaults)
    try:
        return spec.settings.with_defaults(defaults, spec.options)
    except PydanticCustomError as e:
        raise below(at, e) from e


def fitted(
    policy: Sections,
    resolved: ResolvedAction[Any],
    action: RegisteredAction[OptionsT],
    *,
    source: str,
    positions: Positions,
    written: Mapping[KeyPath, str],
) -> ResolvedAction[OptionsT]:
    """``resolved`` with the options that ``action``, registered under its name now, takes.

    Raises:
        PolicyError: They do not fit the action's model; the message points at the policy's line.
    """
    defaults = None if action.defaults is None else getattr(policy, action.defaults)
    try:
        return action.fit(resolved, defaults)
    except PydanticCustomError as e:
        line = located_line(e, resolved.at, source=source, positions=positions, written=written)
        raise PolicyError(line) from e
