"""A component's weights held as copies, and the views of its weights files equal to them byte for byte.

:mod:`~ddo_hooks.release.file_views` points such copies back at their files: :func:`copies` finds the weights held
as copies (not inside a private mapping of a regular file), :func:`weights_files` the files the component was
loaded from, :func:`load` maps one of them (held open: the inode its views map), :func:`equal_views` matches each
copy with its file's view, and :func:`point` switches a weight (and its groups' CPU sources) over. A component that
cannot be so is left as it was, with the reason (:class:`Unbound`).

Examples:
    >>> import torch
    >>> [weight.name for weight in copies("linear", torch.nn.Linear(4, 4))]
    ['weight', 'bias']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import torch

from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.ledger import LEDGER
from ddo_hooks.release import file_pages
from ddo_hooks.release.weights_files import FileIdentity, HeldFile, Refused, folder_of, identity, named_files
from ddo_hooks.reports.done_components import PagesReason

__all__ = ["Unbound", "Weight", "copies", "equal_views", "load", "point", "same_bytes", "weights", "weights_files"]


class Unbound(Exception):
    """A component left with its copies: the reason (as :data:`PagesReason`) and a sentence."""

    def __init__(self, reason: PagesReason, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass
class Weight:
    """A parameter or buffer, the CPU tensor that holds it now, and the groups that keep that tensor."""

    name: str
    tensor: torch.Tensor
    parameter: bool
    holder: torch.Tensor
    groups: list[Any] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """The bytes of what holds it."""
        return self.holder.numel() * self.holder.element_size()


def weights(name: str, module: torch.nn.Module) -> list[Weight]:
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
        found.append(Weight(qualified, tensor, parameter, holder, groups))
    return found


def weights_files(name: str, module: torch.nn.Module, total: int) -> tuple[str, list[str]]:
    """The folder ``module`` was loaded from and the files its weights come from; raises :class:`Unbound` without.

    See :func:`~ddo_hooks.release.weights_files.named_files`: an index that is not a regular file of at
    most :data:`~ddo_hooks.release.weights_files.MAX_INDEX_BYTES` refuses the component, naming it and why.
    """
    folder = folder_of(module)
    try:
        paths = [] if folder is None else named_files(folder)
    except Refused as e:
        raise Unbound("not_file_backed", f"{name}'s index {e}") from None
    if not paths or folder is None:
        where = "no folder" if folder is None else f"no *.safetensors file in {folder}"
        detail = f"{name}'s weights ({total} bytes) are not views of weights files, and its name_or_path names {where}"
        raise Unbound("not_file_backed", detail + " (built in memory, or loaded from elsewhere)")
    return folder, paths


def load(path: str) -> tuple[dict[str, torch.Tensor], HeldFile]:
    """A weights file's tensors, as views of a private mapping, and the file held open (the inode they map).

    Raises:
        Unbound: The file is not a regular file or cannot be read as safetensors (``not_file_backed``);
            it was replaced while it was read (``modified``), or no longer holds every tensor's bytes
            (``file_changed``: a view past its end would kill the process when read).
    """
    import safetensors.torch

    try:
        held = HeldFile(path)
    except Refused as e:
        raise Unbound("not_file_backed", str(e)) from None
    try:
        tensors = safetensors.torch.load_file(path)
    except Exception as e:  # SafetensorError, OSError: a cut download, a file being written
        held.close()
        raise Unbound("not_file_backed", f"{path} cannot be read as a safetensors file ({e})".splitlines()[0]) from None
    try:
        held.check_views(tensors)
    except Refused as e:
        held.close()
        raise Unbound(cast("PagesReason", e.reason), str(e)) from None
    return tensors, held


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold the same bytes."""
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def equal_views(
    name: str,
    folder: str,
    files: dict[str, dict[str, torch.Tensor]],
    copies: list[Weight],
    noted: dict[str, FileIdentity | None],
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """For each copy the files hold, the file's view equal to it byte for byte, and the files read.

    ``files``: each file's tensors (:func:`load`). ``noted``: the files' identities at attach, which
    tell a file changed since from a copy edited.

    Raises:
        Unbound: A parameter is not in the files as such, or its copy differs (from a file rewritten or
            replaced since attach: ``file_changed``).
    """
    views, read = {}, set()
    for weight in copies:
        held = weight.holder
        candidates = [(path, f[weight.name]) for path, f in files.items() if weight.name in f]
        candidates = [(p, c) for p, c in candidates if c.dtype == held.dtype and c.shape == held.shape]
        if not candidates:
            if not weight.parameter:
                continue  # a buffer the files do not hold: it gets a plain copy
            detail = f"{name}'s {weight.name} ({held.dtype}, {tuple(held.shape)}) is not in its files in {folder}"
            raise Unbound("not_file_backed", detail + " as such (converted to another dtype when loaded, or renamed)")
        equal = next(((p, c) for p, c in candidates if same_bytes(c, held)), None)
        if equal is None:
            changed = [p for p, _ in candidates if p in noted and noted[p] != identity(p)]
            if changed:
                detail = f"{name}'s {changed[0]} was rewritten or replaced since attach, and its copy of {weight.name}"
                raise Unbound("file_changed", detail + " differs from it: it keeps its copies")
            detail = f"{name}'s copy of {weight.name} differs from its weights file in {folder} (a fused LoRA or an "
            raise Unbound("modified", detail + "edit): it keeps its copies")
        read.add(equal[0])
        views[weight.name] = equal[1]
    return views, sorted(read)


def copies(name: str, module: torch.nn.Module) -> list[Weight]:
    """The weights of ``module`` held as copies (not inside a private mapping of a regular file)."""
    inside = file_pages.in_file_view(file_pages.mappings())
    return [w for w in weights(name, module) if not inside(w.holder.data_ptr(), max(w.nbytes, 1))]


def point(weight: Weight, target: torch.Tensor) -> None:
    """Point ``weight`` and its groups' CPU sources at ``target`` instead of what holds it now."""
    for group in weight.groups:
        diffusers_compat.set_group_cpu_source(group, weight.tensor, target)
        LEDGER.erase(group, "repacked")
    if weight.tensor.data_ptr() == weight.holder.data_ptr():
        weight.tensor.data = target
