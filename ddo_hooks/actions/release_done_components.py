"""The built-in action ``release_done_components``: the components whose work in a call is done give back their memory.

It gives back the clean file pages of the components whose work in the call is done (encoders, priors:
``ctx.done``), or of those its ``components`` option names (checked at attach by
:func:`check_named_components`). With ``stable_files: true`` it frees copies of weights equal to their files
too: the files are noted at attach (:func:`note_stable_files`), a file changed since fails the next call, and
detach copies the weights back (:func:`copy_back_copies`). Its reports (route ``done_components_release``)
are recorded under ``done_components_<boundary>``; see the done-components page of the docs.

Examples:
    >>> ReleaseDoneComponentsOptions.from_options(NAME, {"components": ["text_encoder"]})
    ReleaseDoneComponentsOptions(components=('text_encoder',), stable_files=False, evict=False)
    >>> ReleaseDoneComponentsOptions.from_options(NAME, {"stable_files": True}).stable_files
    True
"""

from __future__ import annotations

import os
import time
import weakref
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import ValidationInfo, field_validator

from ddo_hooks._diagnostics import located_error
from ddo_hooks.actions.contract import ActionOptions, BoundaryContext, PolicyView, RegisteredAction, ResolvedAction
from ddo_hooks.errors import InvalidArgumentError

if TYPE_CHECKING:
    from ddo_hooks.reports.done_components import DoneComponentsReleaseReport, FaultsSince
    from ddo_hooks.reports.repack import PinnedCopyRepackReport

__all__ = [
    "ACTION",
    "NAME",
    "ReleaseDoneComponentsOptions",
    "check_named_components",
    "copy_back_copies",
    "note_stable_files",
    "release_done_components",
]

NAME = "release_done_components"
"""The action's name, as policies write it."""


_FLAGS = {
    "stable_files": "true declares that the components' weights files stay as they are while the pipeline is "
    "attached, so that copies equal to them may be freed",
    "evict": "true evicts the dropped file pages from the page cache too, so that they leave the cgroup's charge",
}


class ReleaseDoneComponentsOptions(ActionOptions):
    """The options of ``release_done_components``."""

    components: tuple[str, ...] | None = None
    """The components to give back (default: those whose work in the call is done)."""
    stable_files: bool = False
    """Free copies of weights equal to their files: the files stay as they are while the pipeline is attached."""
    evict: bool = False
    """Evict the dropped file pages from the page cache too."""

    @classmethod
    def takes(cls) -> str:
        """Its options, with what each holds."""
        return "components (a list of component names), stable_files and evict (true or false)"

    @field_validator("components", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        if not isinstance(value, list) or not value or not all(isinstance(n, str) and n for n in value):
            fix = "use e.g. [text_encoder, text_encoder_2], or leave it out"
            message = f"{{value}} is not a list of component names; {fix}"
            raise located_error("action_option", message, value=value)
        return value

    @field_validator("stable_files", "evict", mode="before")
    @classmethod
    def _flag(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, bool):
            message = "{value} is not true or false; " + _FLAGS[str(info.field_name)]
            raise located_error("action_option", message, value=value)
        return value


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


def _faults_since(last: _Mark | None, faults: tuple[int, int] | None, rss_file: int | None) -> FaultsSince | None:
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


def release_done_components(ctx: BoundaryContext[ReleaseDoneComponentsOptions]) -> DoneComponentsReleaseReport:
    """Give back the clean file pages of the components whose work in this call is done.

    A component that holds copies of its weights (pinned by group offloading with
    ``low_cpu_mem_usage=False``, or loaded into memory) does not depend on its weights files, and
    keeps its copies (``own_copies``), unless the option ``stable_files: true`` declares that the
    files stay as they are while the pipeline is attached: then its copies are pointed back at its
    weights files where they are equal byte for byte (:mod:`ddo_hooks.release.file_views`), and from
    then on it is staged at each use, as with ``low_cpu_mem_usage=True``; a file changed since
    raises :class:`~ddo_hooks.errors.WeightsFileChangedError` at the start of the next pipeline call
    (:func:`check_files_unchanged`), and detach copies the weights back.

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
    options = ctx.options
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


def check_named_components(
    pipeline: Any, policy: PolicyView, action: ResolvedAction[ReleaseDoneComponentsOptions]
) -> None:
    """Refuse, at attach, a ``release_done_components`` naming a component the pipeline does not hold (its check).

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
            f"{policy.locate(action.at)}: {NAME} at {action.boundary} names {unknown[0]!r}, which "
            f"this {type(pipeline).__name__} does not hold as a module; it holds {', '.join(held)} "
            "(or leave components out: the components whose work in the call is done)"
        )


def note_stable_files(pipeline: Any, entries: tuple[ResolvedAction[ReleaseDoneComponentsOptions], ...]) -> None:
    """At attach, where an entry says ``stable_files: true``: note the pipeline's weights files (its attach step).

    Its copies are compared with the files later, so that a file changed since now is told from an edit.
    """
    if any(entry.options.stable_files for entry in entries):
        from ddo_hooks.release.weights_files import note_files

        note_files(pipeline)


def copy_back_copies(pipeline: Any) -> tuple[str, PinnedCopyRepackReport] | None:
    """At detach: the components whose copies it pointed back at their files get copies again (its detach step).

    Pinned ones are staged into slabs, recorded as a ``pinned_copy_repack`` at phase ``detach``; the others are
    copied into memory, so that the detached pipeline depends on its files exactly as before attach.

    Raises:
        WeightsFileChangedError: A file such weights read changed.
    """
    from ddo_hooks.release.file_views import copy_back

    staged = copy_back(pipeline, phase="detach")
    return None if staged is None else ("pinned_copy_repack", staged)


def check_files_unchanged(pipeline: Any) -> None:
    """At each call's start: raise where a file that freed copies' weights now read changed (its check at each call).

    Raises:
        WeightsFileChangedError: As :func:`~ddo_hooks.release.file_views.check_rebound`.
    """
    from ddo_hooks.release.file_views import check_rebound

    check_rebound(pipeline)


ACTION = RegisteredAction(
    NAME,
    release_done_components,
    "done_components",
    check_named_components,
    options=ReleaseDoneComponentsOptions,
    on_attach=note_stable_files,
    on_detach=copy_back_copies,
    routes=("done_components_release",),
    before_call=check_files_unchanged,
)
"""The declaration of ``release_done_components``."""
