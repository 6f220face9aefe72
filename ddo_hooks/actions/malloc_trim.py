"""The built-in action ``malloc_trim``: glibc gives freed heap pages back to the operating system.

A separate opt-in, run after a release: with ``pinned_use_cuda_host_register`` the C library keeps the
pages a release frees, so RSS does not follow. Elsewhere (no glibc) it is an explicit no-op report. It
takes its options as the policy writes them, as ever (it reads none). Its reports (route
``boundary_action``) are recorded under ``malloc_trim_<boundary>``.

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> actions = {"actions": ["host_cache_release", "malloc_trim"]}
    >>> policy = HookPolicy.from_mapping({"version": 1, "boundaries": {"after_call": actions}})
    >>> policy.boundary("after_call").action_names()
    ('host_cache_release', 'malloc_trim')
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import time
from typing import Any

from ddo_hooks.actions.contract import BoundaryContext, NoOptions, RegisteredAction
from ddo_hooks.reports.boundary import ActionReport

__all__ = ["ACTION", "NAME", "malloc_trim"]

NAME = "malloc_trim"
"""The action's name, as policies write it (and the prefix of its tracker component)."""


@functools.cache
def _malloc_trim() -> Any:
    """Glibc's ``malloc_trim``, or ``None`` where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def malloc_trim(ctx: BoundaryContext[NoOptions]) -> ActionReport:
    """Return freed heap pages to the OS (glibc ``malloc_trim(0)``); an explicit no-op where there is none.

    Its report (route ``boundary_action``) holds ``returned`` (1 when memory was released), the
    process RSS before and after, and the seconds the call took.
    """
    from ddo_hooks.release.host_memory import observe_host

    trim = _malloc_trim()
    if trim is None:
        return ctx.action_report("noop", detail="malloc_trim is glibc's; this platform's C library has none")
    before = observe_host().rss_bytes
    started = time.perf_counter()
    returned = int(trim(0))
    seconds = time.perf_counter() - started
    after = observe_host().rss_bytes
    data = {"returned": returned, "rss_before": before, "rss_after": after, "seconds": seconds}
    return ctx.action_report("executed", detail=f"malloc_trim(0) returned {returned}", data=data)


ACTION = RegisteredAction(NAME, malloc_trim, NAME, options=NoOptions)
"""The declaration of ``malloc_trim``: it takes no options (an unknown one is refused), no check, no steps."""
