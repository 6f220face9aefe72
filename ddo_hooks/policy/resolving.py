"""Each action of a policy resolved once: the options it receives, valid, over the policy's defaults of them.

:func:`resolve_actions` gives each boundary's entries, each a
:class:`~ddo_hooks.actions.contract.ResolvedAction`, when the policy loads; :func:`fitted` gives one of them the
options of the action registered under its name at attach (validated again only where that action was
registered, or replaced, after the policy loaded).

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> policy = HookPolicy.from_mapping({"version": 1, "release": {"collect": "young"}})
    >>> resolved, problems = resolve_actions(policy)
    >>> [action.options.collect for action in resolved["after_call"]], problems
    (['young'], [])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import KeyPath, Positions
from ddo_hooks.actions.contract import OptionsT, RegisteredAction, ResolvedAction
from ddo_hooks.actions.registry import registered
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.errors import PolicyError
from ddo_hooks.policy.messages import located_line
from ddo_hooks.policy.parts import BoundaryPolicy
from ddo_hooks.policy.rules import Located

__all__ = ["Sections", "defaults_of", "fitted", "resolve_actions", "written_settings"]


class Sections(Protocol):
    """What resolving reads of a policy: its boundaries, and the sections an action's ``defaults`` gives."""

    def boundary(self, name: str) -> BoundaryPolicy:
        """The settings of one boundary."""
        ...


def written_settings(section: BaseModel) -> dict[str, Any]:
    """The settings a section writes (those it was given), as it holds them: the defaults it gives an action.

    Examples:
        >>> from ddo_hooks.actions.host_cache_release import HostCacheReleaseOptions
        >>> written_settings(HostCacheReleaseOptions.model_validate({"collect": "young"}))
        {'collect': 'young'}
    """
    return {name: getattr(section, name) for name in section.model_fields_set}


def defaults_of(policy: Sections, action: RegisteredAction[Any] | None) -> dict[str, Any] | None:
    """The settings of the policy's section that holds defaults of ``action``'s options (``None``: it has none)."""
    if action is None or action.defaults is None:
        return None
    return written_settings(action.defaults(policy))


def resolve_actions(
    policy: Sections, *, failed: Iterable[KeyPath] = ()
) -> tuple[dict[str, tuple[ResolvedAction[Any], ...]], list[Located]]:
    """Each boundary's actions, in order, each with the options it receives, resolved once; and their problems.

    An action registered now gets its options as :meth:`~ddo_hooks.actions.contract.RegisteredAction.resolve`
    gives them: the settings of the policy's section that holds its defaults (``release`` for
    ``host_cache_release``) merged under what the entry writes, validated once, every problem found; any other
    action its options as written (resolved when it is bound, at attach). A boundary whose actions did not
    parse (a key path of ``failed``) is left out.

    Returns:
        The resolved actions by boundary, and each problem with the key path it points at.
    """
    failed = tuple(failed)
    resolved: dict[str, tuple[ResolvedAction[Any], ...]] = {}
    problems: list[Located] = []
    for name in BOUNDARIES:
        where: KeyPath = ("boundaries", name, "actions")
        if any(where[: len(path)] == path or path[: len(where)] == where for path in failed):
            continue
        found = []
        for index, spec in enumerate(policy.boundary(name).actions):
            entry: ResolvedAction[Any] = ResolvedAction(spec.name, spec.options, name, index, spec.options)
            action = registered(spec.name)
            try:
                options = spec.options if action is None else action.resolve(spec.options, defaults_of(policy, action))
            except PydanticCustomError as e:
                problems.append((entry.at, e))
                continue
            except ValidationError as e:
                problems += [(entry.at, _custom(item)) for item in e.errors(include_url=False)]
                continue
            found.append(dataclasses.replace(entry, options=options))
        resolved[name] = tuple(found)
    return resolved, problems


def _custom(item: Any) -> PydanticCustomError:
    """A located error of an options model's problems, back from its ``errors()`` item."""
    return PydanticCustomError(item["type"], "{message}", item.get("ctx") or {"message": item["msg"]})


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
        PolicyError: They do not fit the action's model; the message points at the policy's line, one line
            per problem.
    """
    try:
        return action.fit(resolved, defaults_of(policy, action))
    except PydanticCustomError as e:
        errors = [e]
        cause: Exception = e
    except ValidationError as e:
        errors = [_custom(item) for item in e.errors(include_url=False)]
        cause = e
    lines = [located_line(error, resolved.at, source=source, positions=positions, written=written) for error in errors]
    raise PolicyError("\n".join(lines)) from cause
