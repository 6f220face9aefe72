"""Private helpers for users' text files: saying where in them a problem is, and what a value was.

Both the policy loader and the report-file reader use these (reading the files is
:mod:`ddo_hooks._text_files`'s): the key-path helpers (:data:`KeyPath`, :data:`Positions`,
:func:`format_key_path`, :func:`nearest_position`, :func:`where`) point a message at
``file:line:col: key.path``, and :func:`show_value` and :func:`cut` keep a value short.

Examples:
    >>> format_key_path(("boundaries", "after_call", "actions", 1, "name"))
    'boundaries.after_call.actions[1].name'
"""

from __future__ import annotations

import difflib
import json
import math
import types
import typing
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:  # pydantic is imported where a model is read: the command line's --help needs none
    from pydantic import BaseModel
    from pydantic_core import PydanticCustomError

__all__ = [
    "EXPECTED_TYPES",
    "MAX_SHOWN",
    "KeyPath",
    "Positions",
    "below",
    "cut",
    "did_you_mean",
    "did_you_mean_hint",
    "format_key_path",
    "json_error_sentence",
    "literal_problem",
    "located_error",
    "nearest_position",
    "show_repr",
    "show_value",
    "where",
]

KeyPath = tuple[str | int, ...]
"""A path of mapping keys and list indices from the top of a document."""

Positions = dict[KeyPath, tuple[int, int]]
"""Each key path mapped to the 1-based (line, column) of its key (or list item)."""


def format_key_path(path: KeyPath) -> str:
    """Write a key path as people read it: ``boundaries.after_call.actions[1].name``."""
    text = ""
    for part in path:
        shown = cut(str(part))
        text += f"[{shown}]" if isinstance(part, int) else (f".{shown}" if text else shown)
    return text or "<top>"


def nearest_position(positions: Positions, path: KeyPath) -> tuple[int, int] | None:
    """The position of ``path``, or of its closest ancestor that has one; ``None`` if none does."""
    for end in range(len(path), -1, -1):
        found = positions.get(tuple(path[:end]))
        if found is not None:
            return found
    return None


def where(source: str, positions: Positions, path: KeyPath) -> str:
    """``"source:line:col"`` for ``path`` (or its closest known ancestor), else just ``source``."""
    found = nearest_position(positions, path)
    return f"{source}:{found[0]}:{found[1]}" if found else source


EXPECTED_TYPES = {
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "string_too_short": "expected a non-empty string",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
}
"""What a value of the wrong type should have been, by pydantic's error type, in this project's words (every
message about a policy's or an action's option says it so: ``expected a string, got a list``)."""


def did_you_mean(value: object, choices: Sequence[str]) -> str | None:
    """The choice closest to a misspelt ``value`` (:mod:`difflib`), or ``None``.

    Examples:
        >>> did_you_mean("before_vea", ["before_transformer", "before_vae", "after_call"])
        'before_vae'
    """
    if not isinstance(value, str):
        return None
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    if not close:
        close = [c for c in choices if c.lower() == value.lower()]
    return close[0] if close else None


def did_you_mean_hint(value: object, choices: Sequence[str]) -> str:
    """``"did you mean 'x'? "`` for the choice closest to ``value`` (:func:`did_you_mean`), or ``""``.

    Examples:
        >>> did_you_mean_hint("smalest-box", ["default", "smallest-box"]), did_you_mean_hint("zzz", ["default"])
        ("did you mean 'smallest-box'? ", '')
    """
    guess = did_you_mean(value, choices)
    return f"did you mean {guess!r}? " if guess else ""


def literal_problem(shown: str, choices: Iterable[object], value: object) -> str:
    """``'ful' is not one of full, young, auto; did you mean 'full'?``.

    Examples:
        >>> literal_problem("yes", ["full", "young", "auto"], True)
        'yes is not one of full, young, auto'
    """
    listed = [str(choice) for choice in choices]
    text = f"{shown} is not one of {', '.join(listed)}"
    guess = did_you_mean(value, listed)
    return f"{text}; did you mean {guess!r}?" if guess else text


def located_error(kind: str, message: str, at: KeyPath = (), *, value: object = None) -> PydanticCustomError:
    """A validation error; ``at`` is a key path below the field, where the message points.

    Where ``message`` holds ``{value}``, the value is shown there: as the YAML wrote it when the
    policy came from YAML (``yes``), else as :func:`show_value` writes it. The policy's models and
    every action's options model raise it.

    Examples:
        >>> located_error("device", "{value} is not a CUDA device", value=True).message()
        'true is not a CUDA device'
    """
    from pydantic_core import PydanticCustomError

    context: dict[str, Any] = {"message": message.replace("{value}", show_value(value)), "at": at}
    if "{value}" in message:
        context["template"] = message
    return PydanticCustomError(kind, "{message}", context)


def below(prefix: KeyPath, error: PydanticCustomError) -> PydanticCustomError:
    """``error`` (a :func:`located_error`) located below ``prefix``: its key path is ``prefix``, then its own.

    Examples:
        >>> below(("boundaries", "after_call"), located_error("x", "wrong", ("idle",))).context["at"]
        ('boundaries', 'after_call', 'idle')
    """
    from pydantic_core import PydanticCustomError

    context = dict(error.context or {})
    context["at"] = (*prefix, *context.get("at", ()))
    return PydanticCustomError(error.type, error.message_template, context)


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def type_at(model: type[BaseModel], loc: KeyPath) -> Any:
    """The annotation (unwrapped of ``Optional`` and ``Annotated``) at ``loc`` inside ``model``, or ``None``."""
    from pydantic import BaseModel

    current: Any = model
    for part in loc:
        current = _unwrap(current)
        origin = typing.get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            current = field.annotation
        elif origin in (tuple, list) and isinstance(part, int):
            current = typing.get_args(current)[0]
        elif origin is dict:
            current = typing.get_args(current)[1]
        else:
            return None
    return _unwrap(current)


def keys_at(model: type[BaseModel], loc: KeyPath) -> list[str]:
    """The keys of the mapping (a pydantic model) at ``loc`` inside ``model``; ``[]`` when it is not one.

    Examples:
        >>> from ddo_hooks import HookPolicy
        >>> keys_at(HookPolicy, ("release",))[:3]
        ['collect', 'min_releasable_bytes', 'trigger']
    """
    from pydantic import BaseModel

    found = type_at(model, loc)
    if isinstance(found, type) and issubclass(found, BaseModel):
        return list(found.model_fields)
    return []


MAX_SHOWN = 60
"""The most characters of one value a message shows; a longer value is cut and ends in ``...``."""


def cut(text: str, limit: int = MAX_SHOWN) -> str:
    """``text``, or its first ``limit - 3`` characters and ``...`` when it is longer than ``limit``.

    Examples:
        >>> cut("short"), cut("x" * 100, 10)
        ('short', 'xxxxxxx...')
    """
    return text if len(text) <= limit else text[: limit - 3] + "..."


def show_repr(value: object) -> str:
    """``repr(value)`` cut to :data:`MAX_SHOWN` characters, cheap and safe for any size of input.

    A huge string is cut before it is written out, and an int too long for :func:`repr` is
    described instead (Python refuses to write an int of more than 4300 digits).

    Examples:
        >>> show_repr(True), show_repr("x" * 30_000_000)[-6:], show_repr(10**5000)
        ('True', 'xxx...', 'an int of about 5,001 digits')
    """
    if isinstance(value, str):
        return cut(repr(value[: MAX_SHOWN + 1]))
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 600:
        return f"an int of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    if isinstance(value, (bool, int, float)) or value is None:
        return cut(repr(value))
    return f"a {cut(type(value).__name__)}"


def show_value(value: object) -> str:
    """A short YAML-like rendering of a value for messages: ``null``, ``true``, ``'text'``, ``a list``.

    Strings and numbers are cut to :data:`MAX_SHOWN` characters (see :func:`show_repr`).

    Examples:
        >>> show_value(None), show_value(True), show_value("cpu"), show_value([1])
        ('null', 'true', "'cpu'", 'a list')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return show_repr(value)


_JSON_SENTENCES = {
    "Unterminated string starting at": "a string is not closed",
    "Expecting value": "a value is expected here",
    "Expecting property name enclosed in double quotes": "a key in double quotes is expected here",
    "Expecting ',' delimiter": "a ',' is expected between two items",
    "Expecting ':' delimiter": "a ':' is expected after the key",
    "Extra data": "more text follows the JSON value",
    "Invalid control character at": "a control character in a string must be escaped",
    "Invalid \\escape": "a backslash escape is not valid",
    "Invalid \\uXXXX escape": "a \\u escape needs four hex digits",
}


def json_error_sentence(error: json.JSONDecodeError) -> str:
    """What a JSON syntax error means, as a sentence, with the parser's own words after it.

    Examples:
        >>> try:
        ...     json.loads('{"a": "b')
        ... except json.JSONDecodeError as e:
        ...     json_error_sentence(e)
        'a string is not closed (Unterminated string starting at)'
    """
    sentence = _JSON_SENTENCES.get(error.msg)
    return f"{sentence} ({error.msg})" if sentence else cut(error.msg, 120)
