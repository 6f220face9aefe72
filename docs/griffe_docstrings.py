"""A griffe extension for the API reference: read the package's docstrings as their authors meant.

The docstrings are Google style with a few reStructuredText habits. Before griffe parses them:

* Sphinx roles (``:func:`~ddo_hooks.x.y```) become code spans (``y``);
* a paragraph ending in ``::`` before a literal block ends in ``:``.

Only the text handed to the renderer changes; the source files are not touched.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:meth|func|class|data|attr|mod|obj|exc):`(~?)([^`]+)`")
_LITERAL = re.compile(r"::\n\n")


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


def clean(text: str) -> str:
    """The docstring text griffe should parse."""
    text = _ROLE.sub(_role, text)
    return _LITERAL.sub(":\n\n", text)


class DocstringHabits(Extension):
    """Rewrites each object's docstring once, when griffe creates the object."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        """Clean the docstring of every module, class, function and attribute."""
        if obj.docstring is not None:
            obj.docstring.value = clean(obj.docstring.value)
