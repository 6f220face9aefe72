"""The report of components giving back memory once their work in a call is done (``done_components_release``).

A pipeline call runs its text encoders, image encoders and priors before the denoising loop of
its final stage; from then on, in that call, they are done. The built-in action
``release_done_components`` gives back the resident pages of their weights that are clean views of
their weights files (``RssFile``); the next call faults them back in. The report says, per
component, what it held and gave back, or why it was left as it was, and what bringing memory
back cost since the previous boundary (page faults, ``RssFile`` growth).

Examples:
    >>> left = ComponentPages(component="text_encoder", outcome="left", reason="not_file_backed",
    ...     detail="built in memory", file_bytes=0, other_bytes=4096, resident_bytes=None,
    ...     released_bytes=0, seconds=0.0)
    >>> body = DoneComponentsRelease(boundary="before_transformer", status="noop",
    ...     noop_reason="nothing_released", detail="no done component had clean file-backed pages",
    ...     components=(left,), released_bytes=0, host_before=None, host_after=None,
    ...     faults_since_previous=None, elapsed_seconds=0.0)
    >>> setup = DoneComponentsReleaseSetup(done_components_release=body)
    >>> DoneComponentsReleaseReport(setup=setup).route
    'done_components_release'
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Strict, StrictInt, model_validator

from ddo_hooks.reports.base import (
    Bytes,
    Count,
    HostObservation,
    PhaseLabel,
    ReportModel,
    ReportSummary,
    RouteReport,
    Seconds,
    observed_summary,
)

__all__ = [
    "ComponentPages",
    "DoneComponentsRelease",
    "DoneComponentsReleaseReport",
    "DoneComponentsReleaseSetup",
    "FaultsSince",
    "PagesReason",
]

PagesReason = Literal[
    "not_file_backed", "own_copies", "pinned_from_files", "modified", "file_changed", "shared", "unsupported"
]
"""Why a done component was left as it was.

``not_file_backed``: none of its CPU weights is a view of a weights file, and its copies
cannot be pointed back at its files (built in memory, converted to another dtype when loaded, its
files not found); ``own_copies``: it holds its own copies of weights its files hold (loaded into
memory, or pinned by group offloading) and keeps them, since the policy does not declare its files
stable (``stable_files: true``), so that it never comes to depend on them; ``pinned_from_files``: its weights
were pinned from its files (``pinned_copies.from_files``: registered in place or staged), and its onloads read
them until detach; ``modified``: a page of
its file views was written, or its copies differ from its files (a fused LoRA, an in-place edit),
so dropping them would bring back the file's bytes; ``file_changed``: its copies differ from a
weights file that was rewritten or replaced since attach (the copies are what it loaded);
``shared``: another attached pipeline holds it, and its calls would pay for the faults;
``unsupported``: not Linux, or ``/proc/self/pagemap`` cannot be read.
"""


class ComponentPages(ReportModel):
    """One done component."""

    component: str
    """The pipeline's name for it (``text_encoder_2``)."""
    outcome: Literal["released", "left"]
    """``released`` (its clean file pages were dropped) or ``left`` exactly as it was."""
    reason: PagesReason | None
    """Why it was left; ``None`` when released."""
    detail: str
    """A sentence for people."""
    file_bytes: Bytes
    """Bytes of its CPU weights that are views of a weights file."""
    other_bytes: Bytes
    """Bytes of its CPU weights that are not (built in memory, converted, pinned): they stay."""
    replaced_bytes: Bytes = 0
    """Bytes of copies of its weights (pinned by group offloading, or loaded into memory) that this
    boundary replaced by views of its weights files equal to them byte for byte, and freed (pinned
    ones into the host cache, which ``host_cache_release`` gives back); 0 when it held none."""
    resident_bytes: Bytes | None
    """Resident bytes of its file views before (whole pages); ``None`` when not counted."""
    released_bytes: Bytes
    """Resident bytes it gave back (whole pages)."""
    seconds: Seconds
    """Finding, checking and dropping its pages."""

    @model_validator(mode="after")
    def _coherent(self) -> ComponentPages:
        if (self.outcome == "released") != (self.reason is None):
            raise ValueError("reason must be null exactly when outcome is 'released'")
        if self.outcome == "left" and (self.released_bytes or self.replaced_bytes):
            raise ValueError("a component left as it was released and replaced 0 bytes")
        if self.outcome == "released" and self.released_bytes != self.resident_bytes:
            raise ValueError("a released component gives back every resident page it held (resident_bytes)")
        return self


class FaultsSince(ReportModel):
    """What bringing memory back cost since the previous boundary of the same attachment (the whole process)."""

    since: PhaseLabel
    """The previous boundary."""
    minor_faults: Count
    """Page faults served without reading a file (``ru_minflt``): pages brought back from the page cache."""
    major_faults: Count
    """Page faults that read a file (``ru_majflt``): pages the kernel had evicted."""
    rss_file_growth_bytes: int
    """``RssFile`` now minus after the previous boundary: the file pages faulted back in, net."""


class DoneComponentsRelease(ReportModel):
    """Fields under ``setup.done_components_release``."""

    boundary: PhaseLabel
    """The boundary it ran at."""
    status: Literal["executed", "noop"]
    """``executed`` when a component gave back pages; ``noop`` otherwise."""
    noop_reason: Literal["nothing_done", "nothing_released", "unsupported"] | None
    """``nothing_done``: no component's work in this call is done yet; ``nothing_released``: every done
    component was left (see each one's reason); ``unsupported``: not Linux or no pagemap; ``None`` when executed."""
    detail: str
    """A sentence saying what happened, for people."""
    components: Annotated[tuple[ComponentPages, ...], Strict(False)]
    """Each done component, in the order they ran."""
    released_bytes: Bytes
    """The components' ``released_bytes``, summed: what left the process's RSS."""
    cgroup_released_bytes: StrictInt | None = None
    """What left the cgroup's charge (``memory.current`` before minus after): what the machine got back.
    Dropped file pages stay in the page cache, charged to the cgroup, unless the action evicts them
    (``evict: true``); other processes of the cgroup move this figure too. ``None`` where no cgroup is read."""
    host_before: HostObservation | None
    """Host memory before."""
    host_after: HostObservation | None
    """Host memory after."""
    faults_since_previous: FaultsSince | None
    """The cost of bringing memory back since the previous boundary; ``None`` at the first one, where
    the platform counts no faults, and in a child forked since (its counters started again)."""
    elapsed_seconds: Seconds
    """All of it."""

    @model_validator(mode="after")
    def _coherent(self) -> DoneComponentsRelease:
        released = any(c.outcome == "released" for c in self.components)
        if (self.status == "executed") != released:
            raise ValueError("status is 'executed' exactly when a component released its pages")
        if (self.status == "noop") != (self.noop_reason is not None):
            raise ValueError("noop_reason must be set exactly when status is 'noop'")
        if self.noop_reason == "nothing_done" and self.components:
            raise ValueError("noop_reason 'nothing_done' goes with no components")
        total = sum(c.released_bytes for c in self.components)
        if self.released_bytes != total:
            raise ValueError(f"released_bytes must be the components' total, {total}")
        return self


class DoneComponentsReleaseSetup(ReportModel):
    """The ``setup`` section of a done-components report."""

    done_components_release: DoneComponentsRelease
    """Its fields."""


class DoneComponentsReleaseReport(RouteReport):
    """The report of done components giving back their memory (route ``done_components_release``)."""

    route: Literal["done_components_release"] = "done_components_release"
    """What produced the report."""
    setup: DoneComponentsReleaseSetup
    """The report body."""

    @property
    def release(self) -> DoneComponentsRelease:
        """Shortcut for ``setup.done_components_release``."""
        return self.setup.done_components_release

    def summary(self) -> ReportSummary:
        """The release as a table row (action ``release_done_components``): RSS before and after it."""
        r = self.release
        return observed_summary(r, boundary=r.boundary, action="release_done_components", reason=r.noop_reason)
