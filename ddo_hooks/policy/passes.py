r"""The whole check of a loaded policy: its shape, each action resolved once, then its rules; every problem in one run.

:func:`checked_whole` checks what the YAML itself refused and the version; then each top-level section on its
own (:func:`parse_sections`): pydantic gives every field error of a section in one pass. A section that does not
parse is validated once more without the keys that did not, so that the rules can read the rest of it. Then the
actions are resolved once (:func:`resolve_actions`, against the policy's registry) and every rule across settings
runs over what parsed (:data:`~ddo_hooks.policy.rules.RULES`), each left out where a setting it reads did not
parse. All of it is one error, one line per problem, in file order. At attach, :func:`fitted` gives an entry the
options of the action bound to its name then (validated again only where that action is another than the one it
was resolved against).

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> off = {"enabled": False}
    >>> data = {"version": 1, "release": {"collect": "sometimes"},
    ...         "boundaries": {"before_transformer": off, "before_vae": off, "after_call": off}}
    >>> try:
    ...     HookPolicy.from_mapping(data)
    ... except Exception as e:
    ...     print(str(e).replace("; ", ";\n  "))
    <mapping>: release.collect: 'sometimes' is not one of full, young, auto
    <mapping>: boundaries: every boundary is disabled, so the policy would do nothing;
      enable a boundary or set enabled: false at the top
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from ddo_hooks._diagnostics import KeyPath, Positions, show_value, where
from ddo_hooks.actions.contract import OptionsT, RegisteredAction, ResolvedAction
from ddo_hooks.actions.registry import REGISTRY, ActionRegistry
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.errors import PolicyError
from ddo_hooks.policy.messages import Problem, item_problems, join_problems, located_line
from ddo_hooks.policy.rules import Located, Sections, broken
from ddo_hooks.policy.yaml_loader import LoadedYaml

__all__ = [
    "SUPPORTED_VERSIONS",
    "Parsed",
    "checked_whole",
    "defaults_of",
    "fitted",
    "parse_sections",
    "resolve_actions",
    "version_problem",
    "without",
    "written_settings",
]

SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
"""The policy versions this release reads."""

_SUPPORTED = f"supported versions: {', '.join(map(str, SUPPORTED_VERSIONS))}"

ModelT = TypeVar("ModelT", bound=BaseModel)


def version_problem(value: object, written: str | None = None) -> str | None:
    """What is wrong with a policy's ``version`` (as ``written`` in the YAML), or ``None``.

    Examples:
        >>> version_problem(1) is None, version_problem("1", "'1'")
        (True, "unsupported version '1' (a str); supported versions: 1 (write 'version: 1')")
    """
    if type(value) is int and value in SUPPORTED_VERSIONS:
        return None
    kind = f" (a {type(value).__name__})" if isinstance(value, (str, bool, float)) else ""
    return f"unsupported version {written or show_value(value)}{kind}; {_SUPPORTED} (write 'version: 1')"


@dataclass
class Parsed:
    """What :func:`parse_sections` found: each section's value, every field error, and what did not parse."""

    values: dict[str, Any] = field(default_factory=dict)
    """Each top-level setting: as parsed; what of it parsed (a section whose other keys did); or its default."""
    errors: list[Any] = field(default_factory=list)
    """Every field error, as pydantic's ``errors()`` items, located from the top of the policy."""
    failed: list[KeyPath] = field(default_factory=list)
    """The key paths that did not parse (a rule that reads one is left out)."""
    cause: ValidationError | None = None
    """The first section's error (the cause of the policy's)."""


@functools.cache
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    """The validator of the top-level setting ``name`` of ``model`` alone: its type, with its field's constraints."""
    info = model.model_fields[name]
    return TypeAdapter(typing.cast(Any, Annotated[info.annotation, info]))


def parse_sections(model: type[BaseModel], data: Mapping[str, Any]) -> Parsed:
    """Each top-level section of ``data`` validated on its own: every field error of it in one pydantic pass.

    A section that does not parse is validated once more without the keys its errors name, so that the rules
    read what parsed of it; those keys are :attr:`Parsed.failed`. A key that no section has is an error.
    """
    parsed = Parsed()
    unknown = [
        InitErrorDetails(type="extra_forbidden", loc=(key,), input=value)
        if isinstance(key, str)
        else InitErrorDetails(type="invalid_key", loc=(key,), input=key)
        for key, value in data.items()
        if key not in model.model_fields
    ]
    if unknown:  # what pydantic says of the whole model's keys
        parsed.cause = ValidationError.from_exception_data(model.__name__, unknown)
        parsed.errors += parsed.cause.errors(include_url=False)
    for name, info in model.model_fields.items():
        if name not in data:
            parsed.values[name] = info.get_default(call_default_factory=True)
            continue
        adapter = _adapter(model, name)
        try:
            parsed.values[name] = adapter.validate_python(data[name])
            continue
        except ValidationError as e:
            parsed.cause = parsed.cause or e
            items = e.errors(include_url=False)
        parsed.errors += [{**item, "loc": (name, *item["loc"])} for item in items]
        value, cut = _what_parsed(adapter, data[name], [tuple(item["loc"]) for item in items])
        parsed.values[name] = info.get_default(call_default_factory=True) if value is _NONE else value
        parsed.failed += [(name, *path) for path in cut]
    return parsed


_NONE = object()


def _what_parsed(adapter: TypeAdapter[Any], value: Any, failing: list[KeyPath]) -> tuple[Any, list[KeyPath]]:
    """``value`` validated without the keys at ``failing``, and the key paths left out (``()``: all of it)."""
    cut: list[KeyPath] = []
    for path in failing:
        left = without(value, path) if path else None
        if left is None:
            if not any(path[: len(done)] == done for done in cut):
                return _NONE, [()]
            continue
        value, out = left
        cut.append(out)
    try:
        return adapter.validate_python(value), cut
    except (ValidationError, RecursionError):  # not expected: every field error's key is out
        return _NONE, [()]


def checked_whole(
    model: type[ModelT], loaded: LoadedYaml, source: str, registry: ActionRegistry = REGISTRY
) -> tuple[ModelT, Positions, dict[str, tuple[ResolvedAction[Any], ...]]]:
    """``loaded`` checked as ``model``: the YAML's problems, the version, each section, then the rules, in file order.

    Each action entry is resolved against the action of its name in ``registry``.

    Returns:
        The model (built from its sections, each validated once), the position of every key (an action written as
        a bare name at its ``name`` too), and each boundary's actions resolved.

    Raises:
        PolicyError: One line per problem; ``problems`` holds them.
    """
    data, positions, written = loaded.data, loaded.positions, loaded.written
    problems = list(loaded.problems)
    top = where(source, positions, ())
    if data is None and not problems:
        raise PolicyError(
            f"{source}: the policy is empty; write at least 'version: 1' (ddo-hooks schema policy lists every key)"
        )
    if not isinstance(data, Mapping):
        if data is not None:
            shape = "a mapping of settings starting with 'version: 1'"
            at = positions.get((), (0, 0))
            problems.append((at, f"{top}: the top level must be {shape}, got {show_value(data)}"))
        raise _policy_error(problems)
    if ("version",) in loaded.broken:
        pass  # the YAML problem at 'version' is reported already
    elif "version" not in data:
        problems.append(
            (positions.get((), (0, 0)), f"{top}: version: missing; add 'version: 1' at the top ({_SUPPORTED})")
        )
    elif problem := version_problem(data["version"], written.get(("version",))):
        at = positions.get(("version",), (0, 0))
        problems.append((at, f"{where(source, positions, ('version',))}: version: {problem}"))
    try:
        parsed = parse_sections(model, {**data, "version": 1})  # the rest is checked as version 1
        failed = [*parsed.failed, *loaded.broken]
        fields_set = {name for name in data if name in model.model_fields}
        policy = model.model_construct(_fields_set=fields_set, **parsed.values)
        resolved, found = resolve_actions(typing.cast("Sections", policy), registry, failed=failed)
        found += broken(typing.cast("Sections", policy), resolved, failed=failed)
    except RecursionError as e:
        raise PolicyError(f"{source}: the policy is nested too deeply (or contains itself)") from e
    items = [*parsed.errors, *(_item(at, error) for at, error in found)]
    hidden = loaded.broken
    problems += item_problems(items, model=model, source=source, positions=positions, written=written, hidden=hidden)
    if problems:
        raise _policy_error(problems) from (parsed.cause or _rules_error(model, found))
    known = dict(positions)
    for path, position in positions.items():
        if len(path) == 4 and path[0] == "boundaries" and path[2] == "actions":
            known.setdefault((*path, "name"), position)
    return policy, known, resolved


def _item(at: KeyPath, error: Any) -> dict[str, Any]:
    """A rule's problem as a pydantic ``errors()`` item at ``at`` (its own ``at``, if any, below it)."""
    return {"type": error.type, "loc": at, "msg": error.message(), "ctx": dict(error.context or {}), "input": None}


def _rules_error(model: type[BaseModel], found: list[Located]) -> ValidationError | None:
    """The problems of the rules as one pydantic error (the cause of the policy's, where no section failed)."""
    if not found:
        return None
    details = [InitErrorDetails(type=error, loc=at, input=None) for at, error in found]
    return ValidationError.from_exception_data(model.__name__, details)


def _policy_error(problems: list[Problem]) -> PolicyError:
    """The error of a policy checked whole: one line per problem, in file order, and the problems themselves."""
    error = PolicyError(join_problems(problems))
    error.problems = tuple(problems)
    return error


def without(data: Any, path: KeyPath) -> tuple[Any, KeyPath] | None:
    """``data`` without the key at ``path`` (copied along the way), and the path left out; ``None`` when none is.

    A list item, or a path that leads into a value that is not a mapping, leaves out the nearest
    key of a mapping above it (the whole list: its other items' problems were found with it).

    Examples:
        >>> without({"a": {"b": 1, "c": 2}}, ("a", "b"))
        ({'a': {'c': 2}}, ('a', 'b'))
        >>> without({"a": [{"b": 1}, "x"]}, ("a", 1, "name"))
        ({}, ('a',))
        >>> without({"a": 1}, ("z",)) is None
        True
    """
    for end in range(len(path), 0, -1):
        cut = _without_at(data, path[:end])
        if cut is not None:
            return cut, path[:end]
    return None


def _without_at(data: Any, path: KeyPath) -> Any:
    head, rest = path[0], path[1:]
    if isinstance(data, Mapping) and isinstance(head, str) and head in data:
        if not rest:
            return {key: value for key, value in data.items() if key != head}
        inner = _without_at(data[head], rest)
        return None if inner is None else {**data, head: inner}
    if isinstance(data, list) and isinstance(head, int) and 0 <= head < len(data) and rest:
        inner = _without_at(data[head], rest)
        return None if inner is None else [*data[:head], inner, *data[head + 1 :]]
    return None


# -- each action entry, resolved once ----------------------------------------------------


def written_settings(section: BaseModel) -> dict[str, Any]:
    """The settings a section writes (those it was given), as it holds them: the defaults it gives an action.

    Examples:
        >>> from ddo_hooks.actions.host_cache_release import HostCacheReleaseOptions
        >>> written_settings(HostCacheReleaseOptions.model_validate({"collect": "young"}))
        {'collect': 'young'}
    """
    return {name: getattr(section, name) for name in section.model_fields_set}


def defaults_of(policy: Sections, action: RegisteredAction[Any] | None) -> dict[str, Any] | None:
    """The settings of the policy's section that holds defaults of ``action``'s options (``None``: it has none)."""
    if action is None or action.defaults is None:
        return None
    return written_settings(action.defaults(policy))


def resolve_actions(
    policy: Sections, registry: ActionRegistry = REGISTRY, *, failed: Iterable[KeyPath] = ()
) -> tuple[dict[str, tuple[ResolvedAction[Any], ...]], list[Located]]:
    """Each boundary's actions, in order, each with the options it receives, resolved once; and their problems.

    An action registered in ``registry`` now gets its options as
    :meth:`~ddo_hooks.actions.contract.RegisteredAction.resolve` gives them: the settings of the policy's section
    that holds its defaults (``release`` for ``host_cache_release``) merged under what the entry writes, validated
    once, every problem found; any other action its options as written (resolved when it is bound, at attach). A
    boundary whose actions did not parse (a key path of ``failed``) is left out.

    Returns:
        The resolved actions by boundary, and each problem with the key path it points at.

    Examples:
        >>> from ddo_hooks import HookPolicy
        >>> policy = HookPolicy.from_mapping({"version": 1, "release": {"collect": "young"}})
        >>> resolved, problems = resolve_actions(policy)
        >>> [action.options.collect for action in resolved["after_call"]], problems
        (['young'], [])
    """
    failed = tuple(failed)
    resolved: dict[str, tuple[ResolvedAction[Any], ...]] = {}
    problems: list[Located] = []
    for name in BOUNDARIES:
        where: KeyPath = ("boundaries", name, "actions")
        if any(where[: len(path)] == path or path[: len(where)] == where for path in failed):
            continue
        found = []
        for index, spec in enumerate(policy.boundary(name).actions):
            entry: ResolvedAction[Any] = ResolvedAction(spec.name, spec.options, name, index, spec.options)
            action = registry.registered(spec.name)
            try:
                options = spec.options if action is None else action.resolve(spec.options, defaults_of(policy, action))
            except (PydanticCustomError, ValidationError) as e:
                problems += [(entry.at, error) for error in _option_errors(e)]
                continue
            found.append(dataclasses.replace(entry, options=options))
        resolved[name] = tuple(found)
    return resolved, problems


def _option_errors(error: PydanticCustomError | ValidationError) -> list[PydanticCustomError]:
    """Each problem of an action's options, as an error :func:`located_line` places (one of a model's ``errors()``)."""
    if isinstance(error, PydanticCustomError):
        return [error]
    return [
        PydanticCustomError(item["type"], "{message}", item.get("ctx") or {"message": item["msg"]})
        for item in error.errors(include_url=False)
    ]


def fitted(
    policy: Sections,
    resolved: ResolvedAction[Any],
    action: RegisteredAction[OptionsT],
    *,
    source: str,
    positions: Positions,
    written: Mapping[KeyPath, str],
) -> ResolvedAction[OptionsT]:
    """``resolved`` with the options that ``action``, registered under its name now, takes.

    Raises:
        PolicyError: They do not fit the action's model; the message points at the policy's line, one line
            per problem.
    """
    try:
        return action.fit(resolved, defaults_of(policy, action))
    except (PydanticCustomError, ValidationError) as e:
        lines = [
            located_line(error, resolved.at, source=source, positions=positions, written=written)
            for error in _option_errors(e)
        ]
        raise PolicyError("\n".join(lines)) from e
