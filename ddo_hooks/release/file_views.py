"""Pointing a done component's weights back at its weights files where it holds copies of them.

A component's weights stop being views of its safetensors files when it is offloaded with
group offloading's ``low_cpu_mem_usage=False`` (diffusers' default: ``enable_group_offload`` pins
a copy of every weight, and the weights point at the copies) or loaded into memory
(``from_pretrained(..., low_cpu_mem_usage=False)``). Its pages then cannot be dropped.
:func:`rebind_to_files` maps the component's files again (the folder its ``name_or_path`` names),
checks each copy equal, byte for byte, to its tensor there, and only then points the weight and
its group's CPU source at the file's view: the copies are freed (pinned ones into the host cache,
which ``host_cache_release`` gives back). From then on the component is staged for each use, as
with ``low_cpu_mem_usage=True``: diffusers pins a group's unpinned sources at each onload. A
buffer the files do not hold (``position_ids``) gets a plain copy.

The files must stay as they are while the pipeline lives, as with ``low_cpu_mem_usage=True``: the
views read them. A component whose copies differ from its files (a fused LoRA, another dtype) or
whose files cannot be found is left exactly as it was, with the reason (:class:`Unbound`).

Examples:
    >>> import torch
    >>> rebind_to_files("linear", torch.nn.Linear(4, 4))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ddo_hooks.release.file_views.Unbound: linear's weights (80 bytes) are not views of weights files, ...
"""

from __future__ import annotations

import glob
import os
import weakref
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.release import allocator as _allocator
from ddo_hooks.release import file_pages
from ddo_hooks.release.pinned_copies import REPACKED
from ddo_hooks.reports.pages import ComponentPages, PagesReason

if TYPE_CHECKING:
    from ddo_hooks.reports.repack import PinnedCopyRepackReport

__all__ = ["UNPINNED", "Unbound", "give_back", "rebind_to_files", "stage_again"]

UNPINNED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
"""The components whose pinned copies :func:`rebind_to_files` replaced (weakly: a dropped one is not kept);
``stage_done_components`` stages them again."""


class Unbound(Exception):
    """A component left with its copies: the reason (as :data:`PagesReason`) and a sentence."""

    def __init__(self, reason: PagesReason, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass
class _Weight:
    """A parameter or buffer, the CPU tensor that holds it now, and the groups that keep that tensor."""

    name: str
    tensor: torch.Tensor
    parameter: bool
    holder: torch.Tensor
    groups: list[Any] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return self.holder.numel() * self.holder.element_size()


def _weights(name: str, module: torch.nn.Module) -> list[_Weight]:
    """Each weight of ``module`` once, with where it lives on the CPU at rest."""
    keeping: dict[int, list[Any]] = {}
    for group in diffusers_compat.offload_groups(module):
        for key in diffusers_compat.group_cpu_sources(group):
            keeping.setdefault(id(key), []).append(group)
    named = [(n, t, True) for n, t in module.named_parameters()] + [(n, t, False) for n, t in module.named_buffers()]
    found = []
    for qualified, tensor, parameter in named:
        groups = keeping.get(id(tensor), [])
        holder = diffusers_compat.group_cpu_sources(groups[0])[tensor] if groups else tensor.data
        if holder.device.type != "cpu" or holder.layout is not torch.strided or type(holder) is not torch.Tensor:
            what = f"{holder.layout} {type(holder).__name__} on {holder.device}"
            raise Unbound("not_file_backed", f"{name}'s {qualified} is held as a {what}, not as a CPU copy")
        found.append(_Weight(qualified, tensor, parameter, holder, groups))
    return found


def _folder(module: torch.nn.Module) -> str | None:
    """The folder ``from_pretrained`` loaded ``module`` from (transformers' ``name_or_path``, diffusers' config)."""
    config = getattr(module, "config", None)
    path = getattr(module, "name_or_path", None) or getattr(config, "_name_or_path", None)
    return path if isinstance(path, str) and os.path.isdir(path) else None


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _views(name: str, module: torch.nn.Module, copies: list[_Weight]) -> dict[str, torch.Tensor]:
    """For each copy the files hold, the file's view equal to it byte for byte; raises :class:`Unbound`."""
    total = sum(w.nbytes for w in copies)
    folder = _folder(module)
    paths = [] if folder is None else sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors")))
    if not paths:
        where = "no folder" if folder is None else f"no *.safetensors file in {folder}"
        detail = f"{name}'s weights ({total} bytes) are not views of weights files, and its name_or_path names {where}"
        raise Unbound("not_file_backed", detail + " (built in memory, or loaded from elsewhere)")
    import safetensors.torch

    files = [safetensors.torch.load_file(path) for path in paths]  # views of private mappings: nothing read yet
    views = {}
    for weight in copies:
        held = weight.holder
        candidates = [f[weight.name] for f in files if weight.name in f]
        candidates = [c for c in candidates if c.dtype == held.dtype and c.shape == held.shape]
        if not candidates:
            if not weight.parameter:
                continue  # a buffer the files do not hold: it gets a plain copy
            detail = f"{name}'s {weight.name} ({held.dtype}, {tuple(held.shape)}) is not in its files in {folder}"
            raise Unbound("not_file_backed", detail + " as such (converted to another dtype when loaded, or renamed)")
        equal = next((c for c in candidates if _same_bytes(c, held)), None)
        if equal is None:
            detail = f"{name}'s copy of {weight.name} differs from its weights file in {folder} (a fused LoRA or an "
            raise Unbound("modified", detail + "edit): it keeps its copies")
        views[weight.name] = equal
    return views


def rebind_to_files(name: str, module: torch.nn.Module) -> int:
    """Point ``module``'s weights held as copies at the views of its weights files that equal them.

    Nothing changes until every copy was checked; the switch cannot fail halfway.

    Args:
        name: The component's name, for the reasons.
        module: The component, at rest (between calls, or once its work in a call is done).

    Returns:
        The bytes of copies replaced (0 when its parameters are file views already).

    Raises:
        Unbound: It stays as it was: a weight is not a CPU tensor, its files cannot be found, a
            parameter is not in them with its dtype and shape (``not_file_backed``), or its copy
            differs from the file (``modified``).
    """
    inside = file_pages.in_file_view(file_pages.mappings())
    weights = _weights(name, module)
    copies = [w for w in weights if not inside(w.holder.data_ptr(), max(w.nbytes, 1))]
    if not any(w.parameter for w in copies):
        return 0  # its parameters are file views; a buffer the files do not hold stays as it is
    views = _views(name, module, copies)
    if any(_allocator.backend().is_pinned(w.holder) for w in copies):
        UNPINNED.add(module)
    replaced: dict[int, int] = {}
    for weight in copies:
        held = weight.holder
        replaced[held.untyped_storage().data_ptr()] = held.untyped_storage().nbytes()
        target = views.get(weight.name)
        target = held.clone(memory_format=torch.contiguous_format) if target is None else target
        for group in weight.groups:
            diffusers_compat.set_group_cpu_source(group, weight.tensor, target)
            REPACKED.discard(group)
        if weight.tensor.data_ptr() == held.data_ptr():
            weight.tensor.data = target
    return sum(replaced.values())


def give_back(name: str, module: torch.nn.Module, unbound: MutableMapping[torch.nn.Module, Unbound]) -> ComponentPages:
    """Rebind ``module`` to its files where it holds copies, then give back its clean file pages.

    ``unbound`` remembers the components left with their copies (weakly), so that their copies are
    compared with their files once, not at every call.
    """
    replaced, refusal = 0, unbound.get(module)
    if refusal is None:
        try:
            replaced = rebind_to_files(name, module)
        except Unbound as e:  # kept without its traceback, whose frames hold the module and its files' views
            unbound[module] = refusal = Unbound(e.reason, e.detail)
    pages = file_pages.give_back_file_pages(name, module, replaced_bytes=replaced)
    if refusal is not None and pages.reason == "not_file_backed":
        return pages.model_copy(update={"reason": refusal.reason, "detail": refusal.detail})
    return pages


def stage_again(pipeline: Any, *, phase: str) -> PinnedCopyRepackReport | None:
    """Pin again, into slabs, the copies :func:`rebind_to_files` replaced in ``pipeline``'s components.

    Returns:
        The report of the staging (route ``pinned_copy_repack``), or ``None`` when none of the
        pipeline's components is in :data:`UNPINNED`.
    """
    held = pipeline.components
    names = [name for name, module in held.items() if module in UNPINNED]  # not weakly referable: not in it
    if not names:
        return None
    from ddo_hooks.release.repack import stage_pinned_copies

    report = stage_pinned_copies(pipeline, names, phase=phase)
    for result in report.repack.components:
        if result.status == "repacked":
            UNPINNED.discard(held[result.component])
    return report
