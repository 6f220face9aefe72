"""The values a policy's settings take, each checked where it is read, with a message that says the fix.

A CUDA device (:func:`validate_device`), an action's name (:data:`ActionName`), options as JSON data
(:func:`json_value`), a duration (:data:`Duration`), a report sink's path (:func:`report_sink_problem`) and how
many reports to keep (:func:`keep_reports_in_range`). :mod:`~ddo_hooks.policy.parts` and
:mod:`~ddo_hooks.policy.model` build the policy's sections from them.

Examples:
    >>> validate_device("cuda:1"), parse_duration("500ms")
    ('cuda:1', 0.5)
    >>> json_value({"depth": (1, 2)}, ())
    {'depth': [1, 2]}
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

from ddo_hooks._diagnostics import KeyPath, located_error, show_value
from ddo_hooks.boundaries import ACTION_NAME_PATTERN, ACTION_NAME_RULE
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.release.devices import parse_cuda_device
from ddo_hooks.reports.tracker import MAX_RECORDS

__all__ = [
    "DEVICE_PATTERN",
    "MAX_DURATION_SECONDS",
    "ActionName",
    "Duration",
    "json_value",
    "keep_reports_in_range",
    "openable_sink",
    "parse_duration",
    "report_sink_problem",
    "validate_device",
]

_ACTION_NAME_RE = re.compile(ACTION_NAME_PATTERN)
DEVICE_PATTERN = r"^cuda(:[0-9]+)?$"
"""The ``device`` values a policy accepts."""


def validate_device(value: object) -> str:
    """A policy's ``device``: ``cuda`` or ``cuda:N`` (a :func:`located_error` otherwise)."""
    try:
        index = parse_cuda_device(value if isinstance(value, str) else None)
    except InvalidArgumentError as e:
        raise located_error("device", "{value} is not a CUDA device; use 'cuda' or 'cuda:N'", value=value) from e
    return "cuda" if index is None else f"cuda:{index}"


def _action_name(value: object) -> object:
    if isinstance(value, str) and not _ACTION_NAME_RE.match(value):
        raise located_error("action_name", f"{{value}} is not an action name; use {ACTION_NAME_RULE}", value=value)
    return value


def json_value(value: object, at: KeyPath) -> Any:
    """Check that ``value`` is JSON data; return a copy with tuples as lists."""
    if len(at) > 64:
        raise located_error("json_value", "options nest more than 64 levels deep (or contain themselves)", at[:1])
    if isinstance(value, float) and not math.isfinite(value):
        message = "{value} is not a JSON number; use a finite number or a string"
        raise located_error("json_value", message, at, value=value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [json_value(item, (*at, i)) for i, item in enumerate(value)]
    if not isinstance(value, Mapping):
        kinds = "strings, numbers, booleans, null, lists and mappings"
        raise located_error("json_value", f"a {type(value).__name__} is not a JSON value; use {kinds}", at)
    for key in value:
        if not isinstance(key, str):
            raise located_error("json_value", f"option key {show_value(key)} is not a string; quote it", at)
    return {key: json_value(item, (*at, key)) for key, item in value.items()}


ActionName = Annotated[
    str, BeforeValidator(_action_name), WithJsonSchema({"type": "string", "pattern": ACTION_NAME_PATTERN})
]
"""A registered action's name, e.g. ``host_cache_release`` (see :data:`ACTION_NAME_PATTERN`)."""


_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(ms|s|m|min)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}
MAX_DURATION_SECONDS = 24 * 3600
"""The longest duration a policy may write: a day."""


def report_sink_problem(value: str) -> str | None:
    """Why ``attach`` could not open ``report_sink`` whatever the folders hold, or ``None``."""
    if "\x00" in value:
        return "{value} holds a NUL character, which no file name may hold; remove it"
    if value.startswith("~"):
        try:
            Path(value).expanduser()
        except RuntimeError:
            user = value[1:].split("/", 1)[0].split(os.sep, 1)[0]
            who = f"no user {user!r} on this machine" if user else "no home folder is known here"
            return f"{{value}} starts with '~' but there is {who}; write the full path, or '~/' for your home"
    return None


def openable_sink(value: str) -> str:
    """A policy's ``report_sink``: a path ``attach`` can open whatever the folders hold (a :func:`located_error`)."""
    if problem := report_sink_problem(value):
        raise located_error("report_sink", problem, value=value)
    return value


def keep_reports_in_range(value: object) -> object:
    """``keep_reports`` from 0 to :data:`~ddo_hooks.reports.tracker.MAX_RECORDS`; other types: the strict int check."""
    if type(value) is int and value < 0:
        raise located_error(
            "keep_reports",
            f"{{value}} is negative; use 0 (none in memory: read report_sink) to {MAX_RECORDS:,}",
            value=value,
        )
    if type(value) is int and value > MAX_RECORDS:
        problem = f"{{value}} is more than {MAX_RECORDS:,}, the most reports an attachment keeps in memory"
        raise located_error(
            "keep_reports", f"{problem}; keep fewer, and read every report from report_sink", value=value
        )
    return value


def parse_duration(value: object) -> float:
    """A duration in seconds, from a number of seconds or a string such as ``2s``, ``500ms``, ``1.5 min``.

    Raises:
        PydanticCustomError: Negative, non-finite, longer than a day, or not a duration.

    Examples:
        >>> parse_duration("2s"), parse_duration("500ms"), parse_duration(1.5), parse_duration("1 min")
        (2.0, 0.5, 1.5, 60.0)
    """
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION_RE.match(value)):
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds is None or not math.isfinite(seconds) or not 0 <= seconds <= MAX_DURATION_SECONDS:
        forms = "a number of seconds, or e.g. '2s', '500ms', '1 min' (at most a day)"
        raise located_error("duration", f"{show_value(value)} is not a duration; use {forms}")
    return seconds


Duration = Annotated[
    float,
    BeforeValidator(parse_duration, json_schema_input_type=Annotated[float, Field(ge=0)] | str),
]
"""Seconds, written as a number or with a unit (``2s``, ``500ms``, ``1 min``)."""
