"""The demo's own action on a CPU: the process RSS at each boundary, and which memory it is.

A release on a CPU-only torch is a no-op (it still reads the RSS once); the demo adds its action
(:data:`~ddo_hooks.cli.demo.RSS_ACTION`) last at every enabled boundary, so that its table shows the
RSS after every action of the boundary, with the split of ``/proc/self/status`` (Linux).

Examples:
    >>> from ddo_hooks import HookPolicy
    >>> policy = with_observer(HookPolicy.preset("lowest-peak"), "watch")
    >>> policy.boundary("after_call").action_names()
    ('host_cache_release', 'malloc_trim', 'watch')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddo_hooks.actions.contract import BoundaryContext
    from ddo_hooks.policy.model import HookPolicy

__all__ = ["observe_rss", "with_observer"]


def observe_rss(ctx: BoundaryContext) -> Any:
    """The demo's action: the process RSS at this boundary, as a validated action report."""
    from ddo_hooks.release.host_memory import observe_host

    seen = observe_host()
    detail = "the process RSS at this boundary and which memory it is, seen by the demo"
    fields = ("rss_bytes", "rss_anon_bytes", "rss_file_bytes", "rss_shmem_bytes", "cgroup_memory_bytes")
    data = {name: getattr(seen, name) for name in fields if getattr(seen, name) is not None}
    return ctx.action_report("executed", detail=detail, data=data)


def with_observer(policy: HookPolicy, observer: str) -> HookPolicy:
    """The policy with the action ``observer`` last at each enabled boundary (its report_sink made absolute)."""
    from ddo_hooks.policy.model import HookPolicy

    data = policy.model_dump(mode="json")
    if policy.report_sink is not None:
        data["report_sink"] = str(policy.resolve_path(policy.report_sink))
    for name in policy.enabled_boundaries():
        data["boundaries"][name]["actions"].append({"name": observer, "options": {}})
    return HookPolicy.from_mapping(data, source=f"{policy.source} (and the demo's RSS observation)")
