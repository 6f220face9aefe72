"""The built-in boundary actions: ``host_cache_release``, ``malloc_trim``, ``release_done_components`` and its pair.

:mod:`ddo_hooks.hooks.actions` registers each from its entry in :data:`BUILT_IN` (this module imports
nothing of it): its function, the prefix of its tracker component and what :func:`~ddo_hooks.attach`
checks of it, if anything. Each receives its options as the model that
:data:`~ddo_hooks.policy.builtins.BUILT_IN_OPTIONS` holds for it (``ctx.options.collect``).
``host_cache_release`` runs the release core with the policy's ``release`` settings (overridden per
boundary) and remembers its last allocator snapshot, so that each report says what was pinned since
the previous boundary.
``malloc_trim`` is a separate opt-in: after a release it asks glibc to return freed heap pages to
the operating system (with ``pinned_use_cuda_host_register`` the C library keeps the pages a
release frees, so RSS does not follow); elsewhere it is an explicit no-op report.

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
import os
import sys
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ddo_hooks.boundaries import (
    HOST_CACHE_COMPONENT_PREFIX,
    HOST_CACHE_RELEASE,
    MALLOC_TRIM,
    RELEASE_DONE_COMPONENTS,
    STAGE_DONE_COMPONENTS,
)
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.hooks.cores import check_release_core

if TYPE_CHECKING:
    from ddo_hooks.hooks.actions import BoundaryContext
    from ddo_hooks.policy.builtins import DoneComponentsOptions, ReleasePolicy
    from ddo_hooks.policy.model import HookPolicy
    from ddo_hooks.policy.parts import ResolvedAction

__all__ = [
    "BUILT_IN",
    "BuiltIn",
    "check_named_components",
    "check_weights_files",
    "host_cache_release",
    "malloc_trim",
    "release_done_components",
    "stage_done_components",
]


def host_cache_release(ctx: BoundaryContext) -> Any:
    """The built-in release: :func:`~ddo_hooks.release_pytorch_host_cache` with its options.

    Options (the policy's ``release`` settings, overridden by the boundary's own): ``collect``,
    ``min_releasable_bytes``, ``trigger`` (``dropped``: only when a component left the pipeline
    since the previous boundary) and ``core``. Dropped components it could not free are noted as
    survivors. With ``core: ddo`` it calls DDO's ``release_pytorch_host_cache`` instead
    (:func:`~ddo_hooks.release.ddo_core.release_with_ddo`) and returns DDO's report, validated; a
    ``trigger: dropped`` that finds nothing left still answers ``not_triggered`` without calling it.
    """
    from ddo_hooks.release.host_cache import not_triggered, release_pytorch_host_cache  # imports torch

    options: ReleasePolicy = ctx.options
    if options.trigger == "dropped" and not ctx.dropped_names:
        return not_triggered(ctx.boundary, "no component left the pipeline since the previous boundary", ctx.device)
    if options.core == "ddo":
        from ddo_hooks.release.ddo_core import release_with_ddo

        return release_with_ddo(phase=ctx.boundary, device=ctx.device)
    report = release_pytorch_host_cache(
        enabled=True,
        phase=ctx.boundary,
        device=ctx.device,
        collect=options.collect,
        expect_freed=ctx.dropped,
        min_releasable_bytes=options.min_releasable_bytes,
        pinned_since=ctx.state.get("last"),
    )
    release = report.release
    last = release.after or release.before
    if last is not None:
        ctx.state["last"] = (ctx.boundary, last)
    if release.collection is not None and release.collection.survivors:
        ctx.note_survivors(release.collection.survivors)
    return report


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


def malloc_trim(ctx: BoundaryContext) -> Any:
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


class _Mark(NamedTuple):
    """Where ``release_done_components`` left off: its boundary, the faults so far and ``RssFile`` after it.

    The process's fault counts are its own: a child forked after the mark was taken counts from 0,
    so the mark holds the pid it was taken in.
    """

    boundary: str
    minor: int
    major: int
    rss_file: int
    pid: int


def _faults_since(last: _Mark | None, faults: tuple[int, int] | None, rss_file: int | None) -> Any:
    """What bringing pages back cost since ``last``; ``None`` where that cannot be trusted.

    Unavailable at the first boundary, where the platform does not count faults, and in a child
    forked since the mark: its counters started again at 0, so the differences would be meaningless.
    """
    from ddo_hooks.reports.done_components import FaultsSince

    if last is None or faults is None or rss_file is None or last.pid != os.getpid():
        return None
    minor, major = faults[0] - last.minor, faults[1] - last.major
    if minor < 0 or major < 0:  # counters that went back: not this process's own
        return None
    return FaultsSince(since=last.boundary, minor_faults=minor, major_faults=major,
                       rss_file_growth_bytes=rss_file - last.rss_file)  # fmt: skip


def _faults() -> tuple[int, int] | None:
    """The process's minor and major page faults so far, where the platform counts them."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, usage.ru_majflt


def release_done_components(ctx: BoundaryContext) -> Any:
    """Give back the clean file pages of the components whose work in this call is done.

    A component that holds copies of its weights (pinned by group offloading with
    ``low_cpu_mem_usage=False``, or loaded into memory) does not depend on its weights files, and
    keeps its copies (``own_copies``), unless the option ``stable_files: true`` declares that the
    files stay as they are while the pipeline is attached: then its copies are pointed back at its
    weights files where they are equal byte for byte (:mod:`ddo_hooks.release.file_views`), and from
    then on it is staged at each use, as with ``low_cpu_mem_usage=True``; a file changed since
    raises :class:`~ddo_hooks.errors.WeightsFileChangedError` at the start of the next pipeline call
    (:func:`check_weights_files`), and detach copies the weights back.

    The components are ``ctx.done`` (those that ran before ``before_transformer`` was due), or
    those the ``components`` option names. A component another attached pipeline holds is left
    (``shared``), as is one whose weights ``pinned_copies.from_files`` pinned (``pinned_from_files``), and one
    whose weights are not file views or were written. Its report (route
    ``done_components_release``) also says what bringing pages back cost since this action's
    previous boundary: the process's page faults and the growth of ``RssFile``.

    Dropped pages leave the process's RSS, not the machine: they stay in the page cache, charged to
    the cgroup, and the report's ``cgroup_released_bytes`` says what left the cgroup's charge. The
    option ``evict: true`` evicts them from the page cache too; the next call reads them from the
    disk (major faults).
    """
    from ddo_hooks.release.file_pages import left_pinned, left_shared, supported
    from ddo_hooks.release.file_views import give_back
    from ddo_hooks.release.from_files import pinned_from_files
    from ddo_hooks.release.host_memory import observe_host
    from ddo_hooks.reports.done_components import (
        ComponentPages,
        DoneComponentsRelease,
        DoneComponentsReleaseReport,
        DoneComponentsReleaseSetup,
    )

    started = time.perf_counter()
    faults, host_before = _faults(), observe_host()
    options: DoneComponentsOptions = ctx.options
    named = options.components
    held = {} if ctx.pipeline is None else ctx.pipeline.components
    modules = [(name, held[name]) for name in (ctx.done if named is None else named) if held.get(name) is not None]
    pages: list[ComponentPages] = []
    why = supported()
    unbound = ctx.state.setdefault("unbound", weakref.WeakKeyDictionary())
    for name, module in modules if why is None else ():
        holder, pinned = ctx.held_elsewhere(module), pinned_from_files(module)
        if holder is not None:
            pages.append(left_shared(name, module, holder))
        elif pinned is not None:
            pages.append(left_pinned(name, module, pinned))
        else:
            pages.append(give_back(name, module, unbound, stable_files=options.stable_files, evict=options.evict))
    host_after = observe_host()
    released = sum(p.released_bytes for p in pages)
    since = _faults_since(ctx.state.get("last"), faults, host_before.rss_file_bytes)
    after = _faults()
    if after is not None and host_after.rss_file_bytes is not None:
        ctx.state["last"] = _Mark(ctx.boundary, *after, host_after.rss_file_bytes, os.getpid())
    status: Literal["executed", "noop"]
    reason: Literal["nothing_done", "nothing_released", "unsupported"] | None
    if any(p.outcome == "released" for p in pages):
        status, reason = "executed", None
        detail = f"{sum(p.outcome == 'released' for p in pages)} done component(s) gave back {released} bytes"
    elif why is not None:
        status, reason, detail = "noop", "unsupported", why
    elif not modules:
        status, reason = "noop", "nothing_done"
        detail = "no component's work in this call is done yet" if named is None else "no named component is held"
    else:
        status, reason, detail = "noop", "nothing_released", "every done component was left as it was (see each)"
    charged = host_before.cgroup_memory_bytes, host_after.cgroup_memory_bytes
    body = DoneComponentsRelease(
        boundary=ctx.boundary, status=status, noop_reason=reason, detail=detail, components=tuple(pages),
        released_bytes=released, host_before=host_before, host_after=host_after, faults_since_previous=since,
        cgroup_released_bytes=None if charged[0] is None or charged[1] is None else charged[0] - charged[1],
        elapsed_seconds=time.perf_counter() - started,
    )  # fmt: skip
    return DoneComponentsReleaseReport(setup=DoneComponentsReleaseSetup(done_components_release=body))


def stage_done_components(ctx: BoundaryContext) -> Any:
    """Pin again the copies that ``release_done_components`` (``stable_files: true``) replaced by file views.

    A component whose pinned copies were pointed back at its files is onloaded from pinned blocks
    made at each onload; staging it gives it exact-size pinned copies (slabs) again, so that its
    next calls run as fast as before. ``lowest-latency`` stages before the transformer of the first
    call after an idle time that gave the copies back: memory back while idle, speed while busy.
    Its report is a repack's (route ``pinned_copy_repack``, each ``pinned_bytes_before`` 0), or a
    no-op when no component is to be staged.
    """
    from ddo_hooks.release.file_views import stage_again

    report = None if ctx.pipeline is None else stage_again(ctx.pipeline, phase=ctx.boundary)
    if report is None:
        return ctx.action_report("noop", detail="no component's pinned copies were given back to stage again")
    return report


def check_weights_files(pipelines: list[Any]) -> None:
    """At the start of each call, before any component runs: raise where a weights file a component reads changed.

    A component whose copies ``release_done_components`` (``stable_files: true``) freed reads its
    weights files from then on, and one whose weights ``pinned_copies.from_files: register`` registered
    in place reads their pages; a file rewritten since would change the call's outputs, so the call
    raises :class:`~ddo_hooks.errors.WeightsFileChangedError` instead (one ``fstat`` per file).
    Nothing is rebound or registered before its module is imported, so a policy that does neither
    pays two dictionary lookups.
    """
    views = sys.modules.get("ddo_hooks.release.file_views")
    pinned = sys.modules.get("ddo_hooks.release.from_files")
    for pipe in pipelines:
        if views is not None:
            views.check_rebound(pipe)
        if pinned is not None:
            pinned.check_registered(pipe)


def check_named_components(pipeline: Any, policy: HookPolicy, action: ResolvedAction) -> None:
    """Refuse a ``release_done_components`` that names a component the pipeline does not hold (its attach check).

    Raises:
        InvalidArgumentError: The message names the component, the policy line and what the pipeline holds.

    Examples:
        >>> from types import SimpleNamespace
        >>> from ddo_hooks import HookPolicy
        >>> action = {"name": "release_done_components", "options": {"components": ["vae"]}}
        >>> boundaries = {"after_call": {"actions": [action]}}
        >>> policy = HookPolicy.from_mapping({"version": 1, "boundaries": boundaries})
        >>> pipe = SimpleNamespace(components={"vae": SimpleNamespace(parameters=list)})
        >>> resolved = policy.actions("after_call")[0]
        >>> check_named_components(pipe, policy, resolved)  # it holds a vae: nothing to refuse
    """
    named = action.options.components
    held = [name for name, value in pipeline.components.items() if callable(getattr(value, "parameters", None))]
    unknown = [name for name in named or () if name not in held]
    if unknown:
        raise InvalidArgumentError(
            f"{policy.locate(action.at)}: {RELEASE_DONE_COMPONENTS} at {action.boundary} names {unknown[0]!r}, which "
            f"this {type(pipeline).__name__} does not hold as a module; it holds {', '.join(held)} "
            "(or leave components out: the components whose work in the call is done)"
        )


class BuiltIn(NamedTuple):
    """What :data:`BUILT_IN` holds for one built-in action.

    Attributes:
        run: The action.
        component_prefix: Its reports are recorded under ``f"{component_prefix}_{boundary}"``.
        check: What :func:`~ddo_hooks.attach` checks of it before installing anything, given the pipeline,
            the policy and the action as the policy resolves it; ``None`` for nothing.

    Examples:
        >>> BUILT_IN["malloc_trim"].component_prefix, BUILT_IN["malloc_trim"].check
        ('malloc_trim', None)
    """

    run: Callable[[BoundaryContext], Any]
    component_prefix: str
    check: Callable[[Any, HookPolicy, ResolvedAction], None] | None = None


BUILT_IN: dict[str, BuiltIn] = {
    HOST_CACHE_RELEASE: BuiltIn(host_cache_release, HOST_CACHE_COMPONENT_PREFIX, check_release_core),
    MALLOC_TRIM: BuiltIn(malloc_trim, MALLOC_TRIM),
    RELEASE_DONE_COMPONENTS: BuiltIn(release_done_components, "done_components", check_named_components),
    STAGE_DONE_COMPONENTS: BuiltIn(stage_done_components, "stage_done"),
}
"""Each built-in action, one entry per name of :data:`~ddo_hooks.policy.builtins.BUILT_IN_OPTIONS`."""
