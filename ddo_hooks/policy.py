r"""The hook policy: which phase boundaries act, what they run, and the release settings.

:class:`HookPolicy` is a strict, frozen pydantic model of a small YAML file (every key but
``version`` optional; ``ddo_hooks/policies/default.yaml`` shows them all). Loading never lets
a raw YAML, pydantic or OS error escape: each problem becomes one line of a
:class:`~ddo_hooks.errors.PolicyError`, ``file:line:col: key.path: problem; fix``. A loaded
policy remembers where each key came from (:meth:`HookPolicy.locate`), so code that checks
action names at attach time can point at the offending line.

Examples:
    >>> policy = HookPolicy.from_yaml_text("version: 1\nrelease: {min_releasable_bytes: 64MiB}\n")
    >>> policy.release.min_releasable_bytes, policy.enabled_boundaries()
    (67108864, ('before_transformer', 'before_vae', 'after_call'))
    >>> HookPolicy.from_yaml_text("version: 1\nboundaries:\n  before_vea: {}\n", source="policy.yaml")
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.PolicyError: policy.yaml:3:3: boundaries.before_vea: unknown key; did you mean ...
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ddo_hooks.devices import parse_cuda_device
from ddo_hooks.errors import InvalidArgumentError, PolicyError
from ddo_hooks.policy_yaml import (
    KeyPath,
    Positions,
    describe_validation_error,
    did_you_mean,
    load_yaml,
    read_policy_file,
    show_value,
    where,
)
from ddo_hooks.sizes import ByteSize

__all__ = [
    # the policy
    "HookPolicy",
    "policy_json_schema",
    # its parts
    "ActionSpec",
    "AuxiliarySourcesPolicy",
    "BoundariesPolicy",
    "BoundaryPolicy",
    "ReleasePolicy",
    # names
    "ACTION_NAME_PATTERN",
    "BOUNDARIES",
    "BoundaryName",
    "HOST_CACHE_RELEASE",
    "SUPPORTED_VERSIONS",
]

BOUNDARIES: tuple[str, ...] = ("before_transformer", "before_vae", "after_call")
"""The phase boundaries of a pipeline call, in the order they fire."""

BoundaryName = Literal["before_transformer", "before_vae", "after_call"]
"""One of :data:`BOUNDARIES`."""

SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
"""The policy versions this release reads."""

HOST_CACHE_RELEASE = "host_cache_release"
"""The built-in action: release PyTorch's pinned host cache with the ``release`` settings."""

ACTION_NAME_PATTERN = r"^[a-z][a-z0-9_.\-]*$"
"""Action names: a lowercase letter, then ``a-z 0-9 _ . -``."""

_ACTION_NAME_RE = re.compile(ACTION_NAME_PATTERN)
_DEVICE_PATTERN = r"^cuda(:[0-9]+)?$"
_SUPPORTED = f"supported versions: {', '.join(map(str, SUPPORTED_VERSIONS))}"


def _problem(kind: str, message: str, at: KeyPath = ()) -> PydanticCustomError:
    """A validation error; ``at`` is a key path below the field, where the message points."""
    return PydanticCustomError(kind, "{message}", {"message": message, "at": at})


def _device(value: object) -> str:
    try:
        index = parse_cuda_device(value if isinstance(value, str) else None)
    except InvalidArgumentError as e:
        raise _problem("device", f"{show_value(value)} is not a CUDA device; use 'cuda' or 'cuda:N'") from e
    return "cuda" if index is None else f"cuda:{index}"


def _action_name(value: object) -> object:
    if isinstance(value, str) and not _ACTION_NAME_RE.match(value):
        rule = "a lowercase letter, then a-z, 0-9, '_', '.', '-'"
        raise _problem("action_name", f"{show_value(value)} is not an action name; use {rule}")
    return value


def _action_entry(value: object) -> object:
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, (Mapping, ActionSpec)):
        return value
    form = f"an action name (e.g. {HOST_CACHE_RELEASE}) or a mapping {{name: ..., options: {{...}}}}"
    raise _problem("action_entry", f"expected {form}, got {show_value(value)}")


def _json_value(value: object, at: KeyPath) -> Any:
    """Check that ``value`` is JSON data; return a copy with tuples as lists."""
    if len(at) > 64:
        raise _problem("json_value", "options nest more than 64 levels deep (or contain themselves)", at[:1])
    if isinstance(value, float) and not math.isfinite(value):
        raise _problem("json_value", f"{value!r} is not a JSON number; use a finite number or a string", at)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(item, (*at, i)) for i, item in enumerate(value)]
    if not isinstance(value, Mapping):
        kinds = "strings, numbers, booleans, null, lists and mappings"
        raise _problem("json_value", f"a {type(value).__name__} is not a JSON value; use {kinds}", at)
    for key in value:
        if not isinstance(key, str):
            raise _problem("json_value", f"option key {show_value(key)} is not a string; quote it", at)
    return {key: _json_value(item, (*at, key)) for key, item in value.items()}


ActionName = Annotated[
    str, BeforeValidator(_action_name), WithJsonSchema({"type": "string", "pattern": ACTION_NAME_PATTERN})
]
"""A registered action's name, e.g. ``host_cache_release`` (see :data:`ACTION_NAME_PATTERN`)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ActionSpec(_Model):
    """One action a boundary runs; in YAML either its name or ``{name: ..., options: {...}}``."""

    name: ActionName
    """The action's registered name. Whether it exists is checked when the policy is attached."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the action: any JSON data (no NaN or infinity)."""

    @field_validator("options", mode="before")
    @classmethod
    def _json_options(cls, value: object) -> object:
        return _json_value(value, ()) if isinstance(value, Mapping) else value


ActionEntry = Annotated[ActionSpec, BeforeValidator(_action_entry, json_schema_input_type=ActionName | ActionSpec)]


class BoundaryPolicy(_Model):
    """What one phase boundary does."""

    enabled: StrictBool = True
    """Whether the boundary acts; a disabled boundary is a no-op."""
    actions: tuple[ActionEntry, ...] = (ActionSpec(name=HOST_CACHE_RELEASE),)
    """The actions run at the boundary, in order; each name at most once."""

    @field_validator("actions")
    @classmethod
    def _unique(cls, actions: tuple[ActionSpec, ...]) -> tuple[ActionSpec, ...]:
        seen: dict[str, int] = {}
        for index, action in enumerate(actions):
            if action.name in seen:
                twice = f"action {action.name!r} is listed twice (entries {seen[action.name]} and {index})"
                raise _problem("duplicate_action", f"{twice}; list each action once", (index,))
            seen[action.name] = index
        return actions

    @model_validator(mode="after")
    def _acts(self) -> BoundaryPolicy:
        if self.enabled and not self.actions:
            fix = f"add one (e.g. [{HOST_CACHE_RELEASE}]) or set enabled: false"
            raise _problem("no_actions", f"an enabled boundary needs at least one action; {fix}", ("actions",))
        return self

    def action_names(self) -> tuple[str, ...]:
        """The names of the actions, in order."""
        return tuple(action.name for action in self.actions)


class BoundariesPolicy(_Model):
    """The three phase boundaries; one not listed keeps its default."""

    before_transformer: BoundaryPolicy = Field(default_factory=BoundaryPolicy)
    """After the text encoders ran, before the denoising transformer starts."""
    before_vae: BoundaryPolicy = Field(default_factory=BoundaryPolicy)
    """After denoising, before the VAE decodes."""
    after_call: BoundaryPolicy = Field(default_factory=BoundaryPolicy)
    """After the pipeline call returned."""


class ReleasePolicy(_Model):
    """Settings of the built-in ``host_cache_release`` action."""

    collect: Literal["full", "young", "auto"] = "auto"
    """Garbage collection before the release: ``full`` (every generation), ``young`` (0 and 1)
    or ``auto`` (young, then full only if a dropped component is still alive)."""
    min_releasable_bytes: ByteSize = 0
    """Skip the release when fewer cached bytes are releasable (``0``: always release)."""


class AuxiliarySourcesPolicy(_Model):
    """A separate diagnostic opt-in, off by default."""

    enabled: StrictBool = False
    """Whether the auxiliary-source diagnostic runs."""
    max_copy_bytes: ByteSize = 16 * 1024**2
    """The largest copy the diagnostic may make (an int or a size such as ``16MiB``)."""


def _version_problem(value: object) -> str | None:
    if type(value) is int and value in SUPPORTED_VERSIONS:
        return None
    kind = f" (a {type(value).__name__})" if isinstance(value, (str, bool, float)) else ""
    return f"unsupported version {show_value(value)}{kind}; {_SUPPORTED} (write 'version: 1')"


class HookPolicy(_Model):
    """A hook policy, schema version 1. Build it with :meth:`from_yaml` or :meth:`from_mapping`.

    Two policies are equal when their settings are equal, wherever they were loaded from.
    """

    version: Literal[1]
    """The policy format version (supported: 1)."""
    enabled: StrictBool = True
    """The master switch: ``false`` attaches nothing that acts (every boundary is a no-op)."""
    device: Annotated[
        str, BeforeValidator(_device, json_schema_input_type=Annotated[str, Field(pattern=_DEVICE_PATTERN)])
    ] = "cuda"
    """The CUDA device whose transfers a release waits for: ``cuda`` or ``cuda:N``."""
    report_sink: Annotated[str, Field(min_length=1)] | None = None
    """A JSON Lines file the reports are appended to; a relative path resolves against the policy
    file's folder (or the working directory for a policy not loaded from a file)."""
    release: ReleasePolicy = Field(default_factory=ReleasePolicy)
    """Settings of the built-in ``host_cache_release`` action."""
    boundaries: BoundariesPolicy = Field(default_factory=BoundariesPolicy)
    """Each boundary: whether it is enabled and the ordered actions it runs."""
    auxiliary_sources: AuxiliarySourcesPolicy = Field(default_factory=AuxiliarySourcesPolicy)
    """The auxiliary-source diagnostic (disabled by default)."""

    _source: str = PrivateAttr(default="<policy>")
    _positions: Positions = PrivateAttr(default_factory=dict)
    _base_dir: Path | None = PrivateAttr(default=None)

    @field_validator("version", mode="before")
    @classmethod
    def _supported(cls, value: object) -> object:
        if problem := _version_problem(value):
            raise _problem("version", problem)
        return value

    @model_validator(mode="after")
    def _does_something(self) -> HookPolicy:
        if self.enabled and not any(getattr(self.boundaries, name).enabled for name in BOUNDARIES):
            problem = "every boundary is disabled, so the policy would do nothing"
            fix = "enable a boundary or set enabled: false at the top"
            raise _problem("inert_policy", f"{problem}; {fix}", ("boundaries",))
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HookPolicy):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        # Action options are mappings (unhashable); equal policies have equal action names.
        names = tuple((b.enabled, b.action_names()) for b in (self.boundary(n) for n in BOUNDARIES))
        return hash((self.version, self.enabled, self.device, self.report_sink, self.release, names))

    # -- loading -------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> HookPolicy:
        """Load a policy file.

        Args:
            path: The YAML file (UTF-8).

        Returns:
            The policy, remembering the file and the position of every key.

        Raises:
            PolicyError: The file is missing, a directory, binary or not UTF-8, is not valid
                YAML, or is not a valid policy; one line per problem, each with line and column.
        """
        if not isinstance(path, (str, os.PathLike)):
            raise PolicyError(f"from_yaml expects a path (str or os.PathLike), got {type(path).__name__}")
        source = os.fspath(path)
        text = read_policy_file(source)
        return cls._load(text, source, Path(source).absolute().parent)

    @classmethod
    def from_yaml_text(cls, text: str, source: str = "<string>") -> HookPolicy:
        """Load a policy from YAML text; ``source`` names it in messages.

        Raises:
            PolicyError: As :meth:`from_yaml`, for everything after reading the file.
        """
        return cls._load(text, source, None)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "<mapping>") -> HookPolicy:
        """Validate a policy given as a mapping (e.g. ``policy.model_dump(mode="json")``).

        Raises:
            PolicyError: The mapping is not a valid policy; one line per problem.
        """
        return cls._validate(data, source, {}, None)

    @classmethod
    def default(cls) -> HookPolicy:
        """The packaged default policy ``ddo_hooks/policies/default.yaml``: ``HookPolicy(version=1)``.

        Examples:
            >>> HookPolicy.default() == HookPolicy(version=1)
            True
        """
        resource = resources.files("ddo_hooks").joinpath("policies/default.yaml")
        try:
            text = resource.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PolicyError(f"{resource}: cannot read the packaged default ({e}); reinstall ddo-hooks") from e
        return cls._load(text, str(resource), None)

    @classmethod
    def _load(cls, text: str, source: str, base_dir: Path | None) -> HookPolicy:
        data, positions = load_yaml(text, source)
        return cls._validate(data, source, positions, base_dir)

    @classmethod
    def _validate(cls, data: object, source: str, positions: Positions, base_dir: Path | None) -> HookPolicy:
        top = where(source, positions, ())
        if data is None:
            raise PolicyError(f"{source}: the policy is empty; write at least 'version: 1' (see examples/)")
        if not isinstance(data, Mapping):
            shape = "a mapping of settings starting with 'version: 1'"
            raise PolicyError(f"{top}: the top level must be {shape}, got {show_value(data)}")
        if "version" not in data:
            raise PolicyError(f"{top}: version: missing; add 'version: 1' at the top ({_SUPPORTED})")
        if problem := _version_problem(data["version"]):
            raise PolicyError(f"{where(source, positions, ('version',))}: version: {problem}")
        try:
            policy = cls.model_validate(dict(data))
        except ValidationError as e:
            raise PolicyError(describe_validation_error(e, model=cls, source=source, positions=positions)) from e
        except RecursionError as e:
            raise PolicyError(f"{source}: the policy is nested too deeply (or contains itself)") from e
        known = dict(positions)
        for path, position in positions.items():
            if len(path) == 4 and path[0] == "boundaries" and path[2] == "actions":
                known.setdefault((*path, "name"), position)
        policy._source, policy._positions, policy._base_dir = source, known, base_dir
        return policy

    # -- reading -------------------------------------------------------------------------

    @property
    def source(self) -> str:
        """Where the policy came from: the file path, ``<string>``, ``<mapping>`` or ``<policy>``."""
        return self._source

    def locate(self, path: tuple[str | int, ...]) -> str:
        r"""``"file:line:col"`` of a key path such as ``("boundaries", "after_call", "actions", 1)``.

        Returns just :attr:`source` when the position is unknown (a default, or a policy not
        loaded from YAML).

        Examples:
            >>> policy = HookPolicy.from_yaml_text("version: 1\nboundaries:\n  after_call:\n"
            ...                                    "    actions: [host_cache_release, my.flush]\n")
            >>> policy.locate(("boundaries", "after_call", "actions", 1))
            '<string>:4:35'
            >>> policy.locate(("boundaries", "before_vae"))
            '<string>'
        """
        found = self._positions.get(tuple(path))
        return f"{self._source}:{found[0]}:{found[1]}" if found else self._source

    def resolve_path(self, p: str | os.PathLike[str]) -> Path:
        """Resolve a path from the policy, such as ``report_sink``.

        ``~`` is expanded; a relative path is taken against the policy file's folder, or the
        current working directory (at call time) for a policy not loaded from a file.

        Examples:
            >>> policy = HookPolicy.from_mapping({"version": 1, "report_sink": "reports.jsonl"})
            >>> policy.resolve_path(policy.report_sink) == Path.cwd() / "reports.jsonl"
            True
        """
        path = Path(p).expanduser()
        if path.is_absolute():
            return path
        return (self._base_dir or Path.cwd()) / path

    def boundary(self, name: str) -> BoundaryPolicy:
        """The settings of one boundary.

        Raises:
            InvalidArgumentError: ``name`` is not one of :data:`BOUNDARIES` (the message suggests one).
        """
        if name not in BOUNDARIES:
            guess = did_you_mean(name, BOUNDARIES)
            hint = f"did you mean {guess!r}? " if guess else ""
            listed = ", ".join(BOUNDARIES)
            raise InvalidArgumentError(f"unknown boundary {show_value(name)}; {hint}(boundaries: {listed})")
        return getattr(self.boundaries, name)

    def enabled_boundaries(self) -> tuple[str, ...]:
        """The boundaries that act, in firing order; empty when the policy is disabled."""
        if not self.enabled:
            return ()
        return tuple(name for name in BOUNDARIES if self.boundary(name).enabled)


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema of a hook policy file, as checked into ``ddo_hooks/schemas``.

    Examples:
        >>> policy_json_schema()["required"]
        ['version']
    """
    schema = HookPolicy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
