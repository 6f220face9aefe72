"""The sections of a hook policy: boundaries and their actions, pinned copies, the diagnostics.

:class:`~ddo_hooks.policy.model.HookPolicy` is made of these models; each is strict and frozen,
and every validation problem carries the key path where a message should point. The options of the
actions are their own models (:mod:`ddo_hooks.actions`; the ``release`` section holds
``host_cache_release``'s, :class:`~ddo_hooks.actions.host_cache_release.HostCacheReleaseOptions`), and the
base of every model is in :mod:`ddo_hooks.policy.base`, re-exported here.

Examples:
    >>> spec = ActionSpec.model_validate({"name": "host_cache_release", "options": {"collect": "full"}})
    >>> spec.options
    {'collect': 'full'}
    >>> BoundaryPolicy().action_names()
    ('host_cache_release',)
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    PrivateAttr,
    StrictBool,
    ValidationError,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError

from ddo_hooks import _moved, actions
from ddo_hooks._diagnostics import KeyPath, show_value
from ddo_hooks.actions.contract import ActionOptions, RegisteredAction, ResolvedAction
from ddo_hooks.actions.host_cache_release import NAME as HOST_CACHE_RELEASE
from ddo_hooks.actions.registry import validated_options
from ddo_hooks.boundaries import ACTION_NAME_PATTERN, ACTION_NAME_RULE
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.policy.base import Model, located_error
from ddo_hooks.release.devices import parse_cuda_device
from ddo_hooks.reports.tracker import MAX_RECORDS
from ddo_hooks.sizes import ByteSize

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
    "ResolvedAction",
    "keep_reports_in_range",
    "report_sink_problem",
    "located_error",
    "parse_duration",
    "validate_device",
]

_ACTION_NAME_RE = re.compile(ACTION_NAME_PATTERN)
DEVICE_PATTERN = r"^cuda(:[0-9]+)?$"
"""The ``device`` values a policy accepts."""


def validate_device(value: object) -> str:
    """A policy's ``device``: ``cuda`` or ``cuda:N`` (a :func:`located_error` otherwise)."""
    try:
        index = parse_cuda_device(value if isinstance(value, str) else None)
    except InvalidArgumentError as e:
        raise located_error("device", "{value} is not a CUDA device; use 'cuda' or 'cuda:N'", value=value) from e
    return "cuda" if index is None else f"cuda:{index}"


def _action_name(value: object) -> object:
    if isinstance(value, str) and not _ACTION_NAME_RE.match(value):
        raise located_error("action_name", f"{{value}} is not an action name; use {ACTION_NAME_RULE}", value=value)
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


_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s|m|min)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}
MAX_DURATION_SECONDS = 24 * 3600


def report_sink_problem(value: str) -> str | None:
    """Why ``attach`` could not open ``report_sink`` whatever the folders hold, or ``None``."""
    if "\x00" in value:
        return "{value} holds a NUL character, which no file name may hold; remove it"
    if value.startswith("~"):
        try:
            Path(value).expanduser()
        except RuntimeError:
            user = value[1:].split("/", 1)[0].split(os.sep, 1)[0]
            who = f"no user {user!r} on this machine" if user else "no home folder is known here"
            return f"{{value}} starts with '~' but there is {who}; write the full path, or '~/' for your home"
    return None


def keep_reports_in_range(value: object) -> object:
    """``keep_reports`` from 0 to :data:`~ddo_hooks.reports.tracker.MAX_RECORDS`; other types: the strict int check."""
    if type(value) is int and value < 0:
        raise located_error(
            "keep_reports",
            f"{{value}} is negative; use 0 (none in memory: read report_sink) to {MAX_RECORDS:,}",
            value=value,
        )
    if type(value) is int and value > MAX_RECORDS:
        problem = f"{{value}} is more than {MAX_RECORDS:,}, the most reports an attachment keeps in memory"
        raise located_error(
            "keep_reports", f"{problem}; keep fewer, and read every report from report_sink", value=value
        )
    return value


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
    """One action a boundary runs; in YAML either its name or ``{name: ..., options: {...}}``.

    Its options are validated where the policy loads, against the model of the action registered under
    its name then (:attr:`settings`); the JSON Schema lists each built-in action's options.
    """

    name: ActionName
    """The action's registered name. Whether it exists is checked when the policy is attached."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the action: any JSON data (no NaN or infinity)."""

    @field_validator("options", mode="before")
    @classmethod
    def _json_options(cls, value: object) -> object:
        return _json_value(value, ()) if isinstance(value, Mapping) else value

    _settings: ActionOptions | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _validated_options(self) -> ActionSpec:
        self._settings = _every_option_checked(self.name, self.options)
        return self

    @property
    def settings(self) -> ActionOptions | None:
        """Its options as the model of its action holds them, validated once, with the policy.

        ``None`` for an action without a model (or not registered when the policy loaded).

        Examples:
            >>> ActionSpec(name="host_cache_release", options={"collect": "full"}).settings.collect
            'full'
        """
        return self._settings

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """One of: a built-in action's entry, with the options its model takes, or an entry of another action.

        The built-in actions are those of :data:`~ddo_hooks.actions.BUILT_IN` when the schema is made.
        """
        built_in = actions.BUILT_IN
        entries = [*(_entry_model(action) for action in built_in), _other_entry_model(tuple(a.name for a in built_in))]
        variants = [handler(entry.__pydantic_core_schema__) for entry in entries]
        return {"oneOf": variants, "description": " ".join(str(cls.__doc__).split("\n\n", 1)[0].split())}


_ENTRY = ConfigDict(extra="forbid", frozen=True)


@functools.cache
def _entry_model(action: RegisteredAction[Any]) -> type[BaseModel]:
    """The schema's model of an entry that names the built-in ``action``: its name, and its options model."""
    title = "".join(part.capitalize() for part in re.split(r"[_.\-]", action.name)) + "Entry"
    summary = " ".join((action.run.__doc__ or "").strip().split("\n\n", 1)[0].split())
    named: Any = Literal[action.name]  # one name, known when the schema is made
    options: Any = dict[str, Any] if action.options is None else action.options
    takes = "any JSON data, as written" if action.options is None else f"the keys of ``{action.options.__name__}``"
    return create_model(
        title,
        __config__=_ENTRY,
        __doc__=f"An entry of the built-in ``{action.name}``: {summary}",
        name=(named, Field(description="The action's name.")),
        options=(options, Field(default={}, description=f"Its options: {takes}.")),
    )


@functools.cache
def _other_entry_model(built_in: tuple[str, ...]) -> type[BaseModel]:
    """The schema's model of an entry that names an action of your own (registered, or an entry point's)."""
    name = {"type": "string", "pattern": ACTION_NAME_PATTERN, "not": {"enum": list(built_in)}}
    return create_model(
        "OtherActionEntry",
        __config__=_ENTRY,
        __doc__="An entry of an action of your own: registered (``register_action``) or an entry point's.",
        name=(Annotated[str, WithJsonSchema(name)], Field(description="The action's registered name.")),
        options=(
            dict[str, Any],
            Field(default={}, description="Its options, validated by its own model if it has one."),
        ),
    )


def _every_option_checked(name: str, options: dict[str, Any]) -> ActionOptions | None:
    """:func:`~ddo_hooks.actions.registry.validated_options`, each problem of the options said, not only the first.

    The options model stops at its first problem: the option it names is left out and the rest checked
    again, until they pass. One problem raises as it is; several raise together, each located.
    """
    problems: list[PydanticCustomError] = []
    remaining = dict(options)
    while True:
        try:
            settings = validated_options(name, remaining)
        except PydanticCustomError as e:
            problems.append(e)
            at = tuple((e.context or {}).get("at", ()))
            if len(at) != 2 or at[0] != "options" or at[1] not in remaining:
                break
            del remaining[at[1]]
            continue
        if not problems:
            return settings
        break
    if len(problems) == 1:
        raise problems[0]
    details = [InitErrorDetails(type=problem, loc=(), input=options) for problem in problems]
    raise ValidationError.from_exception_data(ActionSpec.__name__, details)


ActionEntry = Annotated[ActionSpec, BeforeValidator(_action_entry, json_schema_input_type=ActionName | ActionSpec)]


class BoundaryPolicy(Model):
    """What one phase boundary does."""

    enabled: StrictBool = True
    """Whether the boundary acts; a disabled boundary is a no-op."""
    actions: tuple[ActionEntry, ...] = (ActionSpec(name=HOST_CACHE_RELEASE),)
    """The actions run at the boundary, in order; each name at most once. A list (a set, whose order
    follows Python's hash seed, is refused)."""
    idle: Duration | None = None
    """``after_call`` only: run the actions once the pipeline has been idle this long after the
    call (e.g. ``2s``, ``500ms``), instead of at once; the next call cancels them. Back-to-back
    calls keep their pinned cache; an idle service gives it back."""

    @field_validator("actions", mode="before")
    @classmethod
    def _in_order(cls, actions: object) -> object:
        if isinstance(actions, (set, frozenset)):
            fix = "a set has no order of its own (it follows the hash seed): write them as a list"
            raise located_error("actions_in_order", f"actions is a list, in the order they run; {fix}")
        return actions

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
    keep_encoders_pinned: StrictBool = False
    """With ``from_files``: pin the components that run once per call (the text and image encoders, priors) from
    their files too, and keep them pinned between calls, so that they encode from pinned memory at every call
    (their pages stay in memory: with ``register`` they are the files' own pages, not a second copy, and
    ``release_done_components`` leaves them). ``false`` (the default): they are left as loaded."""
    on_ddo_pinning: Literal["raise", "warn"] = "raise"
    """With ``from_files``, where DDO's runtime offloads a component with ``pin_cpu_memory`` on (its
    ``DDO_PIN_CPU_MEMORY`` missing, misspelt or not ``0``: DDO pins copies of its own beside the files' pages):
    ``raise`` (the default) makes attach raise, naming the component and the fix; ``warn`` warns in the same words
    and leaves that component as it is (``ddo_pins_copies`` in the report)."""

    @model_validator(mode="after")
    def _encoders_from_files(self) -> PinnedCopiesPolicy:
        if self.keep_encoders_pinned and self.from_files is None:
            message = "keep_encoders_pinned pins the encoders from their files: set from_files (register or stage)"
            raise located_error("encoders_without_from_files", message, ("keep_encoders_pinned",))
        return self


def __getattr__(name: str) -> Any:
    return _moved.old_attribute(__name__, name)
