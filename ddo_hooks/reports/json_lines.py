r"""Reading JSON Lines: the lines of a text, one at a time.

Examples:
    >>> list(text_lines('{"a": 1}\n{"b": 2}\n'))
    ['{"a": 1}', '{"b": 2}']
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["first_line", "text_lines"]


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


def first_line(text: str) -> str | None:
    r"""The first line of ``text`` that is not blank, as :func:`text_lines` has it; ``None`` when all are.

    Only the start of the text is read (:func:`text_lines` looks through all of it once first).

    Examples:
        >>> first_line("\n  \r\n{}\n[]"), first_line(" \n")
        ('{}', None)
    """
    return next((line for line in _split_lines(text) if line.strip()), None)


_OTHER_LINE_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
"""What ``str.splitlines`` also ends a line at, besides ``"\\n"``."""
