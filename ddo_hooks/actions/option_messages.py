"""How an options model reads a policy's keys, and says what it refused in the policy's words.

One rule for every action's options model (:class:`~ddo_hooks.actions.contract.ActionOptions`): a
field is set under its name or its alias (``from_`` or ``from``: :func:`option_keys`), once; and a
refused value is said with its choices and types as a policy writes them (``fast, slow, null``;
``'auto' or an integer``: :func:`type_words`), never Python's (``typing.Literal[...]``,
``<class 'NoneType'>``), at ``options.<key>`` as written.

Examples:
    >>> from typing import Literal
    >>> type_words(Literal["auto"] | int), type_words(Literal["fast", "slow"] | None)
    ("'auto' or an integer", 'fast, slow or null')
    >>> choices(Literal["fast", "slow"] | None), choices(int | None)
    (['fast', 'slow', 'null'], None)
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Union

from pydantic import BaseModel, ValidationError

from ddo_hooks._diagnostics import EXPECTED_TYPES, literal_problem, located_error

if TYPE_CHECKING:
    from pydantic_core import PydanticCustomError

__all__ = ["choices", "located_option_errors", "option_keys", "read_keys", "spelling", "type_words"]

_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list"}


def option_keys(model: type[BaseModel]) -> dict[str, str]:
    """Each key a policy may write for ``model`` (a field's name, and its alias if it has one) -> the field's name."""
    keys: dict[str, str] = {}
    for name, info in model.model_fields.items():
        keys[name] = name
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                keys[alias] = name
    return keys


def read_keys(
    model: type[BaseModel], action: str, options: Mapping[str, Any], takes: str
) -> tuple[dict[str, str], list[PydanticCustomError]]:
    """Which key each field of ``model`` is given under in ``options``; and each key unknown, or given twice.

    ``takes`` is what the message of an unknown key says the action takes.

    Examples:
        >>> from pydantic import BaseModel
        >>> class Depth(BaseModel):
        ...     depth: int = 1
        >>> given, problems = read_keys(Depth, "my.flush", {"depth": 2, "deep": 3}, takes="depth")
        >>> given, [problem.message() for problem in problems]
        ({'depth': 'depth'}, ['unknown option of my.flush; it takes depth'])
    """
    keys, given = option_keys(model), dict[str, str]()  # given: field -> the key it was given under
    problems: list[PydanticCustomError] = []
    for key in options:
        if key not in keys:
            takes = getattr(model, "takes", lambda: ", ".join(model.model_fields) or "none")()
            problems.append(
                located_error("action_option", f"unknown option of {action}; it takes {takes}", ("options", key))
            )
        elif keys[key] in given:
            message = f"given twice, as {given[keys[key]]!r} and as {key!r}; give it once"
            problems.append(located_error("action_option", message, ("options", key)))
        else:
            given[keys[key]] = key
    return given, problems


def spelling(model: type[BaseModel], name: str) -> str:
    """How the policy writes the field ``name``: its alias where it has one (``from`` for ``from_``)."""
    alias = model.model_fields[name].alias
    return alias if isinstance(alias, str) else name


def _members(annotation: Any) -> Iterator[tuple[bool, Any]]:
    """``(is_value, member)`` of an annotation: each ``Literal`` value (and ``None``), or each other type."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _members(typing.get_args(annotation)[0])
    elif origin in (Union, types.UnionType):
        for argument in typing.get_args(annotation):
            yield from _members(argument)
    elif origin is Literal:
        yield from ((True, value) for value in typing.get_args(annotation))
    elif annotation is None or annotation is type(None):
        yield True, None
    else:
        yield False, annotation


def _value_word(value: object, quoted: bool) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return repr(value) if quoted and isinstance(value, str) else str(value)


def choices(annotation: Any) -> list[str] | None:
    """The values an annotation of ``Literal`` values (and ``None``) allows, as a policy writes them; else ``None``."""
    members = list(_members(annotation))
    if not members or not all(is_value for is_value, _ in members):
        return None
    return [_value_word(value, quoted=False) for _, value in members]


def type_words(annotation: Any) -> str:
    """What an annotation allows, in words: ``'auto' or an integer``, ``fast, slow or null``, ``a mapping``."""
    listed = choices(annotation) is not None
    words: list[str] = []
    for is_value, member in _members(annotation):
        if is_value:
            word = _value_word(member, quoted=not listed)
        else:
            origin = typing.get_origin(member) or member
            word = _TYPE_WORDS.get(origin, "a list" if origin in (tuple, set, frozenset) else "")
            is_mapping = isinstance(origin, type) and (issubclass(origin, (Mapping, BaseModel)) or origin is dict)
            word = word or ("a mapping" if is_mapping else f"a {getattr(origin, '__name__', origin)}")
        if word not in words:
            words.append(word)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _is_union(annotation: Any) -> bool:
    """Whether the annotation is a union of more than one kind besides ``None`` (and not only ``Literal`` values)."""
    kinds = [member for is_value, member in _members(annotation) if not (is_value and member is None)]
    return choices(annotation) is None and len(kinds) > 1


def located_option_errors(
    model: type[BaseModel], error: ValidationError, options: Mapping[str, Any]
) -> list[PydanticCustomError]:
    """Every problem of ``error`` as a located error at ``options.<key>``, showing the value as written."""
    return [_located(model, item, options) for item in error.errors(include_url=False)]


def _located(model: type[BaseModel], item: Any, options: Mapping[str, Any]) -> PydanticCustomError:
    context = item.get("ctx") or {}
    if "at" in context:  # a located error of the model's own validators
        at = (*item["loc"], *context["at"])
        message = context.get("template", context["message"])
        return located_error("action_option", message, ("options", *at), value=options.get(str(at[0])))
    key = str(item["loc"][0]) if item["loc"] else ""
    field = model.model_fields.get(option_keys(model).get(key, ""))
    annotation = None if field is None else field.annotation
    value = item["input"]
    allowed = None if annotation is None else choices(annotation)
    if allowed is not None and item["type"] == "literal_error":
        return located_error("action_option", literal_problem("{value}", allowed, value), ("options", key), value=value)
    if annotation is not None and len(item["loc"]) > 1 and _is_union(annotation):
        # a member of the union refused it (its loc names the member): say what the whole union allows
        said = f"{{value}} is not {type_words(annotation)}"
        return located_error("action_option", said, ("options", key), value=value)
    if item["type"] == "size":
        message = f"{{value}} {context['problem']}"
    elif item["type"] in EXPECTED_TYPES:  # in the words of the policy's own options
        message = f"{EXPECTED_TYPES[item['type']]}, got {{value}}"
    else:
        message = f"{{value}}: {item['msg'].removeprefix('Value error, ')}"
    return located_error("action_option", message, ("options", *item["loc"]), value=value)
