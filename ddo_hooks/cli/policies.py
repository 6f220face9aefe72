r"""The policies the commands read: a file or a preset, every problem of it in one run, and its sizes.

``validate-policy FILE`` and ``demo --policy FILE`` read a policy file, or a preset by its name
where no file of that name exists (:func:`policy_or_preset`). Beyond what
:class:`~ddo_hooks.policy.model.HookPolicy` checks, an action name that no action has but that is
close to one (``host_cache_relase``) is refused, as ``attach`` would refuse it; a name close to none
stays allowed, since the host may register it before attaching. Each such name is one more located
line of the same message, in file order with the policy's other problems (:func:`near_misses`).

Examples:
    >>> import pathlib, tempfile
    >>> from ddo_hooks.errors import PolicyError
    >>> text = ("version: 1\nrelease: {collect: sometimes}\n"
    ...         "boundaries:\n  before_vae: {actions: [host_cache_relase]}\n")
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = pathlib.Path(folder) / "p.yaml"
    ...     _ = path.write_text(text, encoding="utf-8")
    ...     try:
    ...         policy_or_preset(str(path))
    ...     except PolicyError as e:
    ...         print("\n".join(line.split(": ", 1)[1][:60] for line in str(e).splitlines()))
    release.collect: 'sometimes' is not one of full, young, auto
    unknown action 'host_cache_relase'; did you mean 'host_cache
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ddo_hooks.errors import PolicyError
from ddo_hooks.policy import PRESETS

__all__ = [
    "action_text",
    "near_misses",
    "policy_or_preset",
    "preset_path",
    "setting_lines",
    "size_lines",
    "unregistered",
]


def preset_path(name: str) -> str | None:
    """The packaged file of the preset ``name`` when no file of that name exists here, else ``None``."""
    from ddo_hooks.policy.model import preset_file

    if name in PRESETS and not os.path.exists(name):
        return str(preset_file(name))
    return None


def policy_or_preset(name: str) -> Any:
    """``--policy``: a policy file, or when no such file exists, a preset's name (``lowest-peak``).

    Raises:
        PolicyError: The policy's problems and each action name nearly right, one located line each, in file order.
    """
    from ddo_hooks.policy.messages import join_problems
    from ddo_hooks.policy.model import HookPolicy

    preset = preset_path(name) is not None
    try:
        policy = HookPolicy.from_name_or_yaml(name)
    except PolicyError as e:
        near = [] if preset or not e.problems else near_misses(name)
        if not near:
            raise
        raise PolicyError(join_problems([*e.problems, *near])) from e
    near = [] if preset else near_misses(name)
    if near:
        raise PolicyError(join_problems(near))
    return policy


def near_misses(path: str) -> list[tuple[tuple[int, int], str]]:
    """Each action name of the policy file ``path`` that no action has but is close to one, as ``attach`` words it.

    Only the actions of boundaries that act are looked at (``enabled: false`` at the top, or at a
    boundary, leaves them out), as :func:`~ddo_hooks.attach` does. A file that cannot be read as YAML
    has none: its own problems are said.
    """
    import difflib

    from ddo_hooks._diagnostics import nearest_position, where
    from ddo_hooks.actions.registry import available_actions, resolve_action
    from ddo_hooks.boundaries import BOUNDARIES
    from ddo_hooks.policy.yaml_loader import compose_policy_yaml, read_policy_file

    try:
        loaded = compose_policy_yaml(read_policy_file(path), path)
    except PolicyError:
        return []
    data, positions = loaded.data, loaded.positions
    boundaries = data.get("boundaries") if isinstance(data, Mapping) and data.get("enabled") is not False else None
    known = available_actions()
    found: list[tuple[tuple[int, int], str]] = []
    for boundary in BOUNDARIES:
        settings = boundaries.get(boundary) if isinstance(boundaries, Mapping) else None
        actions = (
            settings.get("actions") if isinstance(settings, Mapping) and settings.get("enabled") is not False else None
        )
        for index, entry in enumerate(actions if isinstance(actions, list) else []):
            name = entry.get("name") if isinstance(entry, Mapping) else entry
            if not isinstance(name, str) or name in known or not difflib.get_close_matches(name, known, n=1):
                continue
            at = ("boundaries", boundary, "actions", index)
            try:
                resolve_action(name, where=where(path, positions, at))
            except PolicyError as e:
                found.append((nearest_position(positions, at) or (0, 0), str(e)))
    return found


def size_lines(policy: Any, path: str) -> list[str]:
    """Each size of the policy as written and in bytes, so that the unit can be checked."""
    from ddo_hooks._diagnostics import format_key_path
    from ddo_hooks.actions.host_cache_release import NAME as HOST_CACHE_RELEASE
    from ddo_hooks.boundaries import BOUNDARIES
    from ddo_hooks.policy.yaml_loader import load_yaml, read_policy_file
    from ddo_hooks.sizes import format_size

    data, _ = load_yaml(read_policy_file(path))
    sizes: list[tuple[tuple[str | int, ...], int]] = [
        (("release", "min_releasable_bytes"), policy.release.min_releasable_bytes),
        (("auxiliary_sources", "max_copy_bytes"), policy.auxiliary_sources.max_copy_bytes),
    ]
    for name in BOUNDARIES:
        for action in policy.actions(name):
            if action.name == HOST_CACHE_RELEASE and "min_releasable_bytes" in action.written:
                sizes.append(((*action.at, "options", "min_releasable_bytes"), action.options.min_releasable_bytes))
    lines = []
    for key_path, size in sizes:
        written: Any = data
        for part in key_path:
            if isinstance(written, dict) and isinstance(part, str):
                written = written.get(part)
            elif isinstance(written, list) and isinstance(part, int) and part < len(written):
                written = written[part]
            else:
                written = None
        exact = f"{size:,} byte{'' if size == 1 else 's'}"
        name = format_key_path(key_path)
        if written is None:
            lines.append(f"{name}: {exact} ({format_size(size)}, the default)")
        else:
            lines.append(f"{name}: {written} = {exact}" + ("" if size < 1024 else f" ({format_size(size)})"))
    return lines


def unregistered(policy: Any) -> list[tuple[str, str]]:
    """Each action of an enabled boundary that no code in this environment registers, and where (``file:line:col``).

    :func:`~ddo_hooks.attach` refuses such an action; a host may register it before attaching.
    """
    from ddo_hooks.actions.registry import available_actions

    known = set(available_actions())
    return [
        (action.name, policy.locate(("boundaries", boundary, "actions", index)))
        for boundary in policy.enabled_boundaries()
        for index, action in enumerate(policy.boundary(boundary).actions)
        if action.name not in known
    ]


def _yaml(value: Any) -> str:
    """A value as a policy file writes it (flow style): ``register``, ``true``, ``null``, ``[512, 1024]``."""
    import yaml

    return (
        str(yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6))
        .removesuffix("\n...\n")
        .strip()
    )


def action_text(action: Any) -> str:
    """An action as the summary shows it: its name, and the options the policy sets (``name {key: value}``).

    Examples:
        >>> from ddo_hooks.policy.parts import ActionSpec
        >>> action_text(ActionSpec.model_validate({"name": "release_done_components",
        ...                                        "options": {"stable_files": True}}))
        'release_done_components {stable_files: true}'
    """
    if not action.options:
        return str(action.name)
    return f"{action.name} {_yaml(dict(action.options))}"


_SHOWN_ELSEWHERE = {
    ("version",),
    ("enabled",),
    ("device",),
    ("release", "min_releasable_bytes"),
    ("auxiliary_sources", "max_copy_bytes"),
}
"""The keys the summary's other lines show: the first line, and :func:`size_lines`."""


def setting_lines(policy: Any) -> list[str]:
    """Each setting of the policy (beyond its boundaries) that differs from the default, with the default.

    A preset is its non-default keys: ``smallest-box`` is ``pinned_copies.from_files: register`` and
    ``pinned_copies.keep_encoders_pinned: true``.
    """
    from ddo_hooks._diagnostics import format_key_path
    from ddo_hooks.policy.model import HookPolicy

    def leaves(data: Any, at: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
        if isinstance(data, dict):
            return {k: v for key, value in data.items() for k, v in leaves(value, (*at, key)).items()}
        return {at: data}

    ours, default = (leaves({**p.model_dump(mode="json"), "boundaries": {}}) for p in (policy, HookPolicy.default()))
    return [
        f"{format_key_path(key)}: {_yaml(value)} (default: {_yaml(default.get(key))})"
        for key, value in ours.items()
        if key not in _SHOWN_ELSEWHERE and value != default.get(key)
    ]
