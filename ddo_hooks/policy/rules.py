"""The rules of a policy across its settings: plain functions over the sections that parsed, each yielding problems.

Shape, then rules. Each top-level section of a policy is validated on its own, every field error of it in one
pydantic pass (:mod:`~ddo_hooks.policy.passes`); then each rule of :data:`RULES` runs over what parsed and yields
each problem it finds with the key path it points at. A rule says which settings it reads (:attr:`Rule.reads`);
it is left out where one of them did not parse, since what it would say follows from that problem, which is said.
So a policy with problems in several sections, and a rule broken besides, says them all in one run.

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> policy = HookPolicy.model_construct(**{name: info.get_default(call_default_factory=True)
    ...                                        for name, info in HookPolicy.model_fields.items()})
    >>> [(at, error.message()) for at, error in broken(policy, {}, failed=())]
    []
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic_core import PydanticCustomError

from ddo_hooks._diagnostics import KeyPath, located_error
from ddo_hooks.actions.contract import ResolvedAction
from ddo_hooks.actions.host_cache_release import NAME as HOST_CACHE_RELEASE
from ddo_hooks.actions.host_cache_release import HostCacheReleaseOptions, core_problem
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.policy.offload import RUNTIMES, OffloadPolicy
from ddo_hooks.policy.parts import BoundaryPolicy, PinnedCopiesPolicy

__all__ = ["RULES", "Located", "Rule", "Sections", "broken", "overlaps"]

Located = tuple[KeyPath, PydanticCustomError]
"""A problem and the key path in the policy it points at."""


class Sections(Protocol):
    """What the rules read of a policy: its sections (those that did not parse hold their defaults)."""

    @property
    def enabled(self) -> bool:
        """The master switch."""
        ...

    @property
    def release(self) -> HostCacheReleaseOptions:
        """The ``release`` section."""
        ...

    @property
    def pinned_copies(self) -> PinnedCopiesPolicy:
        """The ``pinned_copies`` section."""
        ...

    @property
    def offload(self) -> OffloadPolicy:
        """The ``offload`` section."""
        ...

    def boundary(self, name: str) -> BoundaryPolicy:
        """The settings of one boundary."""
        ...


Resolved = Mapping[str, tuple[ResolvedAction[Any], ...]]
"""Each boundary's actions, resolved (:func:`~ddo_hooks.policy.passes.resolve_actions`)."""


@dataclass(frozen=True)
class Rule:
    """A rule across settings: the settings it reads, and the function that yields its problems."""

    reads: tuple[KeyPath, ...]
    """The key paths it reads: it is left out where one of them, or a key above or below it, did not parse."""
    check: Callable[[Sections, Resolved], Iterable[Located]]
    """What it finds, given the sections and the actions resolved."""


def overlaps(path: KeyPath, other: KeyPath) -> bool:
    """Whether one key path is the other or lies under it.

    Examples:
        >>> overlaps(("boundaries",), ("boundaries", "after_call")), overlaps(("release",), ("offload",))
        (True, False)
    """
    shorter = min(len(path), len(other))
    return path[:shorter] == other[:shorter]


def broken(policy: Sections, resolved: Resolved, *, failed: Iterable[KeyPath]) -> list[Located]:
    """Every problem of every rule of :data:`RULES` that reads nothing ``failed`` (the key paths that did not parse)."""
    failed = tuple(failed)
    found: list[Located] = []
    for rule in RULES:
        if not any(overlaps(read, path) for read in rule.reads for path in failed):
            found += rule.check(policy, resolved)
    return found


# -- the rules ----------------------------------------------------------------------------------


def _does_something(policy: Sections, resolved: Resolved) -> Iterator[Located]:
    if policy.enabled and not any(policy.boundary(name).enabled for name in BOUNDARIES):
        problem = "every boundary is disabled, so the policy would do nothing"
        fix = "enable a boundary or set enabled: false at the top"
        yield ("boundaries",), located_error("inert_policy", f"{problem}; {fix}")


def _unique(boundary: str, policy: Sections, resolved: Resolved) -> Iterator[Located]:
    seen: dict[str, int] = {}
    for index, action in enumerate(policy.boundary(boundary).actions):
        if action.name in seen:
            twice = f"action {action.name!r} is listed twice (entries {seen[action.name]} and {index})"
            error = located_error("duplicate_action", f"{twice}; list each action once")
            yield ("boundaries", boundary, "actions", index), error
        else:
            seen[action.name] = index


def _acts(boundary: str, policy: Sections, resolved: Resolved) -> Iterator[Located]:
    settings = policy.boundary(boundary)
    if settings.enabled and not settings.actions:
        fix = f"add one (e.g. [{HOST_CACHE_RELEASE}]) or set enabled: false"
        message = f"an enabled boundary needs at least one action; {fix}"
        yield ("boundaries", boundary, "actions"), located_error("no_actions", message)


def _idle_after_call_only(boundary: str, policy: Sections, resolved: Resolved) -> Iterator[Located]:
    if policy.boundary(boundary).idle is not None:
        message = "idle applies to after_call only (no other boundary can wait: the call goes on)"
        yield ("boundaries", boundary, "idle"), located_error("idle_boundary", message)


def _encoders_from_files(policy: Sections, resolved: Resolved) -> Iterator[Located]:
    pinned = policy.pinned_copies
    if pinned.keep_encoders_pinned and pinned.from_files is None:
        message = "keep_encoders_pinned pins the encoders from their files: set from_files (register or stage)"
        yield ("pinned_copies", "keep_encoders_pinned"), located_error("encoders_without_from_files", message)


def _offload_from_pinned(policy: Sections, resolved: Resolved) -> Iterator[Located]:
    pinned, runtime = policy.pinned_copies, policy.offload.runtime
    if runtime is not None and (pinned.from_files is None or not pinned.keep_encoders_pinned):
        message = (
            f"the {runtime} runtime streams only from pinned memory: set pinned_copies.from_files "
            "(register) and pinned_copies.keep_encoders_pinned: true, as the streamed-box preset does"
        )
        yield ("offload", "runtime"), located_error("offload_unpinned", message)


def _options_for_a_runtime(policy: Sections, resolved: Resolved) -> Iterator[Located]:
    offload = policy.offload
    if offload.runtime is None and "runtime" not in offload.model_fields_set and offload.model_fields_set:
        options = ", ".join(sorted(offload.model_fields_set))
        message = f"{options} set for no runtime: set runtime (one of {', '.join(RUNTIMES)}) or leave them out"
        yield ("offload", "runtime"), located_error("options_without_runtime", message)


def _release_core(policy: Sections, resolved: Resolved) -> Iterator[Located]:
    found = core_problem(policy.release)
    if found is not None:
        at, error = found
        yield ("release", *at), error


def _entries_fit_the_release_core(boundary: str, policy: Sections, resolved: Resolved) -> Iterator[Located]:
    for action in resolved.get(boundary, ()):
        if action.name == HOST_CACHE_RELEASE and isinstance(action.options, HostCacheReleaseOptions):
            found = core_problem(action.options, action.written)
            if found is not None:
                at, error = found
                yield (*action.at, *at), error


def _each(boundary: str, check: Callable[[str, Sections, Resolved], Iterable[Located]]) -> Callable[..., Any]:
    return lambda policy, resolved: check(boundary, policy, resolved)


_CORE = tuple(("release", key) for key in ("core", "collect", "min_releasable_bytes"))
_PINNED = (("pinned_copies", "from_files"), ("pinned_copies", "keep_encoders_pinned"))

RULES: tuple[Rule, ...] = (
    Rule((("enabled",), *(("boundaries", name, "enabled") for name in BOUNDARIES)), _does_something),
    *(Rule((("boundaries", name, "actions"),), _each(name, _unique)) for name in BOUNDARIES),
    *(
        Rule((("boundaries", name, "enabled"), ("boundaries", name, "actions")), _each(name, _acts))
        for name in BOUNDARIES
    ),
    *(Rule((("boundaries", name, "idle"),), _each(name, _idle_after_call_only)) for name in BOUNDARIES[:-1]),
    Rule(_PINNED, _encoders_from_files),
    Rule((("offload", "runtime"), *_PINNED), _offload_from_pinned),
    Rule((("offload", "runtime"),), _options_for_a_runtime),
    Rule(_CORE, _release_core),
    *(Rule((("boundaries", name, "actions"),), _each(name, _entries_fit_the_release_core)) for name in BOUNDARIES),
)
"""Every rule across a policy's settings, in the order their problems are said (then by position in the file)."""
