"""Where a pipeline's weights lie in their files: what pinning from the files would pin, or why it would not.

:mod:`ddo_hooks.release.from_files` pins what :func:`locate` finds, and
:mod:`ddo_hooks.release.file_census` says, where torch has no CUDA host allocator, what it would pin. Both ask the
same questions in the same order: which components (:func:`chosen`), which tensors (:func:`sources`, less the
buffers :func:`built_at_init`), whether DDO's runtime pins copies of its own (:func:`ddo_pinned`), and where each
tensor is in its file (:func:`locate`): :func:`find` asks them all. Each refusal is a
:class:`~ddo_hooks.release.pinned_copies.Left` with the reason and a sentence that names the component and the fix.

Examples:
    >>> import torch
    >>> sources("linear", torch.nn.Linear(2, 2).to("meta"))
    Traceback (most recent call last):
    ...
    ddo_hooks.release.pinned_copies.Left: linear's weights are on meta, none on the CPU: nothing to pin
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Literal

import torch

from ddo_hooks._compat import ddo as ddo_compat
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks.release import allocator as _allocator
from ddo_hooks.release import file_pages
from ddo_hooks.release.file_pins import Located
from ddo_hooks.release.pinned_copies import Component, Stored, _tensor_problem, inspect_component, refuse, skip
from ddo_hooks.reports.repack import ComponentRepack

__all__ = [
    "DDO_PIN_FIX",
    "ONCE_PER_CALL",
    "built_at_init",
    "chosen",
    "ddo_pinned",
    "ddo_pinning",
    "find",
    "found_row",
    "locate",
    "sources",
]


ONCE_PER_CALL = ("text_encoder", "image_encoder", "prior")
"""Name prefixes of the components that run once per call: left as they are (their pages are given back by
``release_done_components``) unless :func:`~ddo_hooks.release.from_files.pin_from_files` is asked for ``encoders``."""

DDO_PIN_FIX = (
    "offload with enable_pipeline_offload(pipe, ..., environ={'DDO_PIN_CPU_MEMORY': '0'}), or attach before DDO"
)
"""How to keep DDO from pinning copies of its own, as every message about it says."""


def ddo_pinning(names: list[str]) -> str:
    """Why pinning these components from their files is in vain: DDO's runtime pins copies of its own of them.

    DDO reads ``DDO_PIN_CPU_MEMORY`` and never checks the spelling of its variables: where that one is missing,
    misspelt or not ``0``, its ``auto`` preset pins a copy of each weight it streams (on a CUDA machine), beside the
    files' pages. The sentence says so, with the fix (:data:`DDO_PIN_FIX`); attach and the report use it alike.

    Examples:
        >>> ddo_pinning(["transformer"]).split(", so ")[0]
        "transformer is offloaded by DDO's runtime with pin_cpu_memory on"
    """
    subject = f"{names[0]} is" if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]} are"
    return (
        f"{subject} offloaded by DDO's runtime with pin_cpu_memory on, so DDO pins a copy of each weight it streams: "
        "DDO_PIN_CPU_MEMORY was not '0' where DDO read it (missing, misspelt, or set otherwise; DDO does not check "
        f"its variables' names); {DDO_PIN_FIX}"
    )


def ddo_pinned(pipeline: Any, encoders: bool) -> list[str]:
    """The components pinning from the files would pin whose DDO runtime pins copies of its own."""
    return [name for name, module, _ in chosen(pipeline, encoders) if ddo_compat.runtime_pins_copies(module)]


def _weight_name(module: torch.nn.Module, entry: Stored) -> str:
    names = {id(t): n for n, t in [*module.named_parameters(), *module.named_buffers()]}
    return next((names[id(w)] for w in entry.weights if id(w) in names), "a weight")


def locate(name: str, module: torch.nn.Module, component: Component, others: set[int]) -> list[Located]:
    """Each storage's place in its file; raises :class:`Left` where a weight cannot be pinned from its file."""
    at = file_pages.mapping_at(file_pages.mappings())
    found = []
    for entry in component.stored:
        if any(id(w) in others for w in entry.weights):
            what = _weight_name(module, entry)
            raise refuse(
                "shared_storage", f"{name}'s {what} is a weight of another component too; it is left as it was"
            )
        mapping = at(entry.tensor.data_ptr(), max(entry.nbytes, 1))
        if mapping is None:
            what = _weight_name(module, entry)
            pinned = ""
            if _allocator.backend().is_pinned(entry.tensor):
                pinned = " (a pinned copy: low_cpu_mem_usage=False)"
                if diffusers_compat.has_hook(module, ddo_compat.RUNTIME_HOOK):
                    pinned = " (a copy DDO pinned: offload it with DDO_PIN_CPU_MEMORY=0, or attach before DDO)"
            raise refuse(
                "not_file_backed",
                f"{name}'s {what} is not a view of its weights file{pinned}: built or loaded into memory, or converted "
                "to another dtype; load it with the files' dtype and offload with low_cpu_mem_usage=True",
            )
        if mapping.deleted or _inode(mapping.path) != mapping.inode:
            raise refuse(
                "file_changed",
                f"{name}'s weights file {mapping.path} was deleted or replaced since it was loaded: what the path "
                "holds now is not what the weights read; load the pipeline again",
            )
        found.append(Located(mapping, mapping.offset + entry.tensor.data_ptr() - mapping.start, entry.nbytes))
    runs = file_pages._page_runs([(e.tensor.data_ptr(), e.tensor.data_ptr() + e.nbytes) for e in component.stored])
    _, written = file_pages._census(runs)
    if written:
        raise refuse("modified", f"{written} page(s) of {name}'s weights were written since they were loaded (an edit, "
                                 "a fused LoRA): its files no longer hold them; it is left as it was")  # fmt: skip
    return found


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def built_at_init(module: torch.nn.Module, component: Component) -> tuple[Component, list[Stored]]:
    """Split off the storages of the buffers that no file holds.

    Those are the buffers not in the state dict (``persistent=False``: built at init, as Wan's rotary tables are);
    they stay as they are, and diffusers pins them at each onload.
    """
    saved = {id(t) for t in module.state_dict(keep_vars=True).values()}
    kept: list[Stored] = []
    built: list[Stored] = []
    for entry in component.stored:
        (built if entry.weights and not any(id(w) in saved for w in entry.weights) else kept).append(entry)
    return dataclasses.replace(component, stored=kept), built


def sources(name: str, module: torch.nn.Module) -> Component:
    """What to pin: group offloading's CPU sources where diffusers offloads ``module``, else its weights on the CPU.

    The latter are those of a component not offloaded yet, or offloaded by a runtime that reads each weight where
    it lies (DDO's linear runtime); weights kept on the device are left out.
    """
    if diffusers_compat.offload_groups(module):
        return inspect_component(name, module, staging=True)
    stored: dict[int, Stored] = {}
    weights = [*module.parameters(), *module.buffers()]
    for weight in weights:
        data = weight.data
        if data.device.type != "cpu" or data.numel() == 0:
            continue
        if (problem := _tensor_problem(data, staging=True)) is not None:
            raise refuse("unsupported_tensor", f"a weight of {name} {problem}; it is left as it was")
        entry = stored.setdefault(data.data_ptr(), Stored(data))
        if (entry.tensor.dtype, entry.tensor.shape, entry.tensor.stride()) != (data.dtype, data.shape, data.stride()):
            raise refuse("shared_storage", f"weights of {name} share one storage as different tensors")
        entry.weights.append(weight)
    if not stored:
        where = {str(w.device) for w in weights} or {"nowhere"}
        raise skip("on_device", f"{name}'s weights are on {', '.join(sorted(where))}, none on the CPU: nothing to pin")
    return Component(name, [], list(stored.values()))


def chosen(pipeline: Any, encoders: bool) -> list[tuple[str, torch.nn.Module, set[int]]]:
    """The components to pin (those that run once per call too with ``encoders``), and the others' tensors.

    Each comes with the ids of the other components' tensors: a weight shared with one of them is not pinned.
    """
    held = {n: m for n, m in pipeline.components.items() if isinstance(m, torch.nn.Module)}
    picked = [(n, m) for n, m in held.items() if encoders or not n.startswith(ONCE_PER_CALL)]
    return [
        (n, m, {id(t) for o in held.values() if o is not m for t in [*o.parameters(), *o.buffers()]}) for n, m in picked
    ]


def find(name: str, module: torch.nn.Module, others: set[int]) -> tuple[Component, list[Stored], list[Located]]:
    """What pinning ``module`` from its files pins, the buffers built at init it leaves, and where each tensor lies.

    Raises:
        Left: The component would be left as it is, with the reason and a sentence.
    """
    if ddo_compat.runtime_pins_copies(module):
        raise refuse("ddo_pins_copies", ddo_pinning([name]))
    component, built = built_at_init(module, sources(name, module))
    return component, built, locate(name, module, component, others)


def found_row(
    name: str,
    status: Literal["registered", "repacked", "would_register", "would_stage"],
    detail: str,
    component: Component,
    located: list[Located],
    started: float,
    *,
    pinned_bytes_after: int = 0,
    slabs: tuple[int, ...] = (),
) -> ComponentRepack:
    """The row of a component pinned from its files, or that a census finds would be: its groups, weights and files."""
    return ComponentRepack(
        component=name,
        status=status,
        reason=None,
        detail=detail,
        groups=len(component.groups),
        tensors=len(component.stored),
        tensor_bytes=sum(entry.nbytes for entry in component.stored),
        pinned_bytes_before=0,
        pinned_bytes_after=pinned_bytes_after,
        slabs=slabs,
        seconds=time.perf_counter() - started,
        files=tuple(dict.fromkeys(where.mapping.path for where in located)),
    )
