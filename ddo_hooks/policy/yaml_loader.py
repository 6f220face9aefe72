r"""Reading hook policies: a safe, bounded, position-tracking YAML loader.

:func:`compose_policy_yaml` checks the size (:data:`MAX_POLICY_BYTES`) and the bracket nesting
(:data:`MAX_DEPTH`) of the text before parsing it, composes the YAML node tree (with libyaml when
PyYAML has it, else, and for every syntax error message, with :class:`PolicyLoader`, a
:class:`yaml.SafeLoader`), and builds plain Python data from it, recording the 1-based (line,
column) of every key path (``("boundaries", "after_call", "actions", 1)``) and the text of every
scalar that YAML read as something other than a string (``yes`` for ``true``), so that messages
show what the user wrote. Duplicate keys, non-string keys, unknown tags, values a tag cannot
read (``!!bool maybe``), merge keys and recursive aliases are collected as located problems
instead of being silently resolved. :func:`load_yaml` raises them at once.

Only :class:`~ddo_hooks.errors.PolicyError` escapes this module's public functions, and no Python
object other than plain data is ever built (``!!python/...`` tags are refused).

Examples:
    >>> data, positions = load_yaml("version: 1\nboundaries:\n  after_call: {enabled: false}\n")
    >>> data["boundaries"]["after_call"], positions[("boundaries", "after_call", "enabled")]
    ({'enabled': False}, (3, 16))
    >>> load_yaml("version: 1\nversion: 2\n", source="policy.yaml")
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.PolicyError: policy.yaml:2:1: version: duplicate key (first at line 1, ...
    >>> load_yaml("enabled: !!bool maybe\n", source="p.yaml")
    Traceback (most recent call last):
    ...
    ddo_hooks.errors.PolicyError: p.yaml:1:10: enabled: cannot be read as a value: !!bool maybe ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import yaml

from ddo_hooks._diagnostics import KeyPath, Positions, cut, format_key_path, show_value
from ddo_hooks._text_files import read_text_file
from ddo_hooks.errors import PolicyError
from ddo_hooks.policy import yaml_text
from ddo_hooks.policy.messages import Problem, join_problems

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_POLICY_BYTES",
    "LoadedYaml",
    "PolicyLoader",
    "compose_policy_yaml",
    "load_yaml",
    "read_policy_file",
]

MAX_POLICY_BYTES = 1024 * 1024
"""The largest policy accepted: 1 MiB (bytes of a file, characters of text), checked before parsing."""

MAX_DEPTH = 100
"""The deepest nesting of mappings and lists a policy may have, checked before and while parsing."""

MAX_NODES = 100_000
"""The most YAML nodes a policy may expand to (guards against alias bombs; aliases are blamed where there are some)."""

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_NULL_TAG = "tag:yaml.org,2002:null"
_SCALAR_FIXES = {
    "tag:yaml.org,2002:bool": "write true or false",
    "tag:yaml.org,2002:int": "write a whole number such as 42",
    "tag:yaml.org,2002:float": "write a number such as 1.5",
    "tag:yaml.org,2002:timestamp": "write a date such as 2024-01-31, or quote it to keep it as text",
    "tag:yaml.org,2002:binary": "write base64 text, or drop the tag",
    "tag:yaml.org,2002:null": "write null, or quote it to keep it as text",
}
_NON_PRINTABLE = yaml.reader.Reader.NON_PRINTABLE
_CLoader = getattr(yaml, "CSafeLoader", None)


class PolicyLoader(yaml.SafeLoader):
    """The YAML loader of policies: :class:`yaml.SafeLoader`, so no Python objects are ever built."""


class _TooLarge(Exception):
    pass


class _TooDeep(Exception):
    def __init__(self, line: int, column: int) -> None:
        super().__init__(line, column)
        self.line, self.column = line, column


@dataclass
class LoadedYaml:
    """A composed policy document: plain data and where everything in it came from.

    Attributes:
        data: The document as plain data (``None`` for an empty document).
        positions: The 1-based (line, column) of every key path.
        written: The text of each scalar that YAML read as something other than a string.
        problems: Located problems found while building (each one line of a message).
        broken: The key paths whose values were left out because of a problem.
    """

    data: Any
    positions: Positions = field(default_factory=dict)
    written: dict[KeyPath, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    broken: list[KeyPath] = field(default_factory=list)


class _Left:
    """A value left out of the data because of a problem."""


_LEFT_OUT = _Left()


class _Builder:
    """Build plain data from composed nodes, recording positions and collecting problems."""

    def __init__(self, source: str) -> None:
        self.constructor = PolicyLoader("")
        self.source = source
        self.loaded = LoadedYaml(None)
        self.count = 0
        self.active: set[int] = set()
        self.built: set[int] = set()  # the nodes built: one built again is reached through an alias
        self.aliased = False

    def problem(self, mark: Any, path: KeyPath, text: str, *, broken: bool = False) -> None:
        line, column = mark.line + 1, mark.column + 1
        prefix = f"{format_key_path(path)}: " if path else ""
        self.loaded.problems.append(((line, column), f"{self.source}:{line}:{column}: {prefix}{text}"))
        if broken:
            self.loaded.broken.append(path)

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _TooLarge
        self.aliased |= id(node) in self.built
        self.built.add(id(node))
        if len(path) > MAX_DEPTH:
            raise _TooDeep(node.start_mark.line + 1, node.start_mark.column + 1)
        if id(node) in self.active:
            self.problem(node.start_mark, path, "a recursive alias; write the value out instead", broken=True)
            return _LEFT_OUT
        if isinstance(node, yaml.ScalarNode):
            return self.build_scalar(node, path)
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            text = f"unsupported YAML tag {_tag(node.tag)!r}; use a plain mapping or list"
            self.problem(node.start_mark, path, text, broken=True)
            return _LEFT_OUT
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                result: list[Any] = []
                for index, item in enumerate(node.value):
                    self.loaded.positions[(*path, index)] = (item.start_mark.line + 1, item.start_mark.column + 1)
                    value = self.build(item, (*path, index))
                    result.append(None if value is _LEFT_OUT else value)
                return result
            return self.build_mapping(node, path)
        finally:
            self.active.discard(id(node))

    def build_scalar(self, node: yaml.ScalarNode, path: KeyPath) -> Any:
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as e:
            if node.tag in _SCALAR_FIXES:  # e.g. !!binary text that is not base64
                self.unreadable(node, path, f"{_written(node)} ({cut(str(e.problem), 100)})")
            else:
                text = f"unsupported YAML tag {_tag(node.tag)!r}; use a plain string, number, boolean or null"
                self.problem(node.start_mark, path, text, broken=True)
            return _LEFT_OUT
        except ValueError as e:  # e.g. an int of more than 4300 digits, or month 13 of a timestamp
            self.unreadable(node, path, f"{cut(str(e), 100)} ({_written(node)})", "Exceeds the limit" in str(e))
            return _LEFT_OUT
        except (KeyError, IndexError, AttributeError, TypeError, OverflowError):  # PyYAML's own slips
            self.unreadable(node, path, f"{_written(node)} is not a valid {_tag(node.tag).removeprefix('!!')}")
            return _LEFT_OUT
        if not isinstance(value, str):
            self.loaded.written[path] = cut(node.value) or repr("")
        return value

    def unreadable(self, node: yaml.ScalarNode, path: KeyPath, reason: str, too_long: bool = False) -> None:
        fix = "write a shorter number" if too_long else _SCALAR_FIXES.get(node.tag, "quote it to keep it as text")
        self.problem(node.start_mark, path, f"cannot be read as a value: {reason}; {fix}", broken=True)

    def build_mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first: dict[str, Any] = {}
        for key_node, value_node in node.value:
            mark = key_node.start_mark
            if key_node.tag == _MERGE_TAG:
                self.problem(mark, path, "YAML merge keys ('<<') are not supported; write the keys out")
                continue
            key = self.build(key_node, path) if isinstance(key_node, yaml.ScalarNode) else key_node
            if key is _LEFT_OUT:
                continue
            if not isinstance(key, str):
                shown = cut(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "a mapping or list"
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
            self.loaded.positions[(*path, key)] = (mark.line + 1, mark.column + 1)
            value = self.build(value_node, (*path, key))
            if value is not _LEFT_OUT:
                result[key] = value
        return result


def compose_policy_yaml(text: str, source: str = "<string>") -> LoadedYaml:
    """Parse one YAML document safely into plain data, positions, written scalars and problems.

    Args:
        text: The YAML text.
        source: The name used in messages (a path, or ``"<string>"``).

    Returns:
        The :class:`LoadedYaml`; its ``problems`` are located lines the caller reports.

    Raises:
        PolicyError: The text is too large or nested too deeply, is not valid YAML (with the
            position of the YAML mark), or expands to too many nodes: problems that leave no data.
    """
    if not isinstance(text, str):
        raise PolicyError(f"{source}: expected the policy as text (str), got {type(text).__name__}")
    if len(text) > MAX_POLICY_BYTES:
        raise PolicyError(
            f"{source}: the policy is {len(text):,} characters long, more than a policy may be "
            f"({MAX_POLICY_BYTES:,}); a policy is a few lines: check that this is the file you meant"
        )
    if (bad := _NON_PRINTABLE.search(text)) is not None:  # what PyYAML's reader refuses, found at once
        line, column = yaml_text.line_column(text, bad.start())
        cause = yaml.reader.ReaderError(source, bad.start(), ord(bad.group()), "unicode", "not printable")
        character = f"control character U+{ord(bad.group()):04X}"
        raise PolicyError(f"{source}:{line}:{column}: {character} is not allowed in YAML; use plain text") from cause
    try:
        if (deep := yaml_text.too_deep(text, MAX_DEPTH)) is not None:
            raise _TooDeep(*deep)
        node = _compose(text)
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _NULL_TAG and not node.value):
            return LoadedYaml(None)
        builder = _Builder(source)
        data = builder.build(node, ())
    except yaml.MarkedYAMLError as e:
        raise PolicyError(_describe_yaml_error(e, source)) from e
    except yaml.YAMLError as e:
        raise PolicyError(f"{source}: not valid YAML: {cut(str(e), 200)}") from e
    except _TooLarge as e:
        has, why = ("expands to", "use fewer aliases") if builder.aliased else ("has", "a policy is a few dozen")
        fix = "" if builder.aliased else ": check that this is the policy you meant"
        raise PolicyError(f"{source}: the policy {has} more than {MAX_NODES} YAML nodes; {why}{fix}") from e
    except _TooDeep as e:
        raise PolicyError(
            f"{source}:{e.line}:{e.column}: the YAML is nested too deeply to be a policy (more than "
            f"{MAX_DEPTH} levels); check the brackets and the indentation"
        ) from e
    except RecursionError as e:
        raise PolicyError(f"{source}: the YAML is nested too deeply to be a policy") from e
    loaded = builder.loaded
    loaded.data = None if data is _LEFT_OUT else data
    loaded.positions[()] = (node.start_mark.line + 1, node.start_mark.column + 1)
    return loaded


def load_yaml(text: str, source: str = "<string>") -> tuple[Any, Positions]:
    """Parse one YAML document safely into plain data plus the position of every key path.

    Args:
        text: The YAML text.
        source: The name used in messages (a path, or ``"<string>"``).

    Returns:
        ``(data, positions)``; ``data`` is ``None`` for an empty document (only comments or blank).

    Raises:
        PolicyError: Everything :func:`compose_policy_yaml` raises, and every problem it collects
            (duplicate or non-string keys, unsupported tags, unreadable values, merge keys,
            recursive aliases), one line each in file order.
    """
    loaded = compose_policy_yaml(text, source)
    if loaded.problems:
        raise PolicyError(join_problems(loaded.problems))
    return loaded.data, loaded.positions


def _compose(text: str) -> yaml.Node | None:
    """Compose with libyaml (fast) when present; PyYAML's own parser says what a syntax error is."""
    if _CLoader is not None:
        fast = _CLoader(text)
        try:
            return fast.get_single_node()
        except yaml.MarkedYAMLError as e:
            if "maximum nesting depth" in str(e.problem) and e.problem_mark is not None:
                raise _TooDeep(e.problem_mark.line + 1, e.problem_mark.column + 1) from e
        except yaml.YAMLError:
            pass
        finally:
            fast.dispose()
    loader = PolicyLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _describe_yaml_error(e: yaml.MarkedYAMLError, source: str) -> str:
    mark = e.problem_mark or e.context_mark
    where_ = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
    problem = cut(e.problem or "invalid YAML", 200)
    if e.context:
        at = f" at line {e.context_mark.line + 1}" if e.context_mark else ""
        problem = f"{problem} ({cut(e.context, 200)}{at})"
    hint = "check the indentation, and quote values that contain ': ' or ' #'"
    if "'\\t'" in problem:
        hint = "YAML does not allow tabs for indentation; use spaces"
    elif "expected a single document" in problem:
        hint = "a policy is one YAML document; remove the extra '---'"
    return f"{where_}: not valid YAML: {problem}; {hint}"


def _written(node: yaml.ScalarNode) -> str:
    return f"{_tag(node.tag)} {cut(node.value) or repr('')}"


def _tag(tag: str) -> str:
    short = "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag
    return cut(short)


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
        text_fix="pass the file's path, or load YAML text with HookPolicy.from_yaml_text(text) and pass the policy",
    )
