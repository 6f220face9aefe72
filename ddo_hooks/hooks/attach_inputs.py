"""What :func:`~ddo_hooks.attach` takes besides the pipeline: the policy, as it attaches it, and the registry.

Examples:
    >>> chosen_policy("smallest-box").pinned_copies.from_files, chosen_registry(None) is REGISTRY
    ('register', True)
"""

from __future__ import annotations

import os

from ddo_hooks.actions.registry import REGISTRY, ActionRegistry
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.policy.model import HookPolicy

__all__ = ["chosen_policy", "chosen_registry", "with_encoders"]


def chosen_policy(policy: HookPolicy | str | os.PathLike[str] | None) -> HookPolicy:
    """The policy :func:`~ddo_hooks.attach` was given: the default for ``None``, else a preset or a file loaded.

    Raises:
        InvalidArgumentError: Not a policy, a path, a name or ``None``.
        PolicyError: As :meth:`~ddo_hooks.policy.model.HookPolicy.from_name_or_yaml`.
    """
    if policy is None:
        return HookPolicy.default()
    if isinstance(policy, HookPolicy):
        return policy
    if isinstance(policy, (str, os.PathLike)):
        return HookPolicy.from_name_or_yaml(policy)
    raise InvalidArgumentError(
        f"policy must be a HookPolicy, a path to a YAML policy or None (the default policy), "
        f"got {type(policy).__name__}"
    )


def with_encoders(policy: HookPolicy, keep: bool | None) -> HookPolicy:
    """``policy`` with ``pinned_copies.keep_encoders_pinned`` set to ``keep`` (unchanged when ``None``).

    Raises:
        InvalidArgumentError: ``keep`` is not a bool or ``None``, or it pins the encoders where the policy pins
            nothing from files.
    """
    if keep is None or keep == policy.pinned_copies.keep_encoders_pinned:
        return policy
    if not isinstance(keep, bool):
        raise InvalidArgumentError(f"keep_encoders_pinned must be True, False or None, got {keep!r}")
    if policy.pinned_copies.from_files is None:
        raise InvalidArgumentError(
            "keep_encoders_pinned=True pins the encoders from their files, and the policy's pinned_copies.from_files "
            "is null: use a policy that sets it (register or stage)"
        )
    pinned = policy.pinned_copies.model_validate({**policy.pinned_copies.model_dump(), "keep_encoders_pinned": keep})
    return policy.model_copy(update={"pinned_copies": pinned})


def chosen_registry(registry: ActionRegistry | None) -> ActionRegistry:
    """Where :func:`~ddo_hooks.attach` finds the policy's actions: ``registry``, or the process's (``None``).

    Raises:
        InvalidArgumentError: Not an :class:`~ddo_hooks.actions.registry.ActionRegistry` or ``None``.
    """
    if registry is None:
        return REGISTRY
    if not isinstance(registry, ActionRegistry):
        raise InvalidArgumentError(
            f"registry must be a ddo_hooks.actions.registry.ActionRegistry or None, got {type(registry).__name__}"
        )
    return registry
