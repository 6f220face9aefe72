"""Pointing a done component's weights back at its weights files where it holds copies of them.

A component's weights stop being views of its safetensors files when it is offloaded with
group offloading's ``low_cpu_mem_usage=False`` (diffusers' default: ``enable_group_offload`` pins
a copy of every weight, and the weights point at the copies) or loaded into memory
(``from_pretrained(..., low_cpu_mem_usage=False)``). Its pages then cannot be dropped.

Such a pipeline does not depend on its files: rewriting or deleting them changes nothing. Freeing
the copies would make it depend on them, so it is done only where the policy declares the files
stable (``release_done_components``' option ``stable_files: true``). :func:`rebind_to_files` then
maps the component's files again (the folder its ``name_or_path`` names), checks each copy equal,
byte for byte, to its tensor there, and only then points the weight and its group's CPU source at
the file's view: the copies are freed (pinned ones into the host cache, which
``host_cache_release`` gives back). From then on the component is staged for each use, as with
``low_cpu_mem_usage=True``: diffusers pins a group's unpinned sources at each onload. A buffer the
files do not hold (``position_ids``) gets a plain copy.

The files must then stay as they are while the pipeline is attached: the views read them, and a
file truncated under them kills the process (``SIGBUS``). Each file the views read is held open
(:class:`~ddo_hooks.release.weights_files.HeldFile`: the inode they map, whatever the path names
later; closed once the component holds copies again or is collected), and its identity (device,
inode, size, modification and change times: a copy that sets the modification time back still moves
the change time) when the copies are freed is checked on that descriptor before every later use (a
new file renamed over the path changes nothing the views read, and is no change):
at the start of each pipeline call, before any component runs (:func:`check_rebound`, one ``fstat``
per file), and at each ``release_done_components``, staging and detach. A file rewritten since
raises :class:`~ddo_hooks.errors.WeightsFileChangedError` instead of using its new bytes.
:func:`copy_back` makes copies again where they were (pinned ones into slabs), so that a detached
pipeline depends on its files exactly as before attach. A component whose copies differ from its
files (a fused LoRA, another dtype) or whose files cannot be found is left exactly as it was,
with the reason (:class:`~ddo_hooks.release.file_copies.Unbound`).

Examples:
    >>> import torch
    >>> rebind_to_files("linear", torch.nn.Linear(4, 4))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ddo_hooks.release.file_copies.Unbound: linear's weights (80 bytes) are not views of weights files...
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ddo_hooks import _moved
from ddo_hooks.errors import WeightsFileChangedError
from ddo_hooks.ledger import LEDGER
from ddo_hooks.release import allocator as _allocator
from ddo_hooks.release import file_copies, file_pages
from ddo_hooks.release.weights_files import HeldFile
from ddo_hooks.reports.done_components import ComponentPages

if TYPE_CHECKING:
    from ddo_hooks.reports.repack import PinnedCopyRepackReport

__all__ = [
    "Rebound",
    "check_rebound",
    "check_unchanged",
    "copy_back",
    "give_back",
    "rebind_to_files",
    "stage_again",
]


@dataclass(frozen=True)
class Rebound:
    """What :func:`rebind_to_files` did to a component: which weights now read which files."""

    pinned: bool
    """Its copies were pinned (group offloading with streams): staging pins them again."""
    names: frozenset[str]
    """The parameters and buffers now read from file views."""
    files: tuple[HeldFile, ...]
    """Each weights file its views read, held open (the inode they map), with its identity when the copies were
    freed: one descriptor per file, closed when the component stops being rebound or is collected."""

    def changed(self) -> str | None:
        """The first file whose inode the views read was rewritten since, with what changed; ``None`` when none."""
        return next((change for file in self.files if (change := file.changed()) is not None), None)

    def close(self) -> None:
        """Close the files it holds open."""
        for file in self.files:
            file.close()


def check_unchanged(name: str, module: torch.nn.Module) -> None:
    """Raise when a file ``module``'s weights read since :func:`rebind_to_files` changed.

    Raises:
        WeightsFileChangedError: Names the file and the fix.
    """
    rebound: Rebound | None = LEDGER.read(module).rebound
    changed = None if rebound is None else rebound.changed()
    if changed is not None:
        raise WeightsFileChangedError(
            f"{name}'s weights read {changed}, whose copies were freed because the policy declared its weights "
            "files stable (release_done_components' stable_files: true): the weights now hold other bytes, so "
            "its outputs would change; load the pipeline again, and leave its files as they are while it is "
            "attached (or leave stable_files out)"
        )


def check_rebound(pipeline: Any) -> None:
    """Raise when a file that a rebound component of ``pipeline`` reads changed since: one ``fstat`` per file.

    The phase hooks call it at the start of each pipeline call, before any component runs, so that
    no output is made from changed bytes.

    Raises:
        WeightsFileChangedError: Names the pipeline, the component, the file and the fix.
    """
    for name, module in getattr(pipeline, "components", {}).items():
        if _rebound(module, pinned=None) is None:
            continue
        try:
            check_unchanged(name, module)
        except WeightsFileChangedError as e:
            raise WeightsFileChangedError(f"{type(pipeline).__name__} did not run this call: {e}") from None


def rebind_to_files(name: str, module: torch.nn.Module) -> int:
    """Point ``module``'s weights held as copies at the views of its weights files that equal them.

    Nothing changes until every copy was checked; the switch cannot fail halfway. The component is
    then in the ledger (:data:`~ddo_hooks.ledger.LEDGER`), with the files its views read held
    open, and their identity.

    Args:
        name: The component's name, for the reasons.
        module: The component, at rest (between calls, or once its work in a call is done).

    Returns:
        The bytes of copies replaced (0 when its parameters are file views already).

    Raises:
        file_copies.Unbound: It stays as it was: a weight is not a CPU tensor, its files cannot be found or read, a
            parameter is not in them with its dtype and shape (``not_file_backed``), its copy differs
            from the file or a file changed while it was read (``modified``), or a file changed since
            attach or no longer holds its tensors' bytes (``file_changed``).
    """
    copies = file_copies.copies(name, module)
    if not any(w.parameter for w in copies):
        return 0  # its parameters are file views; a buffer the files do not hold stays as it is
    folder, paths = file_copies.weights_files(name, module, sum(w.nbytes for w in copies))
    opened: dict[str, HeldFile] = {}
    try:
        files = {}
        for path in paths:  # views of private mappings: nothing read yet
            files[path], opened[path] = file_copies.load(path)
        views, read = file_copies.equal_views(name, folder, files, copies, LEDGER.read(module).noted or {})
        changed = next((change for path in read if (change := opened[path].changed()) is not None), None)
        if changed is not None:
            detail = f"a weights file of {name} changed while its copies were compared ({changed}): it keeps them"
            raise file_copies.Unbound("modified", detail)
        earlier: Rebound = LEDGER.read(module).rebound or Rebound(False, frozenset(), ())
        pinned = earlier.pinned or any(_allocator.backend().is_pinned(w.holder) for w in copies)
        replaced: dict[int, int] = {}
        for weight in copies:
            held = weight.holder
            replaced[held.untyped_storage().data_ptr()] = held.untyped_storage().nbytes()
            target = views.get(weight.name)
            file_copies.point(weight, held.clone(memory_format=torch.contiguous_format) if target is None else target)
        kept = {file.key: file for file in earlier.files}
        for path in read:  # the files its views read, once each (an earlier rebinding's are kept as they are)
            file = opened.pop(path)
            if kept.setdefault(file.key, file) is not file:
                file.close()
        LEDGER.write(module, rebound=Rebound(pinned, earlier.names | set(views), tuple(kept.values())))
    finally:
        for file in opened.values():  # those its views do not read
            file.close()
    return sum(replaced.values())


def give_back(
    name: str,
    module: torch.nn.Module,
    unbound: MutableMapping[torch.nn.Module, file_copies.Unbound],
    *,
    stable_files: bool = False,
    evict: bool = False,
) -> ComponentPages:
    """Give back ``module``'s clean file pages; with ``stable_files``, rebind its copies to its files first.

    ``evict``: out of the page cache too (:func:`~ddo_hooks.release.file_pages.give_back_file_pages`).

    ``unbound`` remembers the components left with their copies (weakly), so that their copies are
    compared with their files once, not at every call.

    Raises:
        WeightsFileChangedError: A file its weights read since an earlier rebinding changed.
    """
    check_unchanged(name, module)
    replaced, refusal = 0, unbound.get(module)
    if refusal is None:
        try:
            replaced = rebind_to_files(name, module) if stable_files else _keep_copies(name, module)
        except file_copies.Unbound as e:  # kept without its traceback: its frames hold the module and its files' views
            unbound[module] = refusal = file_copies.Unbound(e.reason, e.detail)
    pages = file_pages.give_back_file_pages(name, module, replaced_bytes=replaced, evict=evict)
    if refusal is not None and pages.reason == "not_file_backed":
        return pages.model_copy(update={"reason": refusal.reason, "detail": refusal.detail})
    return pages


def _keep_copies(name: str, module: torch.nn.Module) -> int:
    """Without ``stable_files``: a component that holds copies of weights its files hold keeps them (raises)."""
    copies = [w for w in file_copies.copies(name, module) if w.parameter]
    if copies:
        total = sum(w.nbytes for w in copies)
        folder, _ = file_copies.weights_files(name, module, total)
        detail = f"{name} holds its own copies of {len(copies)} weights ({total} bytes; loaded into memory or pinned "
        detail += f"by group offloading), so it does not read its files in {folder}; it keeps them, so as not to "
        detail += "depend on those files (stable_files: true frees copies equal to them)"
        raise file_copies.Unbound("own_copies", detail)
    return 0


def stage_again(pipeline: Any, *, phase: str) -> PinnedCopyRepackReport | None:
    """Pin again, into slabs, the copies :func:`rebind_to_files` replaced in ``pipeline``'s components.

    Returns:
        The report of the staging (route ``pinned_copy_repack``), or ``None`` when none of the
        pipeline's components had pinned copies replaced.

    Raises:
        WeightsFileChangedError: A file such a component's weights read changed since (nothing is pinned).
    """
    held = pipeline.components
    names = [name for name, module in held.items() if _rebound(module, pinned=True)]
    if not names:
        return None
    for name in names:
        check_unchanged(name, held[name])
    from ddo_hooks.release.repack import stage_pinned_copies

    report = stage_pinned_copies(pipeline, names, phase=phase)
    for result in report.repack.components:
        if result.status == "repacked":
            _forget(held[result.component])
    return report


def copy_back(pipeline: Any, *, phase: str) -> PinnedCopyRepackReport | None:
    """Give every component of ``pipeline`` that :func:`rebind_to_files` rebound its own copies again.

    Pinned copies are staged into slabs (:func:`stage_again`); where that cannot be done, and for
    copies that were in memory, each weight read from a file gets a plain copy. Afterwards no
    weight reads a file it did not read before the rebinding.

    Returns:
        The staging's report, or ``None`` when nothing was pinned again.

    Raises:
        WeightsFileChangedError: A file a component's weights read changed since; that component
            is left reading it (its first bytes are gone), the others get their copies.
    """
    failure: WeightsFileChangedError | None = None
    try:
        report = stage_again(pipeline, phase=phase)
    except WeightsFileChangedError as e:
        report, failure = None, e
    for name, module in pipeline.components.items():
        rebound = _rebound(module, pinned=None)
        if rebound is None:
            continue
        try:
            check_unchanged(name, module)
        except WeightsFileChangedError as e:
            failure = failure or e
            continue
        for weight in file_copies.weights(name, module):
            if weight.name in rebound.names:
                file_copies.point(weight, weight.holder.clone(memory_format=torch.contiguous_format))
        _forget(module)
    if failure is not None:
        raise failure
    return report


def _forget(module: torch.nn.Module) -> None:
    """``module`` no longer reads its files: out of the ledger, and the files it held closed."""
    rebound: Rebound | None = LEDGER.erase(module, "rebound")
    if rebound is not None:
        rebound.close()


def _rebound(module: Any, *, pinned: bool | None) -> Rebound | None:
    """``module``'s :class:`Rebound` (``None`` when it is none, or its ``pinned`` is not the one asked)."""
    rebound: Rebound | None = LEDGER.read(module).rebound
    return None if rebound is None or (pinned is not None and rebound.pinned != pinned) else rebound


def __getattr__(name: str) -> Any:
    return _moved.old_attribute(__name__, name)
