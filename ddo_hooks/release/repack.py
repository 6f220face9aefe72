"""Repack group offloading's pinned copies into power-of-two slabs, then give the rounded blocks back.

With ``use_stream=True`` and ``low_cpu_mem_usage=False``, diffusers' group offloading keeps one
pinned copy of every weight (``ModuleGroup.cpu_param_dict``), made by ``pin_memory()``, which the
caching host allocator rounds up to a power of two: a Flux-shaped transformer's 2.44 GiB of
weights own 3.83 GiB. :func:`repack_pinned_copies` copies them back to back into a few slabs whose
sizes are already powers of two (:mod:`ddo_hooks.release.slabs`), points each group and each
offloaded weight at its place in a slab, and releases the old blocks: the copies then own what
they need, plus the slabs' tails.

Before anything changes, every copy of every group is checked: a component that cannot be
repacked safely is left exactly as it was, and the report says why
(:data:`~ddo_hooks.reports.repack.RepackReason`). Then it moves a slab at a time (slabs of at
most :data:`REPACK_SLAB_BYTES`): a slab is pinned and filled, its copies' groups and weights are
switched over to it, and their rounded blocks are released before the next slab is pinned, so that
the repack never holds more than one slab beside the copies it has not moved yet. A pin that fails
at the first slab leaves the component as it was; a later one leaves the moved copies in their
slabs and the rest in their rounded blocks, and says so. Repacking does not change a value: the
copies are the same bytes, so outputs are bitwise equal.

Examples:
    On a machine without CUDA nothing is pinned, so there is nothing to repack:

    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline
    >>> report = repack_pinned_copies(build_pipeline("sd"))
    >>> report.repack.noop_reason in ("unsupported_build", "nothing_to_repack")
    True
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch

from ddo_hooks.boundaries import PHASE_PATTERN
from ddo_hooks.errors import BoundaryRefusedError, InvalidArgumentError
from ddo_hooks.ledger import LEDGER
from ddo_hooks.release import allocator as _allocator
from ddo_hooks.release.counters import read_snapshot
from ddo_hooks.release.devices import DeviceLike, parse_cuda_device
from ddo_hooks.release.host_cache import release_pytorch_host_cache
from ddo_hooks.release.host_memory import observe_host
from ddo_hooks.release.pinned_copies import (
    Component,
    Left,
    Stored,
    by_storage,
    inspect_component,
    refuse,
    skip,
)
from ddo_hooks.release.slabs import Slab, SlabPlan, plan_slabs, rounded_size
from ddo_hooks.reports.allocator import AllocatorSnapshot, owned_delta
from ddo_hooks.reports.base import HostObservation
from ddo_hooks.reports.host_cache import HostCacheRelease
from ddo_hooks.reports.repack import (
    ComponentRepack,
    PinnedCopyRepack,
    PinnedCopyRepackReport,
    PinnedCopyRepackSetup,
)

__all__ = ["REPACK_SLAB_BYTES", "repack_pinned_copies", "stage_pinned_copies"]


REPACK_SLAB_BYTES = 512 * 1024**2
"""The largest slab a repack pins: what it may hold beside the rounded copies it has not moved yet."""


def pin_slab(slab: Slab, stored: list[Stored], copied: Callable[[int], None] | None = None) -> dict[int, torch.Tensor]:
    """Pin one slab and put the bytes of each storage placed in it in its place; each one's new tensor, by index.

    ``copied(index)`` runs once storage ``index`` is copied (staging from the files drops its pages there).
    Nothing is switched over.
    """
    pinned = _allocator.backend().pinned_empty(slab.size).untyped_storage()
    moved = {}
    for index, offset in slab.placements:
        source = stored[index].tensor
        target = torch.empty(0, dtype=source.dtype)
        target.set_(pinned, offset // source.element_size(), source.size(), source.stride())
        moved[index] = target.copy_(source)
        if copied is not None:
            copied(index)
    return moved


def pin_slabs(plan: SlabPlan, stored: list[Stored], copied: Callable[[int], None] | None = None) -> list[torch.Tensor]:
    """Pin every slab of ``plan`` (:func:`pin_slab`); each storage's new tensor, in order.

    Nothing is switched over: a pin that fails leaves every storage as it was.
    """
    moved: dict[int, torch.Tensor] = {}
    for slab in plan.slabs:
        moved.update(pin_slab(slab, stored, copied))
    return [moved[index] for index in range(len(stored))]


def switch(component: Component, moved: list[torch.Tensor]) -> None:
    """Point each group and each offloaded weight at its copy's place in a slab (cannot fail halfway)."""
    for entry, target in zip(component.stored, moved, strict=True):
        entry.point(target)
    for group in component.groups:
        LEDGER.write(group, repacked=True)


def _left_as_it_was(name: str, left: Left, started: float) -> ComponentRepack:
    stored = by_storage(left.copies).values()
    owned = sum(rounded_size(entry.nbytes) for entry in stored)
    return ComponentRepack(
        component=name,
        status=left.status,
        reason=left.reason,
        detail=left.detail,
        groups=len(left.groups),
        tensors=len(stored),
        tensor_bytes=sum(entry.nbytes for entry in stored),
        pinned_bytes_before=owned,
        pinned_bytes_after=owned,
        slabs=(),
        seconds=time.perf_counter() - started,
    )


def _repack_one(
    name: str, module: torch.nn.Module, staging: bool = False, moved_slab: Callable[[], None] | None = None
) -> ComponentRepack:
    """Repack (or stage) one component a slab at a time; ``moved_slab()`` runs after each slab's switch-over."""
    started = time.perf_counter()
    try:
        component = inspect_component(name, module, staging=staging)
        copies = [copy for entry in component.stored for copy in entry.copies]
        plan = plan_slabs([entry.nbytes for entry in component.stored], max_slab=REPACK_SLAB_BYTES)
        if plan.capacity >= plan.rounded and not staging:
            what = f"slabs for {name}'s copies would own {plan.capacity:,} bytes, no less than now ({plan.rounded:,})"
            raise skip("no_gain", what).found(component.groups, copies)
    except Left as left:
        return _left_as_it_was(name, left, started)
    done: list[Slab] = []
    failed = ""
    for slab in plan.slabs:
        try:
            moved = pin_slab(slab, component.stored)
        except RuntimeError as e:  # out of pinned memory: what is not moved yet stays as it was
            failed = f"pinning a slab of {slab.size:,} bytes for {name} failed: {e}".splitlines()[0]
            if not done:
                return _left_as_it_was(name, refuse("pin_failed", failed).found(component.groups, copies), started)
            break
        for index, target in moved.items():
            component.stored[index].point(target)
        done.append(slab)
        if moved_slab is not None:
            moved_slab()
    for group in component.groups:
        LEDGER.write(group, repacked=True)
    placed = {index for slab in done for index, _ in slab.placements}
    unplaced = [entry.nbytes for index, entry in enumerate(component.stored) if index not in placed and entry.nbytes]
    what = "sources of {} staged" if staging else "pinned copies of {} moved"
    detail = f"{len(placed)} {what.format(name)} into {len(done)} slabs"
    if failed:
        kept = "stay unpinned views of its files" if staging else "keep their rounded blocks"
        detail += f" of {len(plan.slabs)}; {failed}: the other {len(unplaced)} {kept}"
    return ComponentRepack(
        component=name,
        status="repacked",
        reason=None,
        detail=detail,
        groups=len(component.groups),
        tensors=len(component.stored),
        tensor_bytes=plan.needed,
        pinned_bytes_before=0 if staging else plan.rounded,
        pinned_bytes_after=sum(slab.size for slab in done) + (0 if staging else sum(map(rounded_size, unplaced))),
        slabs=tuple(slab.size for slab in done),
        seconds=time.perf_counter() - started,
    )


def _components(target: Any, names: Iterable[str] | None) -> list[tuple[str, torch.nn.Module]]:
    if isinstance(target, torch.nn.Module):
        if names is not None:
            raise InvalidArgumentError("components= names a pipeline's components; a lone module has none")
        return [(type(target).__name__, target)]
    found = getattr(target, "components", None)
    if not isinstance(found, dict):
        raise InvalidArgumentError(
            f"repack_pinned_copies() needs a diffusers pipeline or a torch module, got {type(target).__name__}"
        )
    modules = {name: value for name, value in found.items() if isinstance(value, torch.nn.Module)}
    if names is None:
        return list(modules.items())
    wanted = [names] if isinstance(names, str) else list(names)
    unknown = [name for name in wanted if name not in modules]
    if unknown:
        raise InvalidArgumentError(
            f"{type(target).__name__} has no model component {unknown[0]!r}; its model components: {', '.join(modules)}"
        )
    return [(name, modules[name]) for name in wanted]


def repack_pinned_copies(
    target: Any,
    *,
    components: Iterable[str] | None = None,
    release: bool = True,
    device: DeviceLike = "cuda",
    phase: str = "manual",
) -> PinnedCopyRepackReport:
    """Move group offloading's pinned copies into power-of-two slabs, so that they own what they need.

    Call it once the pipeline is offloaded (``enable_group_offload(..., use_stream=True)`` with
    ``low_cpu_mem_usage=False``) and before its first call, or between calls; :func:`~ddo_hooks.attach`
    does it by default (the policy's ``pinned_copies.repack``). A component that cannot be repacked
    safely is left exactly as it was, with its reason in the report; the others move a slab at a time,
    each slab's rounded blocks released before the next is pinned.

    Args:
        target: A diffusers pipeline (its model components are repacked) or one torch module.
        components: The pipeline's components to repack (default: every model component).
        release: Release the rounded blocks after each slab's switch-over (through
            :func:`~ddo_hooks.release_pytorch_host_cache`, which refuses beside another
            pipeline's call); ``False`` leaves them cached for the next boundary's release.
        device: The CUDA device whose transfers each release waits for.
        phase: The label the report carries (``attach`` when an attachment repacks).

    Returns:
        The validated report (route ``pinned_copy_repack``).

    Raises:
        InvalidArgumentError: ``target`` is neither a pipeline nor a module, ``components`` names
            something that is not a model component, or ``release``, ``device`` or ``phase`` is malformed.
        HostCacheReleaseError: A release after a repack failed (the repack itself stands).

    Examples:
        >>> import torch
        >>> report = repack_pinned_copies(torch.nn.Linear(4, 4))
        >>> report.repack.status, report.route
        ('noop', 'pinned_copy_repack')
        >>> repack_pinned_copies(torch.nn.Linear(4, 4), phase="Before!")
        Traceback (most recent call last):
        ...
        ddo_hooks.errors.InvalidArgumentError: phase='Before!' must be a label such as 'attach': ...
    """
    started = time.perf_counter()
    if not isinstance(release, bool):
        raise InvalidArgumentError(f"release={release!r} must be True or False")
    if not isinstance(phase, str) or re.fullmatch(PHASE_PATTERN, phase) is None:
        raise InvalidArgumentError(
            f"phase={phase!r} must be a label such as 'attach': a lowercase letter, then up to 63 of a-z 0-9 _ . -"
        )
    parse_cuda_device(device)
    return _repack(_components(target, components), phase, started, release=release, device=device)


def stage_pinned_copies(pipeline: Any, names: Iterable[str], *, phase: str) -> PinnedCopyRepackReport:
    """Pin the unpinned CPU sources of the named components' groups into slabs (nothing is released).

    :func:`~ddo_hooks.release.file_views.rebind_to_files` leaves a component's groups reading views of
    its weights files, pinned at each onload; staging them gives the component exact-size pinned
    copies again, so that its next calls onload as before. The report is a repack's, each
    component's ``pinned_bytes_before`` 0.
    """
    return _repack(_components(pipeline, names), phase, time.perf_counter(), staging=True)


def _repack(
    chosen: list[tuple[str, torch.nn.Module]],
    phase: str,
    started: float,
    *,
    release: bool = False,
    device: DeviceLike = "cuda",
    staging: bool = False,
) -> PinnedCopyRepackReport:
    """Repack (or stage) each chosen component, releasing the rounded blocks after each when ``release``."""
    backend = _allocator.backend()
    unsupported = backend.entry_point(lazy_init_done=False)
    if isinstance(unsupported, str):  # no CUDA host allocator: nothing is pinned
        return _report(phase, [], started, unsupported=unsupported)
    host_before, before = observe_host(), read_snapshot(backend.raw_host_stats)
    results: list[ComponentRepack] = []
    releases: list[HostCacheRelease] = []
    refused: str | None = None

    def moved_slab() -> None:  # the slab's rounded blocks are free now: give them back before the next slab
        nonlocal refused
        if refused is not None:
            return
        try:
            report = release_pytorch_host_cache(enabled=True, phase=phase, device=device, collect="young")
        except BoundaryRefusedError as e:
            refused = f"{e} (the rounded blocks stay cached until the next boundary's release)"
        else:
            releases.append(report.release)

    for name, module in chosen:
        results.append(_repack_one(name, module, staging, moved_slab if release else None))
    return _report(phase, results, started, before=before, host_before=host_before, releases=releases, refused=refused)


def _report(
    phase: str,
    results: list[ComponentRepack],
    started: float,
    *,
    unsupported: str | None = None,
    before: AllocatorSnapshot | None = None,
    host_before: HostObservation | None = None,
    releases: list[HostCacheRelease] | None = None,
    refused: str | None = None,
    step: Literal["repack", "register", "stage"] = "repack",
) -> PinnedCopyRepackReport:
    """The report: executed when a component was repacked (with the readings around it), else a no-op saying why."""
    repacked = [r for r in results if r.status in ("repacked", "registered")]
    noop_reason: Literal["unsupported_build", "nothing_to_repack"] | None = None
    after: AllocatorSnapshot | None
    if repacked:
        names = ", ".join(r.component for r in repacked)
        rounded, slabs = sum(r.pinned_bytes_before for r in repacked), sum(r.pinned_bytes_after for r in repacked)
        detail = f"staged {names} into {slabs:,} bytes of slabs"  # sources that were not pinned
        if all(r.status == "registered" for r in repacked):
            detail = f"registered {names} in place: {slabs:,} bytes of their files' pages pinned, no copy"
        elif rounded:
            detail = f"repacked {names}: {rounded:,} bytes of rounded copies became {slabs:,} bytes of slabs"
        after, host_after = read_snapshot(_allocator.backend().raw_host_stats), observe_host()
    else:
        noop_reason = "unsupported_build" if unsupported else "nothing_to_repack"
        detail = unsupported or "no component had pinned copies to repack"
        before = after = host_before = host_after = None
    return PinnedCopyRepackReport(
        setup=PinnedCopyRepackSetup(
            pinned_copy_repack=PinnedCopyRepack(
                phase=phase,
                step=step,
                status="executed" if repacked else "noop",
                noop_reason=noop_reason,
                detail=detail,
                components=tuple(results),
                tensor_bytes=sum(r.tensor_bytes for r in repacked),
                pinned_bytes_before=sum(r.pinned_bytes_before for r in repacked),
                pinned_bytes_after=sum(r.pinned_bytes_after for r in repacked),
                before=before,
                after=after,
                allocator_bytes_delta=owned_delta(before, after),
                releases=tuple(releases or ()),
                release_refused=refused,
                host_before=host_before,
                host_after=host_after,
                elapsed_seconds=time.perf_counter() - started,
            )
        )
    )
