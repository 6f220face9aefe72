r"""The messages of a policy's problems: one line each, in file order, showing what the user wrote.

:func:`validation_problems` turns a pydantic ``ValidationError`` into located lines,
``file:line:col: key.path: what is wrong; how to fix it``, showing each value as it was written
in the YAML (``yes``, not ``true``). :func:`join_problems` sorts the lines of every source
(the YAML itself, the version, the validation) by position and shows at most
:data:`MAX_PROBLEMS` of them, so that a file with thousands of mistakes gives a short message
quickly: the text of a line is only worked out when it is shown.

Examples:
    >>> join_problems([((3, 1), "p.yaml:3:1: b: wrong"), ((1, 1), "p.yaml:1:1: a: wrong")])
    'p.yaml:1:1: a: wrong\np.yaml:3:1: b: wrong'
    >>> problems = [((n, 1), f"p.yaml:{n}:1: k{n}: unknown key") for n in range(1, 100)]
    >>> print(join_problems(problems, limit=2))
    p.yaml:1:1: k1: unknown key
    p.yaml:2:1: k2: unknown key
    ... and 97 more problems (fix these first, then check the policy again)
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import (
    EXPECTED_TYPES,
    KeyPath,
    Positions,
    did_you_mean,
    format_key_path,
    keys_at,
    literal_problem,
    nearest_position,
    show_value,
    type_at,
)
from ddo_hooks.boundaries import BOUNDARIES, boundary_hint

__all__ = [
    "MAX_PROBLEMS",
    "Problem",
    "describe_validation_error",
    "item_problems",
    "join_problems",
    "literal_problem",
    "located_line",
    "problem_path",
    "validation_problems",
]

MAX_PROBLEMS = 50
"""The most problems one message shows; the rest are counted (``... and 12 more problems``)."""

Problem = tuple[tuple[int, int], "str | Callable[[], str]"]
"""A problem's (line, column), and its line of the message (or a function that writes it)."""


def join_problems(problems: Iterable[Problem], *, limit: int = MAX_PROBLEMS) -> str:
    """The message of ``problems``: one line each, by position, repeats dropped, at most ``limit`` shown."""
    ordered = sorted(problems, key=lambda problem: problem[0])
    shown: dict[str, None] = {}
    used = 0
    for _, line in ordered:
        if len(shown) == limit:
            break
        shown.setdefault(line() if callable(line) else line)
        used += 1
    text = "\n".join(shown)
    if used < len(ordered):
        text += f"\n... and {len(ordered) - used} more problems (fix these first, then check the policy again)"
    return text


def validation_problems(error: ValidationError, **where: Any) -> list[Problem]:
    """The located problems of a pydantic error: :func:`item_problems` of its items, with the same keywords."""
    return item_problems(error.errors(include_url=False), **where)


def item_problems(
    items: Iterable[Any],
    *,
    model: type[BaseModel],
    source: str,
    positions: Positions,
    written: Mapping[KeyPath, str] | None = None,
    hidden: Iterable[KeyPath] = (),
) -> list[Problem]:
    """The located problems of pydantic error items (``errors()``' dicts), each written only when shown.

    A custom error whose context carries ``at`` (a key path below the error's location, such as
    the index of a duplicate action) is reported at that deeper path.

    Args:
        items: The errors, located from the top of ``model``.
        model: The model that was validated (used to list allowed keys and values).
        source: The file name or ``"<string>"``.
        positions: The key positions from the YAML (empty for a mapping).
        written: The text of scalars as the YAML has them (``yes`` for ``true``).
        hidden: Key paths already reported (by the YAML): problems at, below or (other than the
            top) above them are left out, since they follow from it.
    """
    hidden = [path for path in hidden if path]
    shown = written or {}
    found: list[Problem] = []
    for item in items:
        loc = problem_path(item)
        if any(loc[: len(h)] == h or (loc and h[: len(loc)] == loc) for h in hidden):
            continue
        position = nearest_position(positions, loc)
        found.append((position or (0, 0), _writer(item, loc, model, source, position, shown)))
    return found


def problem_path(item: Any) -> KeyPath:
    """Where a pydantic error (an ``errors()`` item) points in the policy: its location, then its context's ``at``.

    Examples:
        >>> problem_path({"type": "k", "loc": ("pinned_copies",), "ctx": {"at": ("keep_encoders_pinned",)}})
        ('pinned_copies', 'keep_encoders_pinned')
    """
    loc: KeyPath = tuple(item["loc"]) + tuple((item.get("ctx") or {}).get("at", ()))
    if item["type"] == "invalid_key":  # pydantic puts the offending key itself in the location
        loc = loc[:-1]
    return loc


def _writer(
    item: Any, loc: KeyPath, model: type[BaseModel], source: str, position: tuple[int, int] | None, written: Any
) -> Callable[[], str]:
    def write() -> str:
        where = f"{source}:{position[0]}:{position[1]}" if position else source
        prefix = f"{where}: " + (f"{format_key_path(loc)}: " if loc else "")
        return prefix + _explain(item, loc, model, written)

    return write


def located_line(
    error: PydanticCustomError,
    at: KeyPath,
    *,
    source: str,
    positions: Positions,
    written: Mapping[KeyPath, str] | None = None,
) -> str:
    """The line of a policy's message for a located error raised below the key path ``at``, outside validation.

    It reads as the line :func:`validation_problems` writes for the same error raised while the policy
    validates: an action's options checked at attach (its action was registered after the policy was
    loaded) read as if they had been checked at load.

    Examples:
        >>> from ddo_hooks._diagnostics import located_error
        >>> error = located_error("action_option", "unknown option of my.flush", ("options", "x"))
        >>> located_line(error, ("boundaries", "after_call", "actions", 0), source="p.yaml", positions={})
        'p.yaml: boundaries.after_call.actions[0].options.x: unknown option of my.flush'
    """
    context = error.context or {}
    loc: KeyPath = (*at, *context.get("at", ()))
    item = {"type": error.type, "msg": error.message(), "ctx": context}
    return _writer(item, loc, BaseModel, source, nearest_position(positions, loc), written or {})()


def describe_validation_error(
    error: ValidationError,
    *,
    model: type[BaseModel],
    source: str,
    positions: Positions,
    written: Mapping[KeyPath, str] | None = None,
) -> str:
    """Turn a pydantic error into one line per problem, ordered by position in the file.

    Returns:
        The message: ``file:line:col: key.path: problem; fix`` lines joined by newlines (at most
        :data:`MAX_PROBLEMS`, then a count of the rest).
    """
    return join_problems(validation_problems(error, model=model, source=source, positions=positions, written=written))


def _explain(item: Any, loc: KeyPath, model: type[BaseModel], written: Mapping[KeyPath, str]) -> str:
    kind, message, ctx = item["type"], item["msg"], item.get("ctx") or {}
    shown = written.get(loc) or show_value(item.get("input"))
    if "template" in ctx:  # a located error of the policy's own validators: show the value as written
        return ctx["template"].replace("{value}", written[loc]) if loc in written else ctx["message"]
    if kind == "extra_forbidden":
        allowed = keys_at(model, loc[:-1])
        return _unknown(loc[-1] if loc else "?", allowed)
    if kind == "invalid_key":
        return f"key {show_value(item['input'])} is not a string; write it as a string"
    if kind == "missing":
        return "required key is missing; add it"
    if kind == "literal_error":
        return literal_problem(shown, _literal_choices(model, loc), item["input"])
    if kind == "size":
        return f"{shown} {ctx['problem']}"
    if kind in EXPECTED_TYPES:
        text = f"{EXPECTED_TYPES[kind]}, got {shown}"
        keys = keys_at(model, loc)
        return f"{text} (keys: {', '.join(keys)})" if keys and "mapping" in text else text
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if "input" in item and kind.endswith("_type"):
        return f"{message}, got {shown}"
    return message


def _unknown(key: object, allowed: list[str]) -> str:
    listed = f" (allowed: {', '.join(allowed)})" if allowed else ""
    if allowed == list(BOUNDARIES):  # a boundary's name: a UNet's is before_transformer, whatever it is called
        hint = boundary_hint(key)
        return f"unknown key; {hint.strip()}{listed}" if hint else f"unknown key{listed}"
    guess = did_you_mean(key, allowed)
    return f"unknown key; did you mean {guess!r}?{listed}" if guess else f"unknown key{listed}"


def _literal_choices(model: type[BaseModel], loc: KeyPath) -> list[Any]:
    found = type_at(model, loc)
    return list(typing.get_args(found)) if typing.get_origin(found) is typing.Literal else []
