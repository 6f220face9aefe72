"""What :func:`~ddo_hooks.attach` takes besides the pipeline: the policy, as it attaches it.

Examples:
    >>> chosen_policy("smallest-box").pinned_copies.from_files
    'register'
"""

from __future__ import annotations

import os

from ddo_hooks.actions.registry import ActionRegistry
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.policy.model import HookPolicy

__all__ = ["chosen_policy", "with_encoders"]


def chosen_policy(
    policy: HookPolicy | str | os.PathLike[str] | None, registry: ActionRegistry | None = None
) -> HookPolicy:
    """The policy :func:`~ddo_hooks.attach` was given: the default for ``None``, else a preset or a file loaded.

    One it loads finds its actions in ``registry`` (``None``: the process's).

    Raises:
        InvalidArgumentError: Not a policy, a path, a name or ``None``.
        PolicyError: As :meth:`~ddo_hooks.policy.model.HookPolicy.from_name_or_yaml`.
    """
    if policy is None:
        return HookPolicy.preset("default", registry=registry)
    if isinstance(policy, HookPolicy):
        return policy
    if isinstance(policy, (str, os.PathLike)):
        return HookPolicy.from_name_or_yaml(policy, registry=registry)
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
