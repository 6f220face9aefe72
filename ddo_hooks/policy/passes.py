r"""Every problem of a policy in one run: the checks pydantic skips after a problem, run again without it.

pydantic checks a model's fields first and runs the model's own checks of several fields together
(every boundary disabled; an action's options against ``release``; ``keep_encoders_pinned`` without
``from_files``) only when all of its fields passed: a policy with a wrong value in one section and a
conflict in another showed one of them per run. :func:`every_problem` leaves out each key that a
problem points at and checks the rest again, a few times over, so that the checks skipped run too. A
problem found so is kept unless it may follow from a key left out: it is at or under one, or it is a
check of several keys of the section that held one (``keep_encoders_pinned`` without the
``from_files`` that was left out for its own problem). :func:`checked_whole` is the whole check of a
loaded policy: the YAML's problems, the version, then these passes, one error for all of them.

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

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ddo_hooks._diagnostics import KeyPath, Positions, show_value, where
from ddo_hooks.errors import PolicyError
from ddo_hooks.policy.messages import MAX_PROBLEMS, Problem, join_problems, problem_path, validation_problems
from ddo_hooks.policy.yaml_loader import LoadedYaml

__all__ = ["MAX_PASSES", "SUPPORTED_VERSIONS", "checked_whole", "every_problem", "version_problem", "without"]

SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
"""The policy versions this release reads."""

_SUPPORTED = f"supported versions: {', '.join(map(str, SUPPORTED_VERSIONS))}"

MAX_PASSES = 8
"""The most times a policy is checked again; each pass leaves out at least one more key."""


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


def checked_whole(model: type[ModelT], loaded: LoadedYaml, source: str) -> tuple[ModelT, Positions]:
    """``loaded`` validated as ``model`` at once: the YAML's problems, the version and every setting, in file order.

    Returns:
        The model, and the position of every key (an action written as a bare name at its ``name`` too).

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
    cause: ValidationError | None = None
    try:
        policy = model.model_validate({**data, "version": 1})  # the rest is checked as version 1
    except ValidationError as e:
        cause = e
        problems += every_problem(
            model, {**data, "version": 1}, e, source=source, positions=positions, written=written, hidden=loaded.broken
        )
    except RecursionError as e:
        raise PolicyError(f"{source}: the policy is nested too deeply (or contains itself)") from e
    if problems:
        raise _policy_error(problems) from cause
    known = dict(positions)
    for path, position in positions.items():
        if len(path) == 4 and path[0] == "boundaries" and path[2] == "actions":
            known.setdefault((*path, "name"), position)
    return policy, known


def _policy_error(problems: list[Problem]) -> PolicyError:
    """The error of a policy checked whole: one line per problem, in file order, and the problems themselves."""
    error = PolicyError(join_problems(problems))
    error.problems = tuple(problems)
    return error


def every_problem(
    model: type[BaseModel],
    data: Mapping[str, Any],
    error: ValidationError,
    *,
    source: str,
    positions: Positions,
    written: Mapping[KeyPath, str],
    hidden: Iterable[KeyPath] = (),
) -> list[Problem]:
    """The problems of ``error`` (``model.model_validate(data)``'s), and those of the checks it skipped.

    Args:
        model: The model that refused ``data``.
        data: What it refused.
        error: Its error.
        source: The file name, or ``<mapping>``, for the messages.
        positions: The key positions from the YAML.
        written: The text of scalars as the YAML has them.
        hidden: Key paths the YAML reported already (see :func:`~ddo_hooks.policy.messages.validation_problems`).
    """
    hidden = tuple(hidden)
    found = validation_problems(error, model=model, source=source, positions=positions, written=written, hidden=hidden)
    seen = {problem_path(item) for item in error.errors(include_url=False)}
    removed: list[KeyPath] = []
    current: Any = data
    last = error
    for _ in range(MAX_PASSES):
        if len(found) >= MAX_PROBLEMS:  # more than a message shows: these are to be fixed first
            break
        progress = False
        for item in last.errors(include_url=False):
            cut = without(current, problem_path(item))
            if cut is not None:
                current, path = cut
                removed.append(path)
                progress = True
        if not progress:
            break
        try:
            model.model_validate(current)
        except ValidationError as e:
            last = e
        except RecursionError:  # the first pass said so already
            break
        else:
            break

        found += validation_problems(
            last,
            model=model,
            source=source,
            positions=positions,
            written=written,
            hidden=hidden,
            keep=_new(frozenset(seen), tuple(removed)),
        )
        seen |= {problem_path(item) for item in last.errors(include_url=False)}
    return found


def _new(seen: frozenset[KeyPath], removed: tuple[KeyPath, ...]) -> Callable[[Any, KeyPath], bool]:
    """Whether a problem of a later pass is new: not at a path seen, and not one that may follow from a key left out."""
    return lambda item, loc: loc not in seen and not _follows(item, loc, removed)


def _follows(item: Any, loc: KeyPath, removed: Iterable[KeyPath]) -> bool:
    """Whether a problem found after leaving out the keys ``removed`` may follow from leaving one out."""
    section = tuple(item["loc"])  # where the check ran: shorter than ``loc`` for a check of several keys
    for path in removed:
        if loc[: len(path)] == path:  # at it or under it (a key left out is missing, or takes its default)
            return True
        if len(section) < len(loc) and section and path[:-1] == section:  # a check of the section that held it
            return True
    return False


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
