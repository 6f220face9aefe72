r"""Reading hook policies: a safe, position-tracking YAML loader and error messages that teach.

:func:`load_yaml` composes the YAML node tree with a :class:`yaml.SafeLoader` subclass and
builds plain Python data from it, recording the 1-based (line, column) of every key path
(``("boundaries", "after_call", "actions", 1)``). Duplicate keys, non-string keys, unknown
tags, merge keys and recursive aliases are reported with their positions instead of being
silently resolved. :func:`describe_validation_error` turns a pydantic ``ValidationError``
into one line per problem: ``file:line:col: key.path: what is wrong; how to fix it``.

Only :class:`~ddo_hooks.errors.PolicyError` escapes this module's public functions.

Examples:
    >>> data, positions = load_yaml("version: 1\nboundaries:\n  after_call: {enabled: false}\n")
    >>> data["boundaries"]["after_call"], positions[("boundaries", "after_call", "enabled")]
    ({'enabled': False}, (3, 16))
    >>> load_yaml("version: 1\nversion: 2\n", source="policy.yaml")
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.PolicyError: policy.yaml:2:1: version: duplicate key (first at line 1, ...
"""

from __future__ import annotations

import os
import types
import typing
from typing import Any, Union

import yaml
from pydantic import BaseModel, ValidationError

from ddo_hooks._diagnostics import (
    KeyPath,
    Positions,
    did_you_mean,
    format_key_path,
    nearest_position,
    read_text_file,
    show_value,
    where,
)
from ddo_hooks.errors import PolicyError

__all__ = [
    "MAX_NODES",
    "MAX_POLICY_BYTES",
    "PolicyLoader",
    "describe_validation_error",
    "load_yaml",
    "read_policy_file",
]

MAX_POLICY_BYTES = 1024 * 1024
"""The largest policy file read: 1 MiB, checked before reading."""

MAX_NODES = 100_000
"""The most YAML nodes a policy may expand to (guards against alias bombs)."""

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_NULL_TAG = "tag:yaml.org,2002:null"


class PolicyLoader(yaml.SafeLoader):
    """The YAML loader of policies: :class:`yaml.SafeLoader`, so no Python objects are ever built."""


class _TooLarge(Exception):
    pass


class _Builder:
    """Build plain data from composed nodes, recording positions and collecting problems."""

    def __init__(self, loader: PolicyLoader, source: str) -> None:
        self.loader = loader
        self.source = source
        self.positions: Positions = {}
        self.problems: list[tuple[int, int, str]] = []
        self.count = 0
        self.active: set[int] = set()

    def problem(self, mark: yaml.Mark, path: KeyPath, text: str) -> None:
        line, column = mark.line + 1, mark.column + 1
        prefix = f"{format_key_path(path)}: " if path else ""
        self.problems.append((line, column, f"{self.source}:{line}:{column}: {prefix}{text}"))

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _TooLarge
        if id(node) in self.active:
            self.problem(node.start_mark, path, "a recursive alias; write the value out instead")
            return None
        if isinstance(node, yaml.ScalarNode):
            try:
                return self.loader.construct_object(node, deep=True)
            except yaml.YAMLError:
                self.problem(
                    node.start_mark,
                    path,
                    f"unsupported YAML tag {_tag(node.tag)!r}; use a plain string, number, boolean or null",
                )
                return None
            except ValueError as e:  # e.g. Python refuses to convert an int of more than 4300 digits
                self.problem(node.start_mark, path, f"cannot be read as a value: {e}; write a shorter number")
                return None
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            self.problem(node.start_mark, path, f"unsupported YAML tag {_tag(node.tag)!r}; use a plain mapping or list")
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                result: list[Any] = []
                for index, item in enumerate(node.value):
                    self.positions[(*path, index)] = (item.start_mark.line + 1, item.start_mark.column + 1)
                    result.append(self.build(item, (*path, index)))
                return result
            return self.build_mapping(node, path)
        finally:
            self.active.discard(id(node))

    def build_mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first: dict[str, yaml.Mark] = {}
        for key_node, value_node in node.value:
            mark = key_node.start_mark
            if key_node.tag == _MERGE_TAG:
                self.problem(mark, path, "YAML merge keys ('<<') are not supported; write the keys out")
                continue
            key = self.build(key_node, path) if isinstance(key_node, yaml.ScalarNode) else key_node
            if not isinstance(key, str):
                shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a mapping or list"
                self.problem(mark, path, f"key {shown!r} is not a string (YAML read it as {show_value(key)}); quote it")
                continue
            if key in first:
                was = first[key]
                self.problem(
                    mark,
                    (*path, key),
                    f"duplicate key (first at line {was.line + 1}, again at line {mark.line + 1}); "
                    "keep only one of them",
                )
                continue
            first[key] = mark
            self.positions[(*path, key)] = (mark.line + 1, mark.column + 1)
            result[key] = self.build(value_node, (*path, key))
        return result


def load_yaml(text: str, source: str = "<string>") -> tuple[Any, Positions]:
    """Parse one YAML document safely into plain data plus the position of every key path.

    Args:
        text: The YAML text.
        source: The name used in messages (a path, or ``"<string>"``).

    Returns:
        ``(data, positions)``; ``data`` is ``None`` for an empty document (only comments or blank).

    Raises:
        PolicyError: Invalid YAML (with the position of the YAML mark), duplicate or non-string
            keys, unsupported tags, merge keys, recursive aliases or a document too large.
    """
    if not isinstance(text, str):
        raise PolicyError(f"{source}: expected the policy as text (str), got {type(text).__name__}")
    loader: PolicyLoader | None = None
    try:
        loader = PolicyLoader(text)
        node = loader.get_single_node()
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _NULL_TAG and not node.value):
            return None, {}
        builder = _Builder(loader, source)
        data = builder.build(node, ())
    except yaml.MarkedYAMLError as e:
        raise PolicyError(_describe_yaml_error(e, source)) from e
    except yaml.reader.ReaderError as e:
        line, column = _line_column(text, e.position)
        character = f"control character U+{e.character:04X}"
        raise PolicyError(f"{source}:{line}:{column}: {character} is not allowed in YAML; use plain text") from e
    except yaml.YAMLError as e:
        raise PolicyError(f"{source}: not valid YAML: {e}") from e
    except _TooLarge as e:
        raise PolicyError(f"{source}: the policy expands to more than {MAX_NODES} YAML nodes; use fewer aliases") from e
    except RecursionError as e:
        raise PolicyError(f"{source}: the YAML is nested too deeply to be a policy") from e
    finally:
        if loader is not None:
            loader.dispose()
    if builder.problems:
        raise PolicyError("\n".join(text for _, _, text in sorted(builder.problems, key=lambda p: p[:2])))
    builder.positions[()] = (node.start_mark.line + 1, node.start_mark.column + 1)
    return data, builder.positions


def _describe_yaml_error(e: yaml.MarkedYAMLError, source: str) -> str:
    mark = e.problem_mark or e.context_mark
    where_ = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
    problem = e.problem or "invalid YAML"
    if e.context:
        at = f" at line {e.context_mark.line + 1}" if e.context_mark else ""
        problem = f"{problem} ({e.context}{at})"
    hint = "check the indentation, and quote values that contain ': ' or ' #'"
    if "'\\t'" in problem:
        hint = "YAML does not allow tabs for indentation; use spaces"
    elif "expected a single document" in problem:
        hint = "a policy is one YAML document; remove the extra '---'"
    return f"{where_}: not valid YAML: {problem}; {hint}"


def _tag(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


def _line_column(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def read_policy_file(path: str | os.PathLike[str]) -> str:
    """Read a policy file as UTF-8 text (a leading byte-order mark is dropped).

    Raises:
        PolicyError: The path is missing, a directory or another non-regular file (a FIFO, a
            device), larger than :data:`MAX_POLICY_BYTES`, unreadable, binary or not UTF-8.
    """
    return read_text_file(
        path,
        kind="policy",
        error=PolicyError,
        max_bytes=MAX_POLICY_BYTES,
        directory_fix="pass a .yaml file's path",
        binary_fix="a policy is a UTF-8 YAML text file",
        encoding_fix="save the policy as UTF-8",
    )


def describe_validation_error(
    error: ValidationError, *, model: type[BaseModel], source: str, positions: Positions
) -> str:
    """Turn a pydantic error into one line per problem, ordered by position in the file.

    A custom error whose context carries ``at`` (a key path below the error's location, such as
    the index of a duplicate action) is reported at that deeper path.

    Args:
        error: The validation error of ``model``.
        model: The model that was validated (used to list allowed keys and values).
        source: The file name or ``"<string>"``.
        positions: The key positions from :func:`load_yaml` (empty for a mapping).

    Returns:
        The message: ``file:line:col: key.path: problem; fix`` lines joined by newlines.
    """
    lines: list[tuple[tuple[int, int], str]] = []
    for item in error.errors(include_url=False):
        loc: KeyPath = tuple(item["loc"]) + tuple((item.get("ctx") or {}).get("at", ()))
        if item["type"] == "invalid_key":  # pydantic puts the offending key itself in the location
            loc = loc[:-1]
        prefix = f"{where(source, positions, loc)}: " + (f"{format_key_path(loc)}: " if loc else "")
        lines.append((nearest_position(positions, loc) or (0, 0), prefix + _explain(item, loc, model)))
    lines.sort(key=lambda pair: pair[0])
    return "\n".join(dict.fromkeys(text for _, text in lines))


_EXPECTED = {
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


def _explain(item: Any, loc: KeyPath, model: type[BaseModel]) -> str:
    kind, message = item["type"], item["msg"]
    if kind == "extra_forbidden":
        allowed = _keys_at(model, loc[:-1])
        return _unknown(loc[-1] if loc else "?", allowed)
    if kind == "invalid_key":
        return f"key {show_value(item['input'])} is not a string; write it as a string"
    if kind == "missing":
        return "required key is missing; add it"
    if kind == "literal_error":
        choices = _literal_choices(model, loc)
        text = f"{show_value(item['input'])} is not allowed; use one of {', '.join(map(repr, choices))}"
        guess = did_you_mean(item["input"], [str(c) for c in choices])
        return f"{text}; did you mean {guess!r}?" if guess else text
    if kind in _EXPECTED:
        text = f"{_EXPECTED[kind]}, got {show_value(item['input'])}"
        keys = _keys_at(model, loc)
        return f"{text} (keys: {', '.join(keys)})" if keys and "mapping" in text else text
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if "input" in item and kind.endswith("_type"):
        return f"{message}, got {show_value(item['input'])}"
    return message


def _unknown(key: object, allowed: list[str]) -> str:
    guess = did_you_mean(key, allowed)
    listed = f" (allowed: {', '.join(allowed)})" if allowed else ""
    return f"unknown key; did you mean {guess!r}?{listed}" if guess else f"unknown key{listed}"


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


def _type_at(model: type[BaseModel], loc: KeyPath) -> Any:
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


def _keys_at(model: type[BaseModel], loc: KeyPath) -> list[str]:
    found = _type_at(model, loc)
    if isinstance(found, type) and issubclass(found, BaseModel):
        return list(found.model_fields)
    return []


def _literal_choices(model: type[BaseModel], loc: KeyPath) -> list[Any]:
    found = _type_at(model, loc)
    return list(typing.get_args(found)) if typing.get_origin(found) is typing.Literal else []
