"""The sections of a hook policy: boundaries and their actions, the release settings, the diagnostics.

:class:`~ddo_hooks.policy.model.HookPolicy` is made of these models; each is strict and frozen,
and every validation problem carries the key path where a message should point.

Examples:
    >>> spec = ActionSpec.model_validate({"name": "host_cache_release", "options": {"collect": "full"}})
    >>> spec.options
    {'collect': 'full'}
    >>> BoundaryPolicy().action_names()
    ('host_cache_release',)
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import KeyPath, show_value
from ddo_hooks.boundaries import ACTION_NAME_PATTERN, HOST_CACHE_RELEASE, RELEASE_DONE_COMPONENTS, STAGE_DONE_COMPONENTS
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.policy.messages import literal_problem
from ddo_hooks.release.devices import parse_cuda_device
from ddo_hooks.sizes import ByteSize, format_size

__all__ = [
    "DEVICE_PATTERN",
    "ActionEntry",
    "ActionName",
    "ActionSpec",
    "Duration",
    "AuxiliarySourcesPolicy",
    "BoundariesPolicy",
    "BoundaryPolicy",
    "Model",
    "ReleasePolicy",
    "core_conflict",
    "shown_setting",
    "located_error",
    "parse_duration",
    "validate_device",
]

_ACTION_NAME_RE = re.compile(ACTION_NAME_PATTERN)
DEVICE_PATTERN = r"^cuda(:[0-9]+)?$"
"""The ``device`` values a policy accepts."""


def located_error(kind: str, message: str, at: KeyPath = (), *, value: object = None) -> PydanticCustomError:
    """A validation error; ``at`` is a key path below the field, where the message points.

    Where ``message`` holds ``{value}``, the value is shown there: as the YAML wrote it when the
    policy came from YAML (``yes``), else as :func:`~ddo_hooks._diagnostics.show_value` writes it.

    Examples:
        >>> located_error("device", "{value} is not a CUDA device", value=True).message()
        'true is not a CUDA device'
    """
    context: dict[str, Any] = {"message": message.replace("{value}", show_value(value)), "at": at}
    if "{value}" in message:
        context["template"] = message
    return PydanticCustomError(kind, "{message}", context)


def validate_device(value: object) -> str:
    """A policy's ``device``: ``cuda`` or ``cuda:N`` (a :func:`located_error` otherwise)."""
    try:
        index = parse_cuda_device(value if isinstance(value, str) else None)
    except InvalidArgumentError as e:
        raise located_error("device", "{value} is not a CUDA device; use 'cuda' or 'cuda:N'", value=value) from e
    return "cuda" if index is None else f"cuda:{index}"


def _action_name(value: object) -> object:
    if isinstance(value, str) and not _ACTION_NAME_RE.match(value):
        rule = "a lowercase letter, then a-z, 0-9, '_', '.', '-'"
        raise located_error("action_name", f"{{value}} is not an action name; use {rule}", value=value)
    return value


def _action_entry(value: object) -> object:
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, (Mapping, ActionSpec)):
        return value
    form = f"an action name (e.g. {HOST_CACHE_RELEASE}) or a mapping {{name: ..., options: {{...}}}}"
    raise located_error("action_entry", f"expected {form}, got {{value}}", value=value)


def _json_value(value: object, at: KeyPath) -> Any:
    """Check that ``value`` is JSON data; return a copy with tuples as lists."""
    if len(at) > 64:
        raise located_error("json_value", "options nest more than 64 levels deep (or contain themselves)", at[:1])
    if isinstance(value, float) and not math.isfinite(value):
        message = "{value} is not a JSON number; use a finite number or a string"
        raise located_error("json_value", message, at, value=value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(item, (*at, i)) for i, item in enumerate(value)]
    if not isinstance(value, Mapping):
        kinds = "strings, numbers, booleans, null, lists and mappings"
        raise located_error("json_value", f"a {type(value).__name__} is not a JSON value; use {kinds}", at)
    for key in value:
        if not isinstance(key, str):
            raise located_error("json_value", f"option key {show_value(key)} is not a string; quote it", at)
    return {key: _json_value(item, (*at, key)) for key, item in value.items()}


ActionName = Annotated[
    str, BeforeValidator(_action_name), WithJsonSchema({"type": "string", "pattern": ACTION_NAME_PATTERN})
]
"""A registered action's name, e.g. ``host_cache_release`` (see :data:`ACTION_NAME_PATTERN`)."""


class Model(BaseModel):
    """The base of every policy model: strict (unknown keys refused), frozen, fields documented."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ReleasePolicy(Model):
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


def _check_release_options(options: Mapping[str, Any]) -> None:
    """Refuse ``host_cache_release`` options that are not :class:`ReleasePolicy` settings."""
    for key in options:
        if key not in ReleasePolicy.model_fields:
            keys = ", ".join(ReleasePolicy.model_fields)
            message = f"unknown option of {HOST_CACHE_RELEASE}; it takes {keys} (the keys of 'release')"
            raise located_error("release_option", message, ("options", key))
    try:
        ReleasePolicy.model_validate(options)
    except ValidationError as e:
        item = e.errors(include_url=False)[0]
        at, value = ("options", *item["loc"]), item["input"]
        if item["type"] == "release_core":  # core: ddo with a setting it cannot honour, both in these options
            key = item["ctx"]["at"][0]
            message = item["ctx"].get("template", item["ctx"]["message"])
            raise located_error("release_option", message, ("options", key), value=options[key]) from e
        if item["type"] == "literal_error":
            choices = typing.get_args(ReleasePolicy.model_fields[str(item["loc"][0])].annotation)
            message = literal_problem("{value}", choices, value)
        elif item["type"] == "size":
            message = f"{{value}} {item['ctx']['problem']}"
        else:
            message = f"{{value}}: {item['msg'].removeprefix('Value error, ')}"
        raise located_error("release_option", message, at, value=value) from e


def _check_done_options(options: Mapping[str, Any]) -> None:
    """Refuse ``release_done_components`` options but ``components`` (a list of names) and ``stable_files`` (a bool)."""
    for key in options:
        if key not in ("components", "stable_files", "evict"):
            message = (
                f"unknown option of {RELEASE_DONE_COMPONENTS}; it takes components (a list of component names), "
                "stable_files and evict (true or false)"
            )
            raise located_error("release_option", message, ("options", key))
    names = options.get("components")
    if "components" in options and (
        not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names)
    ):
        message = "{value} is not a list of component names; use e.g. [text_encoder, text_encoder_2], or leave it out"
        raise located_error("release_option", message, ("options", "components"), value=names)
    meanings = {
        "stable_files": "true declares that the components' weights files stay as they are while the pipeline is "
        "attached, so that copies equal to them may be freed",
        "evict": "true evicts the dropped file pages from the page cache too, so that they leave the cgroup's charge",
    }
    for key, meaning in meanings.items():
        if not isinstance(options.get(key, False), bool):
            message = "{value} is not true or false; " + meaning
            raise located_error("release_option", message, ("options", key), value=options[key])


_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s|m|min)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}
MAX_DURATION_SECONDS = 24 * 3600


def parse_duration(value: object) -> float:
    """A duration in seconds, from a number of seconds or a string such as ``2s``, ``500ms``, ``1.5 min``.

    Raises:
        PydanticCustomError: Negative, non-finite, longer than a day, or not a duration.

    Examples:
        >>> parse_duration("2s"), parse_duration("500ms"), parse_duration(1.5), parse_duration("1 min")
        (2.0, 0.5, 1.5, 60.0)
    """
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION_RE.match(value)):
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds is None or not math.isfinite(seconds) or not 0 <= seconds <= MAX_DURATION_SECONDS:
        forms = "a number of seconds, or e.g. '2s', '500ms', '1 min' (at most a day)"
        raise located_error("duration", f"{show_value(value)} is not a duration; use {forms}")
    return seconds


Duration = Annotated[
    float,
    BeforeValidator(parse_duration, json_schema_input_type=Annotated[float, Field(ge=0)] | str),
]
"""Seconds, written as a number or with a unit (``2s``, ``500ms``, ``1 min``)."""


class ActionSpec(Model):
    """One action a boundary runs; in YAML either its name or ``{name: ..., options: {...}}``."""

    name: ActionName
    """The action's registered name. Whether it exists is checked when the policy is attached."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the action: any JSON data (no NaN or infinity)."""

    @field_validator("options", mode="before")
    @classmethod
    def _json_options(cls, value: object) -> object:
        return _json_value(value, ()) if isinstance(value, Mapping) else value

    @model_validator(mode="after")
    def _builtin_options(self) -> ActionSpec:
        if self.name == HOST_CACHE_RELEASE:
            _check_release_options(self.options)
        elif self.name == RELEASE_DONE_COMPONENTS:
            _check_done_options(self.options)
        elif self.name == STAGE_DONE_COMPONENTS and self.options:
            message = f"unknown option of {STAGE_DONE_COMPONENTS}; it takes none"
            raise located_error("release_option", message, ("options", next(iter(self.options))))
        return self


ActionEntry = Annotated[ActionSpec, BeforeValidator(_action_entry, json_schema_input_type=ActionName | ActionSpec)]


class BoundaryPolicy(Model):
    """What one phase boundary does."""

    enabled: StrictBool = True
    """Whether the boundary acts; a disabled boundary is a no-op."""
    actions: tuple[ActionEntry, ...] = (ActionSpec(name=HOST_CACHE_RELEASE),)
    """The actions run at the boundary, in order; each name at most once."""
    idle: Duration | None = None
    """``after_call`` only: run the actions once the pipeline has been idle this long after the
    call (e.g. ``2s``, ``500ms``), instead of at once; the next call cancels them. Back-to-back
    calls keep their pinned cache; an idle service gives it back."""

    @field_validator("actions")
    @classmethod
    def _unique(cls, actions: tuple[ActionSpec, ...]) -> tuple[ActionSpec, ...]:
        seen: dict[str, int] = {}
        for index, action in enumerate(actions):
            if action.name in seen:
                twice = f"action {action.name!r} is listed twice (entries {seen[action.name]} and {index})"
                raise located_error("duplicate_action", f"{twice}; list each action once", (index,))
            seen[action.name] = index
        return actions

    @model_validator(mode="after")
    def _acts(self) -> BoundaryPolicy:
        if self.enabled and not self.actions:
            fix = f"add one (e.g. [{HOST_CACHE_RELEASE}]) or set enabled: false"
            raise located_error("no_actions", f"an enabled boundary needs at least one action; {fix}", ("actions",))
        return self

    def action_names(self) -> tuple[str, ...]:
        """The names of the actions, in order."""
        return tuple(action.name for action in self.actions)


class BoundariesPolicy(Model):
    """The three phase boundaries; one not listed keeps its default."""

    @model_validator(mode="after")
    def _idle_after_call_only(self) -> BoundariesPolicy:
        for name in ("before_transformer", "before_vae"):
            if getattr(self, name).idle is not None:
                message = "idle applies to after_call only (no other boundary can wait: the call goes on)"
                raise located_error("idle_boundary", message, (name, "idle"))
        return self

    before_transformer: BoundaryPolicy = Field(default_factory=BoundaryPolicy)
    """After the text encoders ran, before the denoising transformer starts."""
    before_vae: BoundaryPolicy = Field(default_factory=BoundaryPolicy)
    """After denoising, before the VAE decodes."""
    after_call: BoundaryPolicy = Field(default_factory=BoundaryPolicy)
    """After the pipeline call returned."""


class AuxiliarySourcesPolicy(Model):
    """A separate diagnostic opt-in, off by default."""

    enabled: StrictBool = False
    """Whether the auxiliary-source diagnostic runs."""
    max_copy_bytes: ByteSize = 16 * 1024**2
    """The largest copy the diagnostic may make (an int or a size such as ``16MiB``)."""


class PinnedCopiesPolicy(Model):
    """What :func:`~ddo_hooks.attach` does with group offloading's pinned copies."""

    repack: StrictBool = True
    """Repack them at attach into power-of-two slabs, so that they own what they need instead of each being
    rounded up to a power of two, then release the rounded blocks. Only components offloaded with
    ``use_stream=True`` and ``low_cpu_mem_usage=False`` have such copies; the others are left as they are."""
    from_files: Literal["register", "stage"] | None = None
    """Pin the weights of every component but the text and image encoders and priors from their files at
    attach, each weight once in host memory: ``register`` pins the files' own pages in place (no copy;
    processes that map the same files share them; the weights are read-only meanwhile), ``stage`` copies them
    into exact-size slabs, dropping each file page once copied. For a pipeline loaded with its files' dtype and
    offloaded with ``use_stream=True`` and ``low_cpu_mem_usage=True``; the others are left as they are, with the
    reason. Detach gives the weights back their views. ``null`` (the default): nothing."""
