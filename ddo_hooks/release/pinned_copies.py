"""What a component's pinned copies are, and whether a repack may move them (:mod:`ddo_hooks.release.repack`).

:func:`inspect_component` finds every copy of every group-offloading group of a module and checks
it; what cannot be moved safely raises :class:`Left` with the reason and a sentence, and nothing
has changed. Copies are grouped by storage (:class:`Stored`): a weight tied across groups has one
copy in each, which diffusers pins once.

Examples:
    >>> import torch
    >>> inspect_component("linear", torch.nn.Linear(2, 2))
    Traceback (most recent call last):
    ...
    ddo_hooks.release.pinned_copies.Left: linear has no group offloading hooks
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from ddo_hooks import _moved
from ddo_hooks._compat import torch as torch_compat
from ddo_hooks.ledger import LEDGER
from ddo_hooks.release import allocator as _allocator
from ddo_hooks.reports.repack import RepackReason

__all__ = ["Component", "Copy", "Left", "Stored", "by_storage", "inspect_component", "refuse", "skip"]


@dataclass
class Copy:
    """One pinned copy: its group, the parameter or buffer it is the copy of, and the tensor."""

    group: Any
    key: torch.Tensor
    tensor: torch.Tensor

    @property
    def nbytes(self) -> int:
        """The tensor's bytes."""
        return self.tensor.numel() * self.tensor.element_size()


@dataclass
class Stored:
    """One pinned storage, the copies that are it and the weights offloaded onto it.

    A weight tied across groups (T5's shared embedding, at leaf level) has a copy in each group, and
    diffusers pins it once: ``pin_memory()`` of a pinned tensor is the same storage.
    """

    tensor: torch.Tensor
    copies: list[Copy] = field(default_factory=list)
    weights: list[torch.Tensor] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """The tensor's bytes."""
        return self.tensor.numel() * self.tensor.element_size()

    def point(self, target: torch.Tensor) -> None:
        """Point its copies (their groups' CPU sources) and its offloaded weights at ``target``, and hold it.

        Nothing here keeps the old storage alive.
        """
        from ddo_hooks._compat import diffusers as diffusers_compat

        for copy in self.copies:
            diffusers_compat.set_group_cpu_source(copy.group, copy.key, target)
            copy.tensor = target
        for weight in self.weights:
            weight.data = target
        self.tensor = target


def by_storage(copies: list[Copy]) -> dict[int, Stored]:
    """The copies by storage (its address), in order."""
    found: dict[int, Stored] = {}
    for copy in copies:
        found.setdefault(copy.tensor.data_ptr(), Stored(copy.tensor)).copies.append(copy)
    return found


@dataclass
class Component:
    """A component whose copies passed every check: what the repack needs to switch it over."""

    name: str
    groups: list[Any]
    stored: list[Stored]


class Left(Exception):
    """A component is left as it was: skipped or refused, with the reason, a sentence and what was found."""

    def __init__(self, status: Literal["skipped", "refused"], reason: RepackReason, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail
        self.groups: list[Any] = []
        self.copies: list[Copy] = []

    def found(self, groups: list[Any], copies: list[Copy]) -> Left:
        """Say what was found before the component was left (the report counts it)."""
        self.groups, self.copies = groups, copies
        return self


def skip(reason: RepackReason, detail: str) -> Left:
    """A component with nothing to win: it stays as it was."""
    return Left("skipped", reason, detail)


def refuse(reason: RepackReason, detail: str) -> Left:
    """A component that is not safe to move: it stays as it was."""
    return Left("refused", reason, detail)


def _tensor_problem(tensor: Any, staging: bool) -> str | None:
    """Why a copy cannot move into a slab as plain bytes, or ``None`` (a source to stage may be a view of a file)."""
    if type(tensor) is not torch.Tensor:
        return f"is a {type(tensor).__qualname__} (a tensor subclass, such as torchao's)"
    if tensor.layout is not torch.strided or tensor.is_quantized or tensor.device.type != "cpu":
        return f"is a {tensor.layout} {tensor.dtype} tensor on {tensor.device}"
    if not tensor.is_contiguous() or (tensor.storage_offset() != 0 and not staging):
        return "is not a contiguous tensor at the start of its storage"
    if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size() and not staging:
        return "shares a larger storage"
    return None


def inspect_component(name: str, module: torch.nn.Module, *, staging: bool = False) -> Component:
    """Check every copy of ``module``'s groups; raise :class:`Left` when it is not to be repacked.

    ``staging``: its sources are not pinned (views of its weights files) and are to be pinned into
    slabs; they may share one storage, which stays as long as anything else holds it.
    """
    from ddo_hooks._compat import diffusers as diffusers_compat

    groups = diffusers_compat.offload_groups(module)
    if not groups:
        raise skip("not_group_offloaded", f"{name} has no group offloading hooks")
    copies = [
        Copy(group, key, tensor)
        for group in groups
        for key, tensor in diffusers_compat.group_cpu_sources(group).items()
        if isinstance(tensor, torch.Tensor) and tensor.numel() > 0
    ]
    try:
        return _check(name, groups, copies, staging)
    except Left as left:
        raise left.found(groups, copies) from None


def _check(name: str, groups: list[Any], copies: list[Copy], staging: bool) -> Component:
    from ddo_hooks._compat import diffusers as diffusers_compat

    if any(diffusers_compat.group_disk_path(group) is not None for group in groups):
        raise refuse(
            "disk_offload", f"{name} is offloaded to disk (offload_to_disk_path): it keeps no copies in memory"
        )
    if all(LEDGER.read(group).repacked for group in groups):
        raise skip("already_packed", f"{name}'s pinned copies are in slabs already")
    if not copies:
        raise skip(
            "no_pinned_copies", f"{name}'s groups keep no CPU copies: without use_stream=True, nothing is pinned"
        )
    for copy in copies:
        if (problem := _tensor_problem(copy.tensor, staging)) is not None:
            raise refuse("unsupported_tensor", f"a pinned copy in {name} {problem}; it is left as it was")
    if not staging and not all(_allocator.backend().is_pinned(copy.tensor) for copy in copies):
        detail = (
            f"{name}'s CPU copies are not pinned: with low_cpu_mem_usage=True diffusers pins them at each onload, "
            "from a cache the boundaries' releases give back"
        )
        raise skip("not_pinned", detail)
    stored = by_storage(copies)
    entry: Stored | None
    for entry in stored.values():
        layouts = {(c.tensor.dtype, c.tensor.shape, c.tensor.stride()) for c in entry.copies}
        if len(layouts) > 1:
            raise refuse("shared_storage", f"pinned copies in {name} share one storage as different tensors")
    for weight in {id(copy.key): copy.key for copy in copies}.values():
        entry = stored.get(weight.data_ptr())
        if entry is None:
            where = f"a weight of {name} is not on its pinned copy (it is on {weight.device}): a call is in progress"
            raise refuse("onloaded", f"{where}; repack before the first call, or between calls")
        entry.weights.append(weight)
    for entry in stored.values() if not staging else ():
        own = len({id(c.tensor) for c in entry.copies}) + len(entry.weights)
        others = torch_compat.storage_use_count(entry.tensor) - own
        if others > 0:
            raise refuse(
                "shared_storage",
                f"{others} other tensor(s) hold the storage of a pinned copy in {name} (another component, or a "
                "reference the caller keeps): a repack could not free it",
            )
    return Component(name, groups, list(stored.values()))


def __getattr__(name: str) -> Any:
    return _moved.old_attribute(__name__, name)
