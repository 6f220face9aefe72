"""The sections of a hook policy: boundaries and their actions, pinned copies, the diagnostics.

:class:`~ddo_hooks.policy.model.HookPolicy` is made of these models; each is strict and frozen,
and every validation problem carries the key path where a message should point. The options of the
actions are their own models (:mod:`ddo_hooks.actions`; the ``release`` section holds
``host_cache_release``'s, :class:`~ddo_hooks.actions.host_cache_release.HostCacheReleaseOptions`). The base
of every model is in :mod:`ddo_hooks.policy.base` and the values of the settings in
:mod:`ddo_hooks.policy.values`, both re-exported here; the rules across settings (an action listed once, an
enabled boundary that acts, ...) are :mod:`ddo_hooks.policy.rules`, checked over what parsed.

Examples:
    >>> spec = ActionSpec.model_validate({"name": "host_cache_release", "options": {"collect": "full"}})
    >>> spec.options  # as written: the policy resolves it against its action's model
    {'collect': 'full'}
    >>> BoundaryPolicy().action_names()
    ('host_cache_release',)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StrictBool,
    WithJsonSchema,
    create_model,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ddo_hooks import _moved, actions
from ddo_hooks.actions.contract import RegisteredAction, ResolvedAction
from ddo_hooks.actions.host_cache_release import NAME as HOST_CACHE_RELEASE
from ddo_hooks.boundaries import ACTION_NAME_PATTERN
from ddo_hooks.policy.base import Model, located_error
from ddo_hooks.policy.values import (
    DEVICE_PATTERN,
    ActionName,
    Duration,
    json_value,
    keep_reports_in_range,
    parse_duration,
    report_sink_problem,
    validate_device,
)
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


def _action_entry(value: object) -> object:
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, (Mapping, ActionSpec)):
        return value
    form = f"an action name (e.g. {HOST_CACHE_RELEASE}) or a mapping {{name: ..., options: {{...}}}}"
    raise located_error("action_entry", f"expected {form}, got {{value}}", value=value)


class ActionSpec(Model):
    """One action a boundary runs, as written: in YAML either its name or ``{name: ..., options: {...}}``.

    It holds what was written, and only that: its options are resolved once, against the model of the action
    registered under its name, with the policy's rules (:mod:`~ddo_hooks.policy.passes`); the JSON Schema
    lists each built-in action's options.
    """

    name: ActionName
    """The action's registered name. Whether it exists is checked when the policy is attached."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the action: any JSON data (no NaN or infinity)."""

    @field_validator("options", mode="before")
    @classmethod
    def _json_options(cls, value: object) -> object:
        return json_value(value, ()) if isinstance(value, Mapping) else value

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

    def action_names(self) -> tuple[str, ...]:
        """The names of the actions, in order."""
        return tuple(action.name for action in self.actions)


class BoundariesPolicy(Model):
    """The three phase boundaries; one not listed keeps its default."""

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


def __getattr__(name: str) -> Any:
    return _moved.old_attribute(__name__, name)
