r"""The hook policy: which phase boundaries act, what they run, and with which options.

:class:`HookPolicy` is a strict, frozen pydantic model of a small YAML file (every key but
``version`` optional; ``ddo_hooks/policy/presets/default.yaml`` shows them all). Loading never lets
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

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    ValidationError,
    model_validator,
)

from ddo_hooks._diagnostics import KeyPath, Positions, below, did_you_mean_hint, show_value
from ddo_hooks.actions.contract import OptionsT, RegisteredAction, ResolvedAction
from ddo_hooks.actions.host_cache_release import HostCacheReleaseOptions
from ddo_hooks.actions.registry import ActionRegistry, chosen_registry
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.errors import InvalidArgumentError, PolicyError
from ddo_hooks.policy import PRESETS
from ddo_hooks.policy.offload import OffloadPolicy
from ddo_hooks.policy.parts import (
    AuxiliarySourcesPolicy,
    BoundariesPolicy,
    BoundaryPolicy,
    Model,
    PinnedCopiesPolicy,
)
from ddo_hooks.policy.passes import SUPPORTED_VERSIONS, checked_whole, fitted, resolve_actions
from ddo_hooks.policy.rules import broken
from ddo_hooks.policy.sources import named_source, preset_file
from ddo_hooks.policy.values import DEVICE_PATTERN, keep_reports_in_range, openable_sink, validate_device
from ddo_hooks.policy.yaml_loader import LoadedYaml, compose_policy_yaml, read_policy_file
from ddo_hooks.reports.tracker import MAX_RECORDS

__all__ = ["PRESETS", "SUPPORTED_VERSIONS", "HookPolicy", "policy_json_schema", "preset_file"]


class HookPolicy(Model):
    """A hook policy, schema version 1. Build it with :meth:`from_yaml` or :meth:`from_mapping`.

    Two policies are equal when their settings are equal, wherever they were loaded from.
    """

    version: Literal[1]
    """The policy format version (supported: 1)."""
    enabled: StrictBool = True
    """The master switch: ``false`` attaches nothing that acts (every boundary is a no-op)."""
    device: Annotated[
        str, BeforeValidator(validate_device, json_schema_input_type=Annotated[str, Field(pattern=DEVICE_PATTERN)])
    ] = "cuda"
    """The CUDA device whose transfers a release waits for: ``cuda`` or ``cuda:N``."""
    report_sink: Annotated[str, Field(min_length=1), AfterValidator(openable_sink)] | None = None
    """A JSON Lines file the reports are appended to; a relative path resolves against the policy
    file's folder (or the working directory for a policy not loaded from a file)."""
    report_sink_failure: Literal["continue", "raise"] = "continue"
    """What a failed write to ``report_sink`` does: ``continue`` (the call goes on; the failure is kept
    in ``attachment.sink_failures`` and logged once) or ``raise`` (a ``ReportSinkError`` ends the call)."""
    keep_reports: Annotated[StrictInt, Field(ge=0, le=MAX_RECORDS), BeforeValidator(keep_reports_in_range)] = 300
    """How many reports an attachment keeps in memory (``attachment.reports``, and the tracker it makes
    when given none), the newest; older ones are dropped from memory. ``0`` keeps none: read them
    from ``report_sink``. At most 100,000 (each is a Python object of a few KB)."""
    release: HostCacheReleaseOptions = Field(default_factory=HostCacheReleaseOptions)
    """The options of the built-in ``host_cache_release`` action at every boundary; the action's
    ``options`` at one boundary override them there."""
    boundaries: BoundariesPolicy = Field(default_factory=BoundariesPolicy)
    """Each boundary: whether it is enabled and the ordered actions it runs."""
    pinned_copies: PinnedCopiesPolicy = Field(default_factory=PinnedCopiesPolicy)
    """Group offloading's pinned copies: repacked at attach to their exact size (on by default)."""
    auxiliary_sources: AuxiliarySourcesPolicy = Field(default_factory=AuxiliarySourcesPolicy)
    """The auxiliary-source diagnostic (disabled by default)."""
    offload: OffloadPolicy = Field(default_factory=OffloadPolicy)
    """The offload runtime attach applies (``null``: the pipeline's own offloading, as set up before attach)."""

    _source: str = PrivateAttr(default="<policy>")
    _positions: Positions = PrivateAttr(default_factory=dict)
    _base_dir: Path | None = PrivateAttr(default=None)
    _written: dict[KeyPath, str] = PrivateAttr(default_factory=dict)
    _resolved: dict[str, tuple[ResolvedAction[Any], ...]] = PrivateAttr(default_factory=dict)
    _registry: ActionRegistry | None = PrivateAttr(default=None)  # None: the process's

    def __init__(self, **settings: Any) -> None:
        """A policy of keyword settings, ``HookPolicy(version=1, device="cuda:1")``, checked as by :meth:`from_mapping`.

        Raises:
            PolicyError: The settings are not a valid policy: one line per problem, each naming its key
                (``HookPolicy(...): release.collect: 'sometimes' is not one of full, young, auto``).

        Examples:
            >>> HookPolicy(version=1, release={"collect": "sometimes"})  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ddo_hooks.errors.PolicyError: HookPolicy(...): release.collect: 'sometimes' is not one of full, ...
        """
        try:
            super().__init__(**settings)
        except ValidationError:
            type(self)._validate(LoadedYaml(settings), "HookPolicy(...)", None)  # raises the located PolicyError
            raise  # pragma: no cover (the same settings cannot pass there)

    @model_validator(mode="after")
    def _rules(self) -> HookPolicy:
        """The rules across settings and each action resolved, for a policy built by pydantic as a whole.

        Loading builds a policy from its sections instead (:func:`~ddo_hooks.policy.passes.checked_whole`), which
        says every problem; here the first one refuses the settings, and :meth:`__init__` says them all.
        """
        resolved, found = resolve_actions(self)
        found += broken(self, resolved, failed=())
        if found:
            at, error = found[0]
            raise below(at, error)
        self._resolved = resolved
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HookPolicy):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        # Action options are mappings (unhashable); equal policies have equal action names.
        names = tuple((b.enabled, b.action_names()) for b in (self.boundary(n) for n in BOUNDARIES))
        return hash((self.version, self.enabled, self.device, self.report_sink, self.keep_reports, self.release, names))

    # -- loading -------------------------------------------------------------------------

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], *, registry: ActionRegistry | None = None) -> HookPolicy:
        """Load a policy file.

        Args:
            path: The YAML file (UTF-8).
            registry: Where its actions are found by name (``None``: the process's
                :data:`~ddo_hooks.actions.registry.REGISTRY`); the policy keeps it (:attr:`registry`).

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
        return cls._load(text, source, Path(source).absolute().parent, registry)

    @classmethod
    def from_name_or_yaml(cls, source: str | os.PathLike[str], *, registry: ActionRegistry | None = None) -> HookPolicy:
        """A preset's name where nothing of that name is here (``"lowest-peak"``), else the policy file at the path.

        :func:`~ddo_hooks.attach` and the CLI's ``--policy`` read a string so; a symbolic link is read
        as the file too, so one that names nothing is refused, never taken for a preset
        (:mod:`~ddo_hooks.policy.sources`). Its actions are found in ``registry`` (as :meth:`from_yaml`).

        Raises:
            PolicyError: Neither a file nor a preset of that name (the message lists the presets and the
                closest one), a broken link, YAML text given instead of a path, or the file is not a
                valid policy.

        Examples:
            >>> HookPolicy.from_name_or_yaml("smallest-box").pinned_copies.from_files
            'register'
        """
        if not isinstance(source, (str, os.PathLike)):
            raise PolicyError(f"a policy is a path or a preset's name (str), got {type(source).__name__}")
        name = os.fspath(source)
        if named_source(name) == "preset":
            return cls.preset(name, registry=registry)
        return cls.from_yaml(name, registry=registry)

    @classmethod
    def from_yaml_text(
        cls, text: str, source: str = "<string>", *, registry: ActionRegistry | None = None
    ) -> HookPolicy:
        """Load a policy from YAML text; ``source`` names it in messages, ``registry`` as :meth:`from_yaml`.

        Raises:
            PolicyError: As :meth:`from_yaml`, for everything after reading the file.
        """
        return cls._load(text, source, None, registry)

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], source: str = "<mapping>", *, registry: ActionRegistry | None = None
    ) -> HookPolicy:
        """Validate a policy given as a mapping (e.g. ``policy.model_dump(mode="json")``).

        Its actions are found in ``registry``, as :meth:`from_yaml`.

        Raises:
            PolicyError: The mapping is not a valid policy; one line per problem.
        """
        return cls._validate(LoadedYaml(data), source, None, registry)

    @classmethod
    def default(cls) -> HookPolicy:
        """The packaged default policy ``ddo_hooks/policy/presets/default.yaml``: ``HookPolicy(version=1)``.

        Examples:
            >>> HookPolicy.default() == HookPolicy(version=1)
            True
        """
        return cls.preset("default")

    @classmethod
    def preset(cls, name: str, *, registry: ActionRegistry | None = None) -> HookPolicy:
        """A packaged policy by its name, one of :data:`PRESETS` (``lowest-peak``, ``smallest-box``, ...).

        Its actions are found in ``registry``, as :meth:`from_yaml`.

        Raises:
            PolicyError: No preset has that name; the message lists them.

        Examples:
            >>> HookPolicy.preset("lowest-latency").boundary("after_call").idle
            2.0
        """
        if name not in PRESETS:
            hint = did_you_mean_hint(name, PRESETS)
            raise PolicyError(f"no preset policy named {show_value(name)}; {hint}presets: {', '.join(PRESETS)}")
        resource = preset_file(name)
        try:
            text = resource.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PolicyError(f"{resource}: cannot read the packaged preset ({e}); reinstall ddo-hooks") from e
        return cls._load(text, str(resource), None, registry)

    @classmethod
    def _load(cls, text: str, source: str, base_dir: Path | None, registry: ActionRegistry | None) -> HookPolicy:
        return cls._validate(compose_policy_yaml(text, source), source, base_dir, registry)

    @classmethod
    def _validate(
        cls, loaded: LoadedYaml, source: str, base_dir: Path | None, registry: ActionRegistry | None = None
    ) -> HookPolicy:
        """Check its shape, then its rules (:func:`~ddo_hooks.policy.passes.checked_whole`); remember its source."""
        found_in = chosen_registry(registry)
        policy, known, resolved = checked_whole(cls, loaded, source, found_in)
        policy._source, policy._positions, policy._base_dir = source, known, base_dir
        policy._written, policy._resolved, policy._registry = dict(loaded.written), resolved, registry
        return policy

    # -- reading -------------------------------------------------------------------------

    @property
    def registry(self) -> ActionRegistry:
        """Where its actions were found by name when it loaded, and are at attach unless attach is given another.

        Examples:
            >>> from ddo_hooks.actions.registry import REGISTRY, ActionRegistry
            >>> mine = ActionRegistry()
            >>> HookPolicy.default().registry is REGISTRY
            True
            >>> HookPolicy.preset("default", registry=mine).registry is mine
            True
        """
        return chosen_registry(self._registry)

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
            hint = did_you_mean_hint(name, BOUNDARIES)
            listed = ", ".join(BOUNDARIES)
            raise InvalidArgumentError(f"unknown boundary {show_value(name)}; {hint}(boundaries: {listed})")
        return getattr(self.boundaries, name)

    def actions(self, name: str) -> tuple[ResolvedAction[Any], ...]:
        """The actions of one boundary, in order, each with the options it receives when it runs, resolved once.

        An action with an options model (each built-in one, and one of your own registered
        with ``options=`` before the policy loaded) receives an instance of it: ``host_cache_release`` the
        ``release`` settings, overridden by its own ``options`` at this boundary; an action without one
        receives its ``options`` as written.

        Examples:
            >>> action = {"name": "host_cache_release", "options": {"collect": "full"}}
            >>> policy = HookPolicy.from_mapping({"version": 1, "release": {"collect": "young"},
            ...                                   "boundaries": {"after_call": {"actions": [action]}}})
            >>> policy.actions("before_vae")[0].options.collect, policy.actions("after_call")[0].options.collect
            ('young', 'full')
        """
        self.boundary(name)  # a known boundary's name
        return self._resolved[name]

    def fitted(self, resolved: ResolvedAction[Any], action: RegisteredAction[OptionsT]) -> ResolvedAction[OptionsT]:
        """``resolved`` (one of :meth:`actions`) with the options that ``action``, registered under its name now, takes.

        They are those resolved when the policy loaded, unless the action was registered (or replaced) since:
        then they are validated now, with the message loading would have given.

        Raises:
            PolicyError: They do not fit the action's model; the message points at the policy's line.
        """
        return fitted(self, resolved, action, source=self._source, positions=self._positions, written=self._written)

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
