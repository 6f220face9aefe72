r"""Reading JSON Lines: the lines of a text, the lines cut off mid-write, and JSON past Python's limits.

A report file's writers append one whole line at a time, so a line is lost only when its write is
cut short (a crash, a full disk): what is left is the start of a JSON object without its end, a
*cut line* (:func:`is_cut_line`), and the next line starts on a line of its own. A reader that
allows it leaves such a line out, wherever it is, with a warning that names it
(:func:`cut_line_warning`); a line that is complete JSON, a valid record or not, or that is not
JSON in another way, is never taken for a cut one. :func:`beyond_json_limits` says, in this
project's words and at its line and column, why a text that Python's :mod:`json` refuses for its
own limits cannot be read: an integer of more digits than Python converts, or values nested
deeper than its reader goes.

Examples:
    >>> list(text_lines('{"a": 1}\n{"b": 2}\n'))
    ['{"a": 1}', '{"b": 2}']
    >>> is_cut_line('{"component": "x", "rep'), is_cut_line('{"n": 1}'), is_cut_line('{"n" 1}')
    (True, False, False)
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator

__all__ = ["beyond_json_limits", "cut_line_warning", "first_line", "is_cut_line", "looks_like_a_path", "text_lines"]


# What may follow the place json.loads stops at, in a line cut in the middle of a value: the start of
# true/false/null or a minus sign (it expected a value), a number's point or exponent mark (it read
# the digits before), or a \u escape short of its four hex digits.
_CUT_TAILS = {
    "Expecting value": re.compile(r"-|t(?:ru?)?|f(?:a(?:ls?)?)?|n(?:ul?)?"),
    "Expecting ',' delimiter": re.compile(r"\.|[eE][+-]?"),
    "Invalid \\uXXXX escape": re.compile(r"u[0-9a-fA-F]{0,3}"),
}


def is_cut_line(line: str) -> bool:
    r"""Whether ``line`` is the start of a JSON object whose end is missing: a write cut short.

    The line starts with ``{`` and :func:`json.loads` fails only because the text ends: inside a
    string, after a key, a value or a comma, or inside a number or a ``true``/``false``/``null``.
    Complete JSON (a valid record or not), text after a complete value, and any other syntax error
    are not a cut line.

    Examples:
        >>> [is_cut_line(line) for line in ('{', '{"a": [1, 2', '{"a": tr', '{"a": 1.', '{"a": "x\\u00')]
        [True, True, True, True, True]
        >>> [is_cut_line(line) for line in ('{"a": 1}', '{"a": 1} {', '{"a": x', '[1, 2', '', 'null')]
        [False, False, False, False, False, False]
    """
    text = line.strip()
    if not text.startswith("{"):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Unterminated string starting at":
            return True
        tail = text[e.pos :]
        if not tail:  # it wanted more text
            return True
        pattern = _CUT_TAILS.get(e.msg)
        if pattern is None or pattern.fullmatch(tail) is None:
            return False
        return e.msg != "Expecting ',' delimiter" or text[e.pos - 1].isdigit()
    except (ValueError, RecursionError):  # past one of Python's limits before its end: an error of its own
        return False
    return False


def looks_like_a_path(text: str) -> bool:
    r"""Whether ``text``, given where JSON text was expected, looks like the path of a file instead.

    One line without ``{`` (no record, no report) that ends in ``.jsonl`` or ``.json`` or names a
    file that exists: ``MetricsTracker.from_jsonl("run.jsonl")`` meant ``read_jsonl``.

    Examples:
        >>> looks_like_a_path("run.jsonl"), looks_like_a_path("out/run.json "), looks_like_a_path("{}")
        (True, True, False)
        >>> looks_like_a_path("not json"), looks_like_a_path("a.jsonl\nb.jsonl")
        (False, False)
    """
    name = text.strip()
    if not name or len(name) > 4096 or "{" in name or "\n" in name or "\r" in name:
        return False
    if name.lower().endswith((".jsonl", ".json")):
        return True
    try:
        return os.path.isfile(name)
    except (OSError, ValueError):  # a NUL byte, a name too long
        return False


def cut_line_warning(source: str, number: int) -> str:
    """The warning that a reader gives for the cut line ``number`` of ``source``, which it leaves out."""
    return (
        f"{source}:{number}: the line is cut off (not complete JSON: its writer stopped mid-line, e.g. in a crash "
        "or on a full disk); its record is left out"
    )


_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"?|[\[\]{}]|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?')
"""A JSON string (to pass over; it never holds a raw line break), a bracket, or a number."""


def beyond_json_limits(text: str, error: ValueError | RecursionError) -> tuple[int, int, str]:
    r"""Where and why :func:`json.loads` refused ``text`` for one of Python's limits: ``(line, column, sentence)``.

    ``error`` is what :func:`json.loads` raised other than a :class:`json.JSONDecodeError`: a
    :class:`ValueError` for an integer of more digits than Python converts
    (:func:`sys.get_int_max_str_digits`), a :class:`RecursionError` for values nested too deeply.
    The place is that integer, or where the nesting is deepest (1-based; ``(1, 1)`` when not found).

    Examples:
        >>> import json
        >>> text = '{"a": 1,\n "b": ' + "9" * 5000 + "}"
        >>> try:
        ...     json.loads(text)
        ... except ValueError as e:
        ...     line, column, sentence = beyond_json_limits(text, e)
        >>> line, column, sentence[:50]
        (2, 7, 'an integer of 5,000 digits, more than Python reads')
    """
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()  # 0: no limit (Python 3.10 before 3.10.7)
    depth, deepest, at = 0, 0, 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > deepest:
                deepest, at = depth, match.start()
        elif token in ("]", "}"):
            depth -= 1
        elif isinstance(error, ValueError) and limit and token[0] != '"' and token.lstrip("-").isdigit():
            digits = len(token.lstrip("-"))
            if digits > limit:
                sentence = (
                    f"an integer of {digits:,} digits, more than Python reads ({limit:,} at most; "
                    "sys.set_int_max_str_digits sets it); check that this is the report file you meant"
                )
                return (*_line_and_column(text, match.start()), sentence)
    if isinstance(error, RecursionError):
        sentence = (
            f"the JSON nests {deepest:,} levels deep, deeper than Python's JSON reader goes (a report nests a few "
            "levels); check the brackets, and that this is the report file you meant"
        )
        return (*_line_and_column(text, at), sentence)
    return 1, 1, f"cannot be read as JSON ({error}); check that this is the report file you meant"


def _line_and_column(text: str, offset: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def text_lines(text: str) -> Iterator[str]:
    r"""The lines of ``text`` one at a time: ``text.splitlines()``, without a list of every line at once.

    Examples:
        >>> text = "a\r\nb\u2028c\n\nd"
        >>> list(text_lines(text)) == text.splitlines()
        True
    """
    if not any(mark in text for mark in _OTHER_LINE_BREAKS):  # the usual JSON Lines: only "\n" ends a line
        start, size = 0, len(text)
        while start < size:
            end = text.find("\n", start)
            end = size if end < 0 else end
            yield text[start:end]
            start = end + 1
        return
    yield from _split_lines(text)


def _split_lines(text: str) -> Iterator[str]:
    """:func:`text_lines` without looking through the text for the other line breaks first (a line at a time)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end + 1
        yield from text[start:end].splitlines()  # the other line breaks as splitlines has them
        start = end


def first_line(text: str, *, past_cut_lines: bool = False) -> str | None:
    r"""The first line of ``text`` that is not blank, as :func:`text_lines` has it; ``None`` when all are.

    Only the start of the text is read (:func:`text_lines` looks through all of it once first).

    Args:
        text: The text.
        past_cut_lines: Pass over the lines cut off mid-record too (:func:`is_cut_line`).

    Examples:
        >>> first_line("\n  \r\n{}\n[]"), first_line(" \n"), first_line('{"a": \n{}', past_cut_lines=True)
        ('{}', None, '{}')
    """
    lines = (line for line in _split_lines(text) if line.strip())
    return next((line for line in lines if not (past_cut_lines and is_cut_line(line))), None)


_OTHER_LINE_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
"""What ``str.splitlines`` also ends a line at, besides ``"\\n"``."""
