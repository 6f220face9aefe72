"""Bounded auxiliary CPU source detachment: copy small residual loader views into storage of their own.

After a component is loaded and its offload runtime has applied itself, registered CPU tensors
that the runtime does not keep as its own sources (buffers, norms, embeddings outside its
groups, tied or stray parameters) can still be views into a large loader storage: a
``torch.load(..., mmap=True)`` file, a safetensors mapping, a flat state-dict buffer. One small
view keeps the whole storage alive. :func:`detach_auxiliary_cpu_sources` copies those views,
once, before the first forward, so the loader storage can be freed. It is a separate diagnostic
opt-in, not a host-cache flush, and it never changes GPU residency budgets or computation.

It refuses (a report; nothing is changed) unless every component is attached to its runtime
and no forward ran under it; when the runtime keeps native CPU sources, its adapter reports
every retained payload interval, as many as its native binding count (an older adapter without
that observation supports only the zero-CPU-source case); every registered tensor is a plain
dense CPU tensor and no two overlap without being the same view (a partial alias); no selected
view overlaps a retained interval; and the selected views total at most ``max_copy_bytes``.

What it selects: every registered CPU tensor except those that are exactly a retained runtime
source, those in pinned memory, and those that alone cover an ordinary resizable PyTorch
allocation. Loader storages (mmap and safetensors slices, ``torch.load`` records, flat buffers)
are never taken as owned; copying a tensor that in fact owned its memory is harmless and bounded
by the ceiling. Whole-component ownership is out of scope.

What it preserves: the registered ``Parameter`` and buffer objects themselves (``is`` identity,
so optimizers and hooks holding them stay valid; ``param.data`` is rebound, an autograd-view
buffer has its implementation swapped in place), exact aliases (tied weights end as one new
storage), bitwise values, device, dtype, ``requires_grad`` and strides.

Exclusive component ownership is required: a view into the loader storage held anywhere else
(an escaped reference) cannot be discovered and keeps that storage alive. The report records the
copied bytes and host observations; it does not prove that the OS got memory back.

Examples:
    >>> from ddo_hooks.offload.runtimes import get_offload_runtime
    >>> flat = torch.arange(64, dtype=torch.float32)       # a loader's flat buffer
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    >>> model[0].weight.data, model[0].bias.data = flat[:16].view(4, 4), flat[16:20]
    >>> runtime = get_offload_runtime("diffusers_group_offload")
    >>> runtime.apply(model, torch.device("cpu"), {"offload_type": "leaf_level"})
    >>> component = OffloadedComponent("model", model, runtime.name, runtime.adapter(model))
    >>> detach = detach_auxiliary_cpu_sources([component]).detach
    >>> detach.status, detach.copied_tensors, detach.copied_bytes
    ('executed', 2, 80)
    >>> model[0].weight.untyped_storage().data_ptr() != flat.untyped_storage().data_ptr()
    True
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ddo_hooks._compat import torch as torch_compat
from ddo_hooks.errors import InvalidArgumentError
from ddo_hooks.offload import source_plan
from ddo_hooks.offload.runtimes import IntervalObservingAdapter, PayloadInterval, SourceObservationAdapter
from ddo_hooks.offload.source_plan import Plan, Refusal
from ddo_hooks.release import guard
from ddo_hooks.release.host_memory import observe_host
from ddo_hooks.reports.auxiliary_sources import (
    AuxiliarySourceDetachReport,
    AuxiliarySourceDetachSetup,
    ComponentSourceObservation,
    DetachRefusalReason,
)
from ddo_hooks.sizes import format_size

__all__ = ["DEFAULT_MAX_COPY_BYTES", "OffloadedComponent", "detach_auxiliary_cpu_sources"]

DEFAULT_MAX_COPY_BYTES = 16 * 2**20
"""The default copy ceiling: 16 MiB."""


@dataclass(frozen=True)
class OffloadedComponent:
    """A pipeline component under an offload runtime, with that runtime's adapter.

    Attributes:
        name: The pipeline component's name, e.g. ``transformer``.
        module: The component.
        runtime: The registered runtime's name.
        adapter: The runtime's source-observation adapter for this component.
    """

    name: str
    module: torch.nn.Module
    runtime: str
    adapter: SourceObservationAdapter


def _check_arguments(components: object, enabled: object, max_copy_bytes: object) -> None:
    if not isinstance(enabled, bool):
        raise InvalidArgumentError(f"enabled={enabled!r} must be True or False")
    if isinstance(max_copy_bytes, bool) or not isinstance(max_copy_bytes, int) or max_copy_bytes < 0:
        raise InvalidArgumentError(f"max_copy_bytes={max_copy_bytes!r} must be an int >= 0 (bytes; default 16 MiB)")
    if not isinstance(components, Sequence) or not all(isinstance(c, OffloadedComponent) for c in components):
        raise InvalidArgumentError(f"components={components!r} must be a sequence of OffloadedComponent")


def _observe(component: OffloadedComponent, observations: list[ComponentSourceObservation]) -> list[PayloadInterval]:
    """Ask the adapter, record what it said, and return its retained intervals (refusing as the rules say)."""
    adapter, name, runtime = component.adapter, component.name, component.runtime
    kind = type(adapter)
    seen: dict[str, Any] = {"component": name, "runtime": runtime, "adapter": f"{kind.__module__}.{kind.__qualname__}"}

    def refuse(reason: DetachRefusalReason, detail: str) -> Refusal:
        return Refusal(reason, detail, [name])

    def ask(key: str, value: Any, valid: bool) -> Any:
        if not valid:
            raise refuse("observation_invalid", f"the adapter of {name!r} returned {value!r} for {key}")
        seen[key] = value
        return value

    try:
        attached = adapter.is_attached()
        if not ask("attached", attached, isinstance(attached, bool)):
            raise refuse("runtime_not_attached", f"{name!r} is not attached to its offload runtime {runtime!r}")
        started = adapter.execution_started()
        if ask("execution_started", started, isinstance(started, bool)):
            raise refuse("execution_started", f"a forward already ran under {runtime!r} on {name!r}")
        count = adapter.native_binding_count()
        ask("native_binding_count", count, type(count) is int and count >= 0)
        sources = f"the runtime of {name!r} keeps {count} native CPU source(s)"
        if not isinstance(adapter, IntervalObservingAdapter):
            seen["interval_observation"] = "unsupported"
            if count:
                raise refuse(
                    "interval_observation_unsupported",
                    f"{sources} and its adapter has no retained_cpu_intervals(); such an older adapter supports"
                    " only the zero-CPU-source case",
                )
            return []
        intervals = adapter.retained_cpu_intervals()
        if intervals is None:
            seen["interval_observation"] = "unavailable"
            if count:
                raise refuse("intervals_unavailable", f"{sources} and reports their intervals as unavailable")
            return []
        if not isinstance(intervals, Sequence) or not all(isinstance(i, PayloadInterval) for i in intervals):
            raise refuse("observation_invalid", f"the adapter of {name!r} returned {intervals!r} as its intervals")
        seen.update(
            interval_observation="reported",
            retained_intervals=len(intervals),
            retained_bytes=sum(i.nbytes for i in intervals),
        )
        if len(intervals) != count:
            raise refuse("interval_count_mismatch", f"{sources} but reports {len(intervals)} retained interval(s)")
        return list(intervals)
    finally:
        if "attached" in seen:
            observations.append(ComponentSourceObservation(**seen))


def _copy(plan: Plan) -> None:
    """Copy every selected group into one new storage, then rebind the registered objects to it."""
    storages = []
    for group in plan.selected:  # allocate and copy everything before rebinding anything
        source = group.entries[0].tensor
        raw = torch.empty(group.span.nbytes, dtype=torch.uint8)
        if group.span.nbytes:
            offset = group.span.start - source.untyped_storage().data_ptr()
            raw.copy_(torch.empty(0, dtype=torch.uint8).set_(source.untyped_storage(), offset, (group.span.nbytes,)))  # type: ignore[call-overload]  # torch's stubs have no set_ overload taking an untyped storage
        storages.append(raw.untyped_storage())
    for group, storage in zip(plan.selected, storages, strict=True):
        for entry in group.entries:
            tensor = entry.tensor
            fresh = torch.empty(0, dtype=tensor.dtype).set_(storage, 0, tensor.shape, tensor.stride())
            if torch_compat.tensor_base(tensor) is None:
                tensor.data = fresh
            else:  # an autograd view keeps its base alive through .data: swap the implementation instead
                own = tensor.__dict__
                torch.utils.swap_tensors(tensor, fresh)
                tensor.__dict__ = own
            del fresh


def _report(**fields: Any) -> AuxiliarySourceDetachReport:
    return AuxiliarySourceDetachReport(setup=AuxiliarySourceDetachSetup(auxiliary_cpu_source_detach=fields))  # type: ignore[arg-type]  # the fields are the report section's own, by name


def detach_auxiliary_cpu_sources(
    components: Sequence[OffloadedComponent],
    *,
    enabled: bool = True,
    max_copy_bytes: int = DEFAULT_MAX_COPY_BYTES,
) -> AuxiliarySourceDetachReport:
    """Copy the selected residual CPU views of ``components`` into storage of their own, or refuse.

    Prefer :meth:`OffloadRuntimeApplication.detach_auxiliary_cpu_sources
    <ddo_hooks.offload.apply.OffloadRuntimeApplication.detach_auxiliary_cpu_sources>`, which passes the
    components it applied. Call it before the first forward, with exclusive ownership of the
    components; not concurrently with loading or inference.

    Args:
        components: The offloaded components and their runtimes' adapters.
        enabled: ``False`` returns an explicit no-op report and touches nothing.
        max_copy_bytes: The ceiling for the selected views' total size, in bytes.

    Returns:
        A validated report (route ``auxiliary_cpu_source_detach``): ``executed``, ``noop`` or
        ``refused`` with a reason code and a sentence (a refusal changes nothing).

    Raises:
        InvalidArgumentError: A malformed argument (the message names it).
    """
    _check_arguments(components, enabled, max_copy_bytes)
    start = time.perf_counter()
    common: dict[str, Any] = {"max_copy_bytes": max_copy_bytes}
    if not enabled:
        detail = "disabled (enabled=False): nothing was inspected or copied"
        return _report(status="noop", noop_reason="disabled", detail=detail, elapsed_seconds=0.0, **common)
    observations: list[ComponentSourceObservation] = []
    found: Plan | None = None
    try:
        retained = [interval for component in components for interval in _observe(component, observations)]
        found = source_plan.plan([(c.name, c.module) for c in components], retained)
        if found.selected_bytes > max_copy_bytes:
            raise Refusal(
                "exceeds_ceiling",
                f"the selected views total {format_size(found.selected_bytes)} ({found.selected_bytes} bytes), more"
                f" than max_copy_bytes={max_copy_bytes}; raise the ceiling if copying them is intended",
            )
    except Refusal as refusal:
        if found is not None:
            common.update(found.counts())
        return _report(
            status="refused",
            refusal_reason=refusal.reason,
            detail=refusal.detail,
            offending=refusal.offending,
            components=tuple(observations),
            elapsed_seconds=time.perf_counter() - start,
            **common,
        )
    counts = found.counts()
    alias_groups = sum(len(g.entries) > 1 for g in found.selected)
    host_before = observe_host()
    with torch.no_grad(), guard.section("loading", "detach_auxiliary_cpu_sources"):
        _copy(found)
    del found  # the old views die here unless somebody else holds them
    host_after = observe_host()
    copied_tensors, copied_bytes = counts["selected_tensors"], counts["selected_bytes"]
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(counts["skipped_tensors"].items())) or "none"
    detail = (
        f"copied {copied_tensors} tensor(s), {format_size(copied_bytes)}, into storage of their own"
        f" (skipped: {skipped}); a loader storage is freed only when nobody else holds a view into it"
    )
    return _report(
        status="executed",
        detail=detail,
        copied_tensors=copied_tensors,
        copied_bytes=copied_bytes,
        alias_groups=alias_groups,
        components=tuple(observations),
        elapsed_seconds=time.perf_counter() - start,
        host_before=host_before,
        host_after=host_after,
        **counts,
        **common,
    )
