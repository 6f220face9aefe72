"""The report of a pinned-copy repack (route ``pinned_copy_repack``), schema version 1.

Group offloading with ``use_stream=True`` and ``low_cpu_mem_usage=False`` keeps one pinned copy
of every weight, and PyTorch's caching host allocator rounds each copy up to a power of two. A
repack moves the copies back to back into a few slabs whose sizes are powers of two, then
releases the rounded blocks. The report says, per component, what its copies owned before and
after, and why a component was skipped or refused (left exactly as it was).

Examples:
    >>> component = ComponentRepack(component="vae", status="skipped", reason="not_group_offloaded",
    ...     detail="no group offloading hooks", groups=0, tensors=0, tensor_bytes=0,
    ...     pinned_bytes_before=0, pinned_bytes_after=0, slabs=(), seconds=0.0)
    >>> repack = PinnedCopyRepack(phase="manual", status="noop", noop_reason="nothing_to_repack",
    ...     detail="no component has pinned copies to repack", components=(component,), tensor_bytes=0,
    ...     pinned_bytes_before=0, pinned_bytes_after=0, before=None, after=None,
    ...     allocator_bytes_delta=None, releases=(), release_refused=None, host_before=None,
    ...     host_after=None, elapsed_seconds=0.0)
    >>> setup = PinnedCopyRepackSetup(pinned_copy_repack=repack)
    >>> PinnedCopyRepackReport(setup=setup).route
    'pinned_copy_repack'
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Strict, StrictInt, model_validator

from ddo_hooks._diagnostics import show_repr
from ddo_hooks.reports.allocator import AllocatorSnapshot, owned_delta
from ddo_hooks.reports.base import (
    Bytes,
    Count,
    HostObservation,
    PhaseLabel,
    ReportModel,
    ReportSummary,
    RouteReport,
    Seconds,
)
from ddo_hooks.reports.host_cache import HostCacheRelease, measured_summary

__all__ = [
    "CENSUS",
    "REPACK_REFUSALS",
    "REPACK_SKIPS",
    "ComponentRepack",
    "PinnedCopyRepack",
    "PinnedCopyRepackReport",
    "PinnedCopyRepackSetup",
    "RepackReason",
]

RepackReason = Literal[
    "not_group_offloaded",
    "on_device",
    "no_pinned_copies",
    "not_pinned",
    "already_packed",
    "no_gain",
    "disk_offload",
    "unsupported_tensor",
    "onloaded",
    "shared_storage",
    "pin_failed",
    "not_file_backed",
    "file_changed",
    "modified",
    "ddo_pins_copies",
]
"""Why a component was not repacked.

Skipped (nothing to win): ``not_group_offloaded`` (no group offloading hooks), ``on_device`` (pinning
from the files: every weight of the component is on the device), ``no_pinned_copies`` (its groups keep no
CPU copies: ``use_stream=False`` pins nothing),
``not_pinned`` (the copies are not pinned: with ``low_cpu_mem_usage=True`` diffusers pins at each
onload instead), ``already_packed``, ``no_gain`` (the slabs would own no less).

Refused (left exactly as it was): ``disk_offload`` (``offload_to_disk_path``), ``unsupported_tensor``
(a tensor subclass such as torchao's or a quantized tensor, a sparse or non-contiguous copy),
``onloaded`` (a group's weights are on its device, not on their pinned copies: a call in progress),
``shared_storage`` (another tensor holds a copy's storage: another component or a caller's
reference, which a repack could not free; or a weight another component holds too), ``pin_failed`` (pinning
a slab, or registering pages in place, failed). Pinning from the files (``pinned_copies.from_files``) also
refuses: ``not_file_backed`` (a weight is not a view of its weights file: built or loaded into memory, converted
to another dtype, or pinned already), ``file_changed`` (its file was deleted, replaced or truncated since it was
loaded), ``modified`` (a page of its views was written since: an edit, a fused LoRA), ``ddo_pins_copies`` (DDO's
runtime offloads it with ``pin_cpu_memory`` on: ``DDO_PIN_CPU_MEMORY`` missing, misspelt or not ``0``, and the
policy's ``pinned_copies.on_ddo_pinning`` is ``warn``).
"""

REPACK_SKIPS = frozenset(
    {"not_group_offloaded", "on_device", "no_pinned_copies", "not_pinned", "already_packed", "no_gain"}
)
"""The reasons of a ``skipped`` component."""
CENSUS = frozenset({"would_register", "would_stage"})
"""The statuses of a component that :func:`~ddo_hooks.release.from_files.pin_from_files` would have pinned on a
CUDA machine, found where torch has no CUDA host allocator (the census of a no-op ``unsupported_build``)."""
REPACK_REFUSALS = frozenset({
    "disk_offload", "unsupported_tensor", "onloaded", "shared_storage", "pin_failed", "not_file_backed",
    "file_changed", "modified", "ddo_pins_copies",
})  # fmt: skip
"""The reasons of a ``refused`` component."""


class ComponentRepack(ReportModel):
    """One component of a repack."""

    component: str
    """The pipeline's name for it (``transformer``), or the module's class for a lone module."""
    status: Literal["repacked", "registered", "skipped", "refused", "would_register", "would_stage"]
    """``repacked`` (into slabs; also a staging from the files); ``registered`` (its files' pages pinned in place,
    ``pinned_copies.from_files: register``); ``skipped`` (nothing to win) or ``refused`` (not safe): left
    exactly as it was. Where torch has no CUDA host allocator, pinning from the files finds what it would do
    without pinning anything (a census): ``would_register`` or ``would_stage`` (``tensor_bytes`` are the weights it
    would pin, from the files ``detail`` names), and ``skipped`` or ``refused`` with the reason it would give."""
    reason: RepackReason | None
    """Why it was skipped or refused; ``None`` otherwise."""
    detail: str
    """A sentence for people (the group or tensor concerned, and the fix where there is one)."""
    groups: Count
    """Group offloading groups found in it."""
    tensors: Count
    """Pinned copies those groups keep."""
    tensor_bytes: Bytes
    """The copies' own bytes: what they need."""
    pinned_bytes_before: Bytes
    """What the copies owned before: each rounded up to a power of two by the allocator."""
    pinned_bytes_after: Bytes
    """What they own after: the slabs' bytes when repacked (plus the rounded blocks of the copies that stayed where
    they were when a pin failed after the first slab), the registered pages' when registered, else the same as
    before."""
    slabs: Annotated[tuple[Bytes, ...], Strict(False)]
    """The slabs' sizes (powers of two); empty unless repacked."""
    seconds: Seconds
    """Inspecting, pinning the slabs and copying (not the release after it)."""
    files: Annotated[tuple[str, ...], Strict(False)] = ()
    """Pinning from the files: the weights files it was pinned from (``registered``, ``repacked``), or would be
    (``would_register``, ``would_stage``); empty otherwise."""

    @model_validator(mode="after")
    def _coherent(self) -> ComponentRepack:
        if (self.status in ("repacked", "registered", *CENSUS)) != (self.reason is None):
            raise ValueError("reason must be null exactly when status is 'repacked', 'registered' or 'would_...'")
        if self.status == "skipped" and self.reason not in REPACK_SKIPS:
            raise ValueError(f"a skipped component's reason is one of {', '.join(sorted(REPACK_SKIPS))}")
        if self.status == "refused" and self.reason not in REPACK_REFUSALS:
            raise ValueError(f"a refused component's reason is one of {', '.join(sorted(REPACK_REFUSALS))}")
        if self.status == "repacked":
            if not self.slabs or any(size & (size - 1) for size in self.slabs):
                raise ValueError("a repacked component has slabs, each a power of two in size")
            low, high = sum(self.slabs), sum(self.slabs) + self.pinned_bytes_before
            if not low <= self.pinned_bytes_after <= high:
                raise ValueError(
                    f"pinned_bytes_after must be the slabs' sum, plus the rounded blocks of copies a failed pin left "
                    f"where they were ({low} to {high})"
                )
            if self.pinned_bytes_after < self.tensor_bytes:
                raise ValueError("the slabs cannot hold fewer bytes than the copies need")
        elif self.status == "registered":
            if self.slabs or self.pinned_bytes_before or self.pinned_bytes_after < self.tensor_bytes:
                raise ValueError("a registered component has no slabs, owned nothing before and pins its bytes after")
        elif self.status in CENSUS:
            if self.slabs or self.pinned_bytes_before or self.pinned_bytes_after:
                raise ValueError(f"a {self.status} component pinned nothing: no slabs, no pinned bytes before or after")
            if not self.files:
                raise ValueError(f"a {self.status} component names the files it would be pinned from")
        elif self.slabs or self.pinned_bytes_after != self.pinned_bytes_before:
            raise ValueError("a component left as it was has no slabs and owns after what it owned before")
        return self


class PinnedCopyRepack(ReportModel):
    """Fields under ``setup.pinned_copy_repack``."""

    phase: PhaseLabel
    """When it ran: ``attach`` (the policy's ``pinned_copies.repack`` or ``from_files``), or the label a caller
    gave."""
    step: Literal["repack", "register", "stage"] = "repack"
    """What it does: ``repack`` (group offloading's pinned copies into slabs: ``pinned_copies.repack``),
    ``register`` or ``stage`` (the weights pinned from their files: ``pinned_copies.from_files``). Tables name the
    row ``<phase>/<step>`` (``attach/register``)."""
    status: Literal["executed", "noop"]
    """``executed``: at least one component was repacked or registered. ``noop``: none was, see ``noop_reason``."""
    noop_reason: Literal["disabled", "unsupported_build", "nothing_to_repack"] | None
    """Why nothing was repacked; ``None`` when executed."""
    detail: str
    """A sentence saying what happened, for people."""
    components: Annotated[tuple[ComponentRepack, ...], Strict(False)]
    """Each component looked at, in the pipeline's order."""
    tensor_bytes: Bytes
    """Total of the repacked (or registered) components' ``tensor_bytes``."""
    pinned_bytes_before: Bytes
    """Total of the repacked (or registered) components' ``pinned_bytes_before``."""
    pinned_bytes_after: Bytes
    """Total of the repacked (or registered) components' ``pinned_bytes_after``."""
    before: AllocatorSnapshot | None
    """Allocator counters before the repack; ``None`` when nothing was repacked."""
    after: AllocatorSnapshot | None
    """Allocator counters after the repack and its releases."""
    allocator_bytes_delta: StrictInt | None
    """``before.allocated_bytes - after.allocated_bytes``: positive is what the repack gave back."""
    releases: Annotated[tuple[HostCacheRelease, ...], Strict(False)]
    """The release after each repacked component, which gives its rounded blocks back."""
    release_refused: str | None
    """Why the releases could not run (another pipeline's call, components loading); the rounded
    blocks then stay cached until the next boundary's release. ``None`` when they ran."""
    host_before: HostObservation | None
    """Host memory before the repack."""
    host_after: HostObservation | None
    """Host memory after the repack and its releases."""
    elapsed_seconds: Seconds
    """Everything: inspecting, pinning, copying and the releases."""

    @model_validator(mode="after")
    def _coherent(self) -> PinnedCopyRepack:
        repacked = [c for c in self.components if c.status in ("repacked", "registered")]
        if (self.status == "executed") != bool(repacked):
            raise ValueError("status is 'executed' exactly when a component was repacked or registered")
        if (self.status == "noop") != (self.noop_reason is not None):
            raise ValueError("noop_reason must be set exactly when status is 'noop'")
        for name in ("tensor_bytes", "pinned_bytes_before", "pinned_bytes_after"):
            total = sum(getattr(c, name) for c in repacked)
            if getattr(self, name) != total:
                raise ValueError(f"{name} must be the repacked components' total, {total}")
        if repacked and (self.before is None or self.after is None or self.host_before is None):
            raise ValueError("an executed repack needs before, after and host_before")
        if repacked and self.host_after is None:
            raise ValueError("an executed repack needs host_after")
        expected = owned_delta(self.before, self.after)
        if self.allocator_bytes_delta != expected:
            raise ValueError(f"allocator_bytes_delta must be {show_repr(expected)} (before minus after)")
        census = [c for c in self.components if c.status in CENSUS]
        if census and self.noop_reason != "unsupported_build":
            raise ValueError("a 'would_...' component belongs to a census: a no-op of noop_reason unsupported_build")
        if any(c.status != f"would_{self.step}" for c in census):
            raise ValueError(f"a census of step {self.step!r} has components of status 'would_{self.step}' only")
        if self.releases and self.release_refused is not None:
            raise ValueError("release_refused says why no release ran, so it goes with no releases")
        return self


class PinnedCopyRepackSetup(ReportModel):
    """The ``setup`` section of a repack report."""

    pinned_copy_repack: PinnedCopyRepack
    """The repack's fields."""


class PinnedCopyRepackReport(RouteReport):
    """The report of one repack of pinned copies (route ``pinned_copy_repack``)."""

    route: Literal["pinned_copy_repack"] = "pinned_copy_repack"
    """What produced the report."""
    setup: PinnedCopyRepackSetup
    """The report body."""

    @property
    def repack(self) -> PinnedCopyRepack:
        """Shortcut for ``setup.pinned_copy_repack``."""
        return self.setup.pinned_copy_repack

    def summary(self) -> ReportSummary:
        """The repack as a table row, its action the step (``repack``, ``register``, ``stage``).

        The owned pinned bytes and the RSS before and after it and its releases.
        """
        return measured_summary(
            self.repack, boundary=self.repack.phase, action=self.repack.step, reason=self.repack.noop_reason
        )
