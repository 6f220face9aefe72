"""Where a policy named by a string comes from: the file at that path, or the preset of that name.

:func:`~ddo_hooks.attach` and the CLI's ``--policy`` take a string (:meth:`HookPolicy.from_name_or_yaml
<ddo_hooks.policy.model.HookPolicy.from_name_or_yaml>`). One rule: whatever the path names here is
read as the file, a symbolic link too, so a link that names nothing or loops is refused and never
taken for the preset of its name; only a name that names nothing at all is a preset's. A path this
user may not look up (a folder on its way it may not search) is read as a file, whose reader says
so, never called missing; and YAML text given instead of a path names
:meth:`~ddo_hooks.policy.model.HookPolicy.from_yaml_text`.

A preset's packaged file is :func:`preset_file`.

Examples:
    >>> named_source("lowest-peak"), named_source(__file__)
    ('preset', 'file')
"""

from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Literal

from ddo_hooks._diagnostics import did_you_mean_hint
from ddo_hooks._text_files import broken_link, looks_like_text, text_given_for_path
from ddo_hooks.errors import PolicyError
from ddo_hooks.policy import PRESETS

__all__ = ["named_source", "preset_file"]


def named_source(name: str) -> Literal["preset", "file"]:
    """Whether ``name`` is read as a preset or as the file at that path (see the module's docstring).

    Raises:
        PolicyError: It names nothing and no preset; it is YAML text; or it is a link that names
            nothing or loops, under the name of a preset.
    """
    try:
        os.lstat(name)
    except (FileNotFoundError, NotADirectoryError):
        if name in PRESETS:
            return "preset"
        if looks_like_text(name):
            fix = "load YAML text with HookPolicy.from_yaml_text(text) and pass the policy"
            raise PolicyError(text_given_for_path(name, "policy", fix)) from None
        hint = did_you_mean_hint(name, PRESETS)
        raise PolicyError(
            f"{name}: no such policy file, and no preset of that name; {hint}check the path, or give a "
            f"preset: {', '.join(PRESETS)}"
        ) from None
    except (OSError, ValueError):
        return "file"  # a folder this user may not search, a NUL byte: reading the file says which
    if name in PRESETS and (link := broken_link(name)) is not None:
        raise PolicyError(
            f"{name}: {link}; a name that is here is read as that file, never as the preset of that name: "
            "remove or fix the link, or give the preset from another folder"
        )
    return "file"


def preset_file(name: str) -> Traversable:
    """The packaged file of the preset ``name`` (one of :data:`PRESETS`).

    Examples:
        >>> preset_file("lowest-peak").name
        'lowest-peak.yaml'
    """
    return resources.files("ddo_hooks.policy").joinpath(f"presets/{name}.yaml")
