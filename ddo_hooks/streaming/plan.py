"""What of a component streams through the ring and what stays on the device: its units, and its weights.

The units are the children of the component's largest ``ModuleList``s (Flux's ``transformer_blocks``
and ``single_transformer_blocks``, T5's ``encoder.block``, CLIP's ``encoder.layers``): each list of at
least two children that holds at least :data:`MIN_LIST_SHARE` of the component's bytes, largest first,
none inside a unit of another. Within a unit, each tensor of at least :data:`MIN_STREAMED_BYTES` streams;
the rest (biases, norms), the tensors a unit shares with anything outside it, and everything outside the
units stay on the device. A component with fewer streaming bytes than the policy's ``stream_above`` stays
there whole.

Examples:
    >>> import torch
    >>> blocks = torch.nn.ModuleList([torch.nn.Linear(512, 1024) for _ in range(3)])
    >>> blocks = torch.nn.Sequential(torch.nn.Linear(4, 4), blocks)
    >>> [(unit.name, len(unit.streamed)) for unit in find_units(blocks)]
    [('1.0', 1), ('1.1', 1), ('1.2', 1)]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

__all__ = ["MIN_LIST_SHARE", "MIN_STREAMED_BYTES", "PlannedUnit", "find_units", "nbytes", "tensors_of"]

MIN_STREAMED_BYTES = 1 << 20
"""Tensors under 1 MiB stay on the device: a copy each would cost more issue time than the bytes save."""
MIN_LIST_SHARE = 0.1
"""A ``ModuleList`` whose children stream holds at least this share of the component's bytes."""


def nbytes(tensor: torch.Tensor) -> int:
    """The bytes of a tensor's elements."""
    return tensor.numel() * tensor.element_size()


def tensors_of(module: torch.nn.Module) -> Iterator[torch.Tensor]:
    """Each parameter and buffer of ``module`` and its submodules, once (a tied weight once)."""
    seen: set[int] = set()
    for tensor in (*module.parameters(), *module.buffers()):
        if id(tensor) not in seen:
            seen.add(id(tensor))
            yield tensor


@dataclass
class PlannedUnit:
    """A unit of a component: its module and the tensors of it that stream."""

    name: str
    module: torch.nn.Module
    streamed: list[torch.Tensor] = field(default_factory=list)

    @property
    def streamed_bytes(self) -> int:
        """The bytes it copies in each time it runs."""
        return sum(nbytes(t) for t in self.streamed)


def _lists(component: torch.nn.Module, total: int) -> list[tuple[str, torch.nn.ModuleList]]:
    found = []
    for name, module in component.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) >= 2:
            size = sum(nbytes(t) for t in tensors_of(module))
            if total and size >= MIN_LIST_SHARE * total:
                found.append((size, name, module))
    chosen: list[tuple[str, torch.nn.ModuleList]] = []
    for _, name, module in sorted(found, key=lambda entry: -entry[0]):
        inside = any(name.startswith(f"{other}.") or other.startswith(f"{name}.") for other, _ in chosen)
        if not inside:
            chosen.append((name, module))
    return sorted(chosen, key=lambda pair: pair[0])


def find_units(component: torch.nn.Module, min_bytes: int = MIN_STREAMED_BYTES) -> list[PlannedUnit]:
    """The units of ``component``, in the order their lists appear, each with the tensors of it that stream.

    A tensor streams when it is a dense CPU tensor of at least ``min_bytes`` that belongs to one unit
    alone (a tensor shared with another unit, or with anything outside the units, stays).
    """
    total = sum(nbytes(t) for t in tensors_of(component))
    units = [
        PlannedUnit(f"{prefix}.{index}" if prefix else str(index), child)
        for prefix, modules in _lists(component, total)
        for index, child in enumerate(modules)
    ]
    owners = Counter(id(t) for unit in units for t in tensors_of(unit.module))
    in_units = {id(m) for unit in units for m in unit.module.modules()}
    outside = {  # a tensor of a unit also held by a module outside every unit (a tied weight)
        id(t)
        for module in component.modules()
        if id(module) not in in_units
        for t in (*module.parameters(recurse=False), *module.buffers(recurse=False))
    }
    for unit in units:
        unit.streamed = [
            t
            for t in tensors_of(unit.module)
            if owners[id(t)] == 1
            and id(t) not in outside
            and nbytes(t) >= min_bytes
            and t.device.type == "cpu"
            and t.layout == torch.strided
            and t.is_contiguous()
        ]
    return [unit for unit in units if unit.streamed]
