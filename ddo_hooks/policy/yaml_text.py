"""What is checked of a policy's text before any YAML parser reads it: how deep its brackets nest.

PyYAML's scanner is quadratic in the depth of flow brackets, so :mod:`~ddo_hooks.policy.yaml_loader` scans the
text once, linearly, with :func:`too_deep`, and refuses a text nested deeper than a policy can be.

Examples:
    >>> too_deep("a: [[1]]", 2) is None, too_deep("a: [[[1]]]", 2)
    (True, (1, 6))
    >>> too_deep("a: '[[[' # [[[", 2) is None  # quoted text and comments are skipped
    True
"""

from __future__ import annotations

import re

__all__ = ["line_column", "too_deep"]

_FLOW = re.compile(r"""[\[\]{}'"#\n]""")


def too_deep(text: str, limit: int) -> tuple[int, int] | None:
    """Where flow brackets first nest more than ``limit`` deep (line and column), else ``None``.

    Linear in the text, before any parser sees it (PyYAML's scanner is quadratic in the depth of
    brackets); an estimate that skips quoted text and comments.
    """
    depth, position = 0, 0
    while (found := _FLOW.search(text, position)) is not None:
        i, char = found.start(), found.group()
        position = i + 1
        if char in "[{":
            depth += 1
            if depth > limit:
                return line_column(text, i)
        elif char in "]}":
            depth = max(depth - 1, 0)
        elif char == "#" and (i == 0 or text[i - 1] in " \t\n"):
            end = text.find("\n", i)
            position = len(text) if end < 0 else end
        elif char in "'\"" and (i == 0 or text[i - 1] in " \t\n[{,:?-"):
            position = _end_of_quote(text, i + 1, char)
    return None


def _end_of_quote(text: str, i: int, quote: str) -> int:
    while True:
        end = text.find(quote, i)
        if end < 0:
            return len(text)
        if quote == "'" and text.startswith("''", end):
            i = end + 2
        elif quote == '"' and _escaped(text, end):
            i = end + 1
        else:
            return end + 1


def _escaped(text: str, end: int) -> bool:
    start = end
    while start > 0 and text[start - 1] == "\\":
        start -= 1
    return (end - start) % 2 == 1


def line_column(text: str, offset: int) -> tuple[int, int]:
    """The 1-based line and column of ``offset`` in ``text``."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1
