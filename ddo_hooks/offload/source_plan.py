"""What auxiliary CPU source detachment copies: the registered tensors it selects, and those it skips and why.

:func:`plan` groups the components' registered tensors into exact aliases (:func:`exact_groups`, refusing a
partial alias), refuses one that cannot be detached (:func:`unsupported`) or that overlaps a source the runtime
retains, and skips the runtime's own sources, pinned tensors and those that own their storage
(:func:`owns_storage`). :func:`~ddo_hooks.offload.source_detachment.detach_auxiliary_cpu_sources` copies what it
selects.

Examples:
    >>> import torch
    >>> flat = torch.arange(8.0)
    >>> module = torch.nn.Linear(2, 2)
    >>> module.weight.data, module.bias.data = flat[:4].view(2, 2), flat[4:6]
    >>> found = plan([("linear", module)], [])
    >>> found.selected_tensors, found.selected_bytes
    (2, 24)
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ddo_hooks._compat import torch as torch_compat
from ddo_hooks.offload.runtimes import PayloadInterval
from ddo_hooks.release import allocator as _allocator
from ddo_hooks.reports.auxiliary_sources import DetachRefusalReason

__all__ = [
    "NOTHING_CHANGED",
    "Entry",
    "Group",
    "Plan",
    "Refusal",
    "exact_groups",
    "owns_storage",
    "pinning_possible",
    "plan",
    "registered",
    "unsupported",
]

NOTHING_CHANGED = "nothing was copied or changed"
"""What a refusal's sentence ends with."""


class Refusal(Exception):
    """A refusal: its reason, a sentence (saying that nothing changed) and the tensors it names."""

    def __init__(self, reason: DetachRefusalReason, detail: str, offending: Sequence[str] = ()) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.offending = reason, f"{detail}; {NOTHING_CHANGED}", tuple(offending)


@dataclass
class Entry:
    """One registered tensor object and every name it is registered under."""

    tensor: torch.Tensor
    names: list[str]


@dataclass
class Group:
    """Registered tensors that are exactly the same view (one storage after the copy)."""

    span: PayloadInterval
    entries: list[Entry] = field(default_factory=list)


@dataclass
class Plan:
    """The groups to copy, and the tensors and bytes skipped, by reason."""

    selected: list[Group] = field(default_factory=list)
    skipped_tensors: dict[str, int] = field(default_factory=dict)
    skipped_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def selected_tensors(self) -> int:
        """How many registered tensors are selected."""
        return sum(len(g.entries) for g in self.selected)

    @property
    def selected_bytes(self) -> int:
        """The bytes of the selected groups."""
        return sum(g.span.nbytes for g in self.selected)

    def counts(self) -> dict[str, Any]:
        """What a report says of the plan: the tensors and bytes it selected, and those it skipped by reason."""
        return {
            "selected_tensors": self.selected_tensors,
            "selected_bytes": self.selected_bytes,
            "skipped_tensors": self.skipped_tensors,
            "skipped_bytes": self.skipped_bytes,
        }


def unsupported(tensor: torch.Tensor) -> str | None:
    """Why ``tensor`` cannot be detached, or ``None``."""
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        return f"a tensor subclass ({type(tensor).__module__}.{type(tensor).__qualname__})"
    if tensor.is_quantized:
        return f"a quantized tensor ({tensor.dtype})"
    if tensor.layout != torch.strided or tensor.is_nested:
        return f"not dense (layout {tensor.layout})"
    if tensor.device.type != "cpu":
        return f"on {tensor.device}, not the CPU"
    if tensor.is_conj() or tensor.is_neg():
        return "a lazily conjugated or negated view"
    if torch_compat.tensor_base(tensor) is not None:
        if isinstance(tensor, torch.nn.Parameter) or tensor.requires_grad:
            return "an autograd view that requires grad"
        if weakref.getweakrefs(tensor) or torch_compat.tensor_use_count(tensor) > 1:
            return "an autograd view with weak references or other owners, which cannot be rebound in place"
    return None


def registered(components: Sequence[tuple[str, torch.nn.Module]]) -> list[Entry]:
    """Each registered tensor object of the components once, with every name it is registered under."""
    entries: dict[int, Entry] = {}
    for component, module in components:
        for qualified, tensor in (
            *module.named_parameters(remove_duplicate=False),
            *module.named_buffers(remove_duplicate=False),
        ):
            name = f"{component}.{qualified}"
            if id(tensor) in entries:
                entries[id(tensor)].names.append(name)
            else:
                entries[id(tensor)] = Entry(tensor, [name])
    return list(entries.values())


def exact_groups(entries: list[Entry]) -> list[Group]:
    """Group exact aliases; refuse two tensors that overlap without being the same view."""
    groups: dict[tuple[Any, ...], Group] = {}
    for entry in entries:
        t, span = entry.tensor, PayloadInterval.of_tensor(entry.tensor)
        groups.setdefault((span, t.dtype, tuple(t.shape), t.stride()), Group(span)).entries.append(entry)
    active: list[Group] = []
    for group in sorted((g for g in groups.values() if g.span.nbytes), key=lambda g: (g.span.start, g.span.end)):
        active = [a for a in active if a.span.end > group.span.start]
        if active:
            pair = [active[0].entries[0].names[0], group.entries[0].names[0]]
            raise Refusal("partial_alias", f"{pair[0]} and {pair[1]} overlap without being the same view", pair)
        active.append(group)
    return list(groups.values())


def pinning_possible() -> bool:
    """Whether any tensor can be CUDA-pinned, asked without creating a CUDA context."""
    if torch.version.cuda is None and torch.version.hip is None:
        return False
    probe = _allocator.backend()
    return any(probe.has_primary_context(i) for i in range(probe.device_count()))


def owns_storage(group: Group) -> bool:
    """Whether the group alone covers an ordinary resizable PyTorch allocation (nothing to free by copying it)."""
    tensor = group.entries[0].tensor
    storage = tensor.untyped_storage()
    return (
        all(torch_compat.tensor_base(e.tensor) is None for e in group.entries)
        and storage.resizable()
        and group.span.start == storage.data_ptr()
        and group.span.nbytes == storage.nbytes()
    )


def plan(components: Sequence[tuple[str, torch.nn.Module]], retained: list[PayloadInterval]) -> Plan:
    """What to copy of the components (named), and what is skipped and why, beside the ``retained`` intervals.

    Raises:
        Refusal: A tensor that cannot be detached, a partial alias, or a view that overlaps a retained interval.
    """
    entries = registered(components)
    bad = [(e, why) for e in entries if (why := unsupported(e.tensor)) is not None]
    if bad:
        names = [e.names[0] for e, _ in bad]
        raise Refusal("unsupported_tensor", f"{names[0]} is {bad[0][1]}; only plain dense CPU tensors detach", names)
    groups = exact_groups(entries)
    exact = set(retained)
    pinning = pinning_possible()
    plan, overlapping = Plan(), []
    for group in groups:
        skip = None
        if group.span.nbytes and group.span in exact:
            skip = "runtime_source"
        elif any(group.span.overlaps(r) for r in retained):
            overlapping.append(group.entries[0].names[0])
            continue
        elif pinning and group.entries[0].tensor.is_pinned():
            skip = "pinned"
        elif owns_storage(group):
            skip = "owns_storage"
        if skip is None:
            plan.selected.append(group)
        else:
            plan.skipped_tensors[skip] = plan.skipped_tensors.get(skip, 0) + len(group.entries)
            plan.skipped_bytes[skip] = plan.skipped_bytes.get(skip, 0) + group.span.nbytes
    if overlapping:
        detail = f"{overlapping[0]} overlaps a CPU payload interval its runtime retains as a source"
        raise Refusal("overlaps_retained_interval", detail, overlapping)
    return plan
