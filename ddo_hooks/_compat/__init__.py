"""Private compatibility code: every touch of another library's internals, one module per library.

ddo_hooks reads a few private attributes of torch, diffusers and accelerate because no public
surface offers what it needs (the pinned host allocator's entry points, the hook registry's
attribute, group offloading's CPU copies, accelerate's saved forward). Each such attribute is
touched only in :mod:`ddo_hooks._compat.torch`, :mod:`ddo_hooks._compat.diffusers` or
:mod:`ddo_hooks._compat.accelerate`, and listed there as a :class:`Touch` whose probe says whether
the installed release still has it. ``tests/test_compat.py`` runs every probe, so a release that
renames or removes one fails a test that names the attribute and the version.

Examples:
    >>> touch = Touch("torch", "torch._C._made_up", "an example", lambda: False, since=(2, 5))
    >>> touch.expected("2.11.0+cu130"), touch.expected("2.4.1")
    (True, False)
    >>> print(touch.missing_message("2.11.0+cu130"))  # doctest: +ELLIPSIS
    torch 2.11.0+cu130: torch._C._made_up is missing or changed; ddo_hooks uses it for an example ...
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Touch", "version_at_least"]


def version_at_least(version: str, minimum: tuple[int, ...]) -> bool:
    """Whether a version string such as ``"2.11.0+cu130"`` is at least ``minimum``.

    Examples:
        >>> version_at_least("0.42.1", (0, 41)), version_at_least("2.9.1", (2, 10))
        (True, False)
    """
    numbers = tuple(int(n) for n in re.findall(r"\d+", version.split("+", 1)[0])[: len(minimum)])
    return numbers >= minimum


@dataclass(frozen=True)
class Touch:
    """One private attribute of another library that ddo_hooks relies on.

    Attributes:
        library: The distribution (``torch``, ``diffusers``, ``accelerate``).
        attribute: Its dotted name as people find it in that library's source.
        purpose: What ddo_hooks uses it for.
        probe: Returns whether the installed library has it, as ddo_hooks expects.
        since: The first release that has it; older releases are not expected to.
        condition: Returns whether this build is expected to have it at all (e.g. CUDA builds only).
    """

    library: str
    attribute: str
    purpose: str
    probe: Callable[[], bool]
    since: tuple[int, ...] = ()
    condition: Callable[[], bool] | None = None

    def expected(self, version: str) -> bool:
        """Whether a release of this version (and this build) should have the attribute."""
        if self.since and not version_at_least(version, self.since):
            return False
        return self.condition is None or bool(self.condition())

    def missing_message(self, version: str) -> str:
        """What a failing compatibility test says."""
        since = f" (present since {'.'.join(map(str, self.since))})" if self.since else ""
        return (
            f"{self.library} {version}: {self.attribute} is missing or changed; ddo_hooks uses it for "
            f"{self.purpose}{since}. Update ddo_hooks/_compat/ for this {self.library} release"
        )
