"""The built-in actions' options: one table from each built-in action to the model of its options.

:data:`BUILT_IN_OPTIONS` is the one list of the built-in actions; :data:`BUILT_IN_ACTIONS` and the
validation of their options follow from it. A policy writes a built-in action's options like any
action's (``{name: release_done_components, options: {stable_files: true}}``); they are validated
where it writes them, against the action's model (:meth:`ActionOptions.from_options`), and the action
receives an instance of that model (``ctx.options.stable_files``). A built-in without a model
(``None``) takes its options as written, as an action of your own does. What each action runs is in
:mod:`ddo_hooks.hooks.builtin_actions`, one entry per name of this table.

Examples:
    >>> BUILT_IN_ACTIONS
    ('host_cache_release', 'malloc_trim', 'release_done_components', 'stage_done_components')
    >>> builtin_options("release_done_components", {"components": ["text_encoder"]})
    DoneComponentsOptions(components=('text_encoder',), stable_files=False, evict=False)
    >>> builtin_options("my_pkg.flush", {"label": "x"}) is None  # not a built-in: options as written
    True
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import KeyPath, show_value
from ddo_hooks.boundaries import HOST_CACHE_RELEASE, MALLOC_TRIM, RELEASE_DONE_COMPONENTS, STAGE_DONE_COMPONENTS
from ddo_hooks.policy.base import Model, located_error
from ddo_hooks.policy.messages import literal_problem
from ddo_hooks.sizes import ByteSize, format_size

if TYPE_CHECKING:
    from ddo_hooks.policy.model import HookPolicy

__all__ = [
    "BUILT_IN_ACTIONS",
    "BUILT_IN_OPTIONS",
    "ActionOptions",
    "DoneComponentsOptions",
    "NoOptions",
    "ReleasePolicy",
    "builtin_options",
    "core_conflict",
    "shown_setting",
]


class ActionOptions(Model):
    """The base of a built-in action's options model: strict, frozen, read by attribute.

    Examples:
        >>> NoOptions.from_options("stage_done_components", {})
        NoOptions()
        >>> NoOptions.from_options("stage_done_components", {"now": True})
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.PydanticCustomError: unknown option of stage_done_components; ...
        >>> NoOptions.takes()  # what the message says it takes
        'none'
    """

    @classmethod
    def takes(cls) -> str:
        """The options the model takes, as the message that refuses an unknown one lists them."""
        return ", ".join(cls.model_fields) or "none"

    def in_policy(self, policy: HookPolicy, written: Mapping[str, Any], at: KeyPath) -> ActionOptions:
        """The options the action receives in ``policy``, where it writes ``written`` (at the key path ``at``).

        These options themselves, unless a model takes defaults from elsewhere in the policy
        (:class:`ReleasePolicy`: from its ``release`` section).

        Raises:
            PydanticCustomError: They do not fit the policy's other settings; located below ``at``.
        """
        return self

    @classmethod
    def from_options(cls, action: str, options: Mapping[str, Any]) -> Self:
        """``action``'s ``options`` as a policy writes them, validated into this model.

        Args:
            action: The action's name, for the messages.
            options: Its options (JSON data).

        Raises:
            PydanticCustomError: An unknown option or a value the model refuses, located at
                ``options.<key>`` (inside a policy's validation: one located line of its
                :class:`~ddo_hooks.errors.PolicyError`).
        """
        for key in options:
            if key not in cls.model_fields:
                message = f"unknown option of {action}; it takes {cls.takes()}"
                raise located_error("release_option", message, ("options", key))
        try:
            return cls.model_validate(options)
        except ValidationError as e:
            raise _located(cls, e, options) from e


def _located(model: type[ActionOptions], error: ValidationError, options: Mapping[str, Any]) -> PydanticCustomError:
    """The first problem of ``error`` as a located error at ``options.<key>``, showing the value as written."""
    item = error.errors(include_url=False)[0]
    context = item.get("ctx") or {}
    if "at" in context:  # a located error of the model's own validators (core: ddo with a setting it cannot honour)
        at = (*item["loc"], *context["at"])
        message = context.get("template", context["message"])
        return located_error("release_option", message, ("options", *at), value=options.get(str(at[0])))
    at, value = ("options", *item["loc"]), item["input"]
    if item["type"] == "literal_error":
        choices = typing.get_args(model.model_fields[str(item["loc"][0])].annotation)
        message = literal_problem("{value}", choices, value)
    elif item["type"] == "size":
        message = f"{{value}} {context['problem']}"
    else:
        message = f"{{value}}: {item['msg'].removeprefix('Value error, ')}"
    return located_error("release_option", message, at, value=value)


class ReleasePolicy(ActionOptions):
    """Settings of the built-in ``host_cache_release`` action.

    The policy's ``release`` section holds them for every boundary; a boundary may override
    them with the action's ``options`` (``{name: host_cache_release, options: {collect: full}}``).
    """

    collect: Literal["full", "young", "auto"] = "auto"
    """Garbage collection before the release: ``full`` (every generation), ``young`` (0 and 1)
    or ``auto`` (young, then full only if a dropped component is still alive)."""
    min_releasable_bytes: ByteSize = 0
    """Skip the release when fewer cached bytes are releasable (``0``: always release)."""
    trigger: Literal["always", "dropped"] = "always"
    """``always``; or ``dropped``: release only when a component left the pipeline since the
    previous boundary (its pinned copies are then in the cache), else a ``not_triggered`` no-op."""
    core: Literal["ddo_hooks", "ddo"] = "ddo_hooks"
    """The release core the action calls: ``ddo_hooks`` (its own) or ``ddo``: DDO's
    ``release_pytorch_host_cache``, recorded as DDO's own report (needs diffusers-dynamic-offloader
    0.1.0rc2 and torch >= 2.12, checked at attach; DDO always collects fully and has no threshold)."""

    @classmethod
    def takes(cls) -> str:
        """Its options: the keys of the policy's ``release`` section."""
        return f"{', '.join(cls.model_fields)} (the keys of 'release')"

    def in_policy(self, policy: HookPolicy, written: Mapping[str, Any], at: KeyPath) -> ReleasePolicy:
        """The policy's ``release`` settings, overridden by the ones ``written`` at this boundary.

        Raises:
            PydanticCustomError: Each valid, the two do not fit once merged (``core: ddo`` in one, a
                setting it cannot honour in the other); located at the action's setting.

        Examples:
            >>> from ddo_hooks import HookPolicy
            >>> policy = HookPolicy.from_mapping({"version": 1, "release": {"collect": "young"}})
            >>> ReleasePolicy(trigger="dropped").in_policy(policy, {"trigger": "dropped"}, ())
            ReleasePolicy(collect='young', min_releasable_bytes=0, trigger='dropped', core='ddo_hooks')
        """
        base = policy.release.model_dump()
        own = {key: getattr(self, key) for key in written}
        conflict = core_conflict({**base, **own})
        if conflict is not None:
            key, problem = conflict
            if key in own:
                message = f"{shown_setting(key, own[key])} does not fit core: ddo (from release): {problem}"
                raise located_error("release_core", message, (*at, "options", key), value=written[key])
            setting = shown_setting(key, base[key]).replace("{value}", show_value(base[key]))
            message = f"{{value}} does not fit release.{key}: {setting}: {problem}"
            raise located_error("release_core", message, (*at, "options", "core"), value=written["core"])
        return policy.release.model_copy(update=own)

    @model_validator(mode="after")
    def _core_takes_the_settings(self) -> ReleasePolicy:
        conflict = core_conflict(self.model_dump())
        if conflict is not None:
            key, problem = conflict
            value = getattr(self, key)
            message = f"{shown_setting(key, value)} does not fit core: ddo: {problem}"
            raise located_error("release_core", message, (key,), value=value)
        return self


def shown_setting(key: str, value: object) -> str:
    """How a release setting's value is shown in a message: a size for people, else as written (``{value}``).

    Examples:
        >>> shown_setting("min_releasable_bytes", 64 << 20), shown_setting("collect", "young")
        ('64.0 MiB', '{value}')
    """
    return format_size(value) if key == "min_releasable_bytes" and type(value) is int else "{value}"


def core_conflict(settings: Mapping[str, Any]) -> tuple[str, str] | None:
    """The setting that DDO's release core cannot honour, and why, when ``settings`` choose ``core: ddo``.

    DDO's ``release_pytorch_host_cache`` always runs ``gc.collect()`` (every generation) and has
    no threshold: ``collect: young`` and a ``min_releasable_bytes`` above 0 would be ignored.

    Args:
        settings: A release's settings, as :class:`ReleasePolicy` dumps them.

    Returns:
        ``(key, problem)``: the setting and a sentence with its fix; ``None`` when the settings
        fit the chosen core.

    Examples:
        >>> core_conflict({"core": "ddo", "collect": "young", "min_releasable_bytes": 0})[0]
        'collect'
        >>> core_conflict({"core": "ddo_hooks", "collect": "young", "min_releasable_bytes": 1}) is None
        True
    """
    if settings.get("core") != "ddo":
        return None
    fix = "or core: ddo_hooks (the default)"
    if settings.get("collect") == "young":
        return "collect", f"DDO's release core always collects every generation (gc.collect()); use full or auto, {fix}"
    if settings.get("min_releasable_bytes"):
        return "min_releasable_bytes", f"DDO's release core has no threshold; leave min_releasable_bytes at 0, {fix}"
    return None


_FLAGS = {
    "stable_files": "true declares that the components' weights files stay as they are while the pipeline is "
    "attached, so that copies equal to them may be freed",
    "evict": "true evicts the dropped file pages from the page cache too, so that they leave the cgroup's charge",
}


class DoneComponentsOptions(ActionOptions):
    """The options of the built-in ``release_done_components``.

    Examples:
        >>> options = DoneComponentsOptions.from_options("release_done_components", {"stable_files": True})
        >>> options.stable_files
        True
    """

    components: tuple[str, ...] | None = None
    """The components to give back (default: those whose work in the call is done)."""
    stable_files: bool = False
    """Free copies of weights equal to their files: the files stay as they are while the pipeline is attached."""
    evict: bool = False
    """Evict the dropped file pages from the page cache too."""

    @classmethod
    def takes(cls) -> str:
        """Its options, with what each holds."""
        return "components (a list of component names), stable_files and evict (true or false)"

    @field_validator("components", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        if not isinstance(value, list) or not value or not all(isinstance(n, str) and n for n in value):
            fix = "use e.g. [text_encoder, text_encoder_2], or leave it out"
            message = f"{{value}} is not a list of component names; {fix}"
            raise located_error("release_option", message, value=value)
        return value

    @field_validator("stable_files", "evict", mode="before")
    @classmethod
    def _flag(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, bool):
            message = "{value} is not true or false; " + _FLAGS[str(info.field_name)]
            raise located_error("release_option", message, value=value)
        return value


class NoOptions(ActionOptions):
    """The options of a built-in action that takes none (``stage_done_components``).

    Examples:
        >>> NoOptions.takes()
        'none'
    """


BUILT_IN_OPTIONS: dict[str, type[ActionOptions] | None] = {
    HOST_CACHE_RELEASE: ReleasePolicy,
    MALLOC_TRIM: None,  # takes its options as written, as ever (it reads none)
    RELEASE_DONE_COMPONENTS: DoneComponentsOptions,
    STAGE_DONE_COMPONENTS: NoOptions,
}
"""Each built-in action and the model of its options (``None``: its options as written, unchecked). The
actions of :mod:`ddo_hooks.hooks.builtin_actions` are registered under exactly these names (a test keeps
the two equal)."""

BUILT_IN_ACTIONS: tuple[str, ...] = tuple(BUILT_IN_OPTIONS)
"""The actions ddo_hooks registers itself (they cannot be unregistered)."""


def builtin_options(name: str, options: Mapping[str, Any]) -> ActionOptions | None:
    """The options of the action ``name`` as its model holds them; ``None`` for an action without a model.

    Raises:
        PydanticCustomError: As :meth:`ActionOptions.from_options`.

    Examples:
        >>> builtin_options("host_cache_release", {"collect": "full"}).collect
        'full'
    """
    model = BUILT_IN_OPTIONS.get(name)
    return None if model is None else model.from_options(name, options)
