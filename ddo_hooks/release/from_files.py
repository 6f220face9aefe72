"""Each weight in host memory once: a pipeline's weights pinned from their files, at their size.

The policy's ``pinned_copies.from_files`` does it at attach.

Group offloading with streams and ``low_cpu_mem_usage=False`` pins a copy of every weight, each rounded up to a
power of two, beside the files' pages it was read from; with ``low_cpu_mem_usage=True`` the weights stay views of
their safetensors files and every onload pins them again (about twice the call time). Loaded with
``low_cpu_mem_usage=True`` and the files' dtype, :func:`pin_from_files` gives the components that run at every
step (the denoisers and the VAE) onloads from pinned memory, with each weight once in host memory; with
``encoders=True`` the components that run once per call (text and image encoders, priors) too, and they stay
pinned between calls:

* ``register``: the files are mapped again, shared and read-only, and those pages are pinned in place with
  ``cudaHostRegister`` (read-only): no copy at all, the pages are the page cache's, and several processes that
  map the same files share them. The weights are read-only while registered: change them (fuse a LoRA) before
  attach, or after detach.
* ``stage``: the weights are copied into exact-size slabs (:mod:`ddo_hooks.release.slabs`), tensor by tensor,
  and the pages each copy was read from are dropped as it goes (``madvise``, then ``posix_fadvise``), so that
  the file pages never sit beside the copies.

What is pinned are the sources the offload copies from: a group offloading group's CPU copies
(``use_stream=True``), else the component's weights that lie on the CPU. Those are the weights of a component not
offloaded yet (an offload applied afterwards finds them pinned and pins nothing of its own: diffusers and DDO skip
what is pinned already), or of one that DDO's linear runtime offloads (``enable_pipeline_offload``: it copies each
weight from where it lies at each use, so offload with DDO's ``DDO_PIN_CPU_MEMORY=0`` first, or attach before it).
Either way the offload finds the sources pinned and copies them without staging. A component that cannot be pinned
so is left exactly as it was, with the reason: its weights are all on the device (``on_device``), not views of
their files (``not_file_backed``: built or loaded into memory, converted to another dtype, or pinned copies
already), a file was deleted, replaced or truncated since it was loaded (``file_changed``: each file is checked on
its opened descriptor, a regular file that holds every view's bytes, before it is mapped or read), a page of a view
was written (``modified``), a weight is shared with another component (``shared_storage``), DDO's runtime pins
copies of its own (``ddo_pins_copies``, where the policy's ``pinned_copies.on_ddo_pinning`` is ``warn``; else
attach raises), or pinning failed (``pin_failed``). Buffers a model builds at init and does not save
(``persistent=False``, as Wan's rotary tables, Chroma's ``mod_proj``, CLIP's ``position_ids``) are in no file: they
are left as they were, the rest of the component is pinned, and the report says how many. :func:`unpin_from_files`
undoes it exactly: the weights are the views they were before (a weight an offload moved to the device since stays
there).

Without CUDA nothing can be pinned, and the report says what would be (:mod:`ddo_hooks.release.file_census`).

Examples:
    On a machine without CUDA nothing can be pinned (a pipeline built in memory has no files either):

    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline
    >>> pin_from_files(build_pipeline("sd"), "stage").repack.noop_reason
    'unsupported_build'
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Literal

import torch

from ddo_hooks._compat import ddo as ddo_compat
from ddo_hooks._compat import diffusers as diffusers_compat
from ddo_hooks._moved import outside_stacklevel
from ddo_hooks.errors import InvalidArgumentError, WeightsFileChangedError
from ddo_hooks.ledger import LEDGER
from ddo_hooks.release import allocator as _allocator
from ddo_hooks.release.file_pins import FromFilesMode, Pinned, register, stage
from ddo_hooks.release.file_sources import ONCE_PER_CALL, chosen, ddo_pinned, ddo_pinning, find, found_row
from ddo_hooks.release.pinned_copies import Left, skip
from ddo_hooks.reports.repack import ComponentRepack, PinnedCopyRepackReport

__all__ = [
    "DDO_HOOK",
    "ONCE_PER_CALL",
    "FromFilesMode",
    "check_ddo_pinning",
    "check_registered",
    "pin_from_files",
    "pinned_from_files",
    "unpin_from_files",
]


DDO_HOOK = ddo_compat.RUNTIME_HOOK
"""The name under which DDO (diffusers-dynamic-offloader) registers its runtime's hook in diffusers' registry."""


def pinned_from_files(module: Any) -> FromFilesMode | None:
    """How ``module``'s weights were pinned from its files (``None``: they were not)."""
    pinned: Pinned | None = LEDGER.read(module).pinned
    return None if pinned is None else pinned.mode


def check_registered(pipeline: Any) -> None:
    """Raise when a file whose pages a component of ``pipeline`` has registered was rewritten in place since.

    The registered pages are the page cache's own, so such a rewrite would change the weights under the component:
    the phase hooks call this at the start of each pipeline call, before any component runs (one ``fstat`` per
    file). A new file renamed over the path changes nothing the pages hold, and is no change.

    Raises:
        WeightsFileChangedError: Names the pipeline, the component, the file and the fix.
    """
    for name, module in getattr(pipeline, "components", {}).items():
        pinned: Pinned | None = LEDGER.read(module).pinned
        for held in () if pinned is None else pinned.files:
            if (changed := held.changed()) is not None:
                raise WeightsFileChangedError(
                    f"{type(pipeline).__name__} did not run this call: {name}'s weights are registered in place in "
                    f"{changed}, so they now hold other bytes and its outputs would change; load the pipeline "
                    "again, and leave its weights files as they are while it is attached"
                )


def _one(name: str, module: torch.nn.Module, mode: FromFilesMode, others: set[int]) -> ComponentRepack:
    started = time.perf_counter()
    try:
        if pinned_from_files(module) is not None:
            raise skip("already_packed", f"{name}'s weights are pinned from its files already")
        component, built, located = find(name, module, others)
        pinned, owned, detail = (register if mode == "register" else stage)(name, module, component, located)
        if built:
            detail += (
                f"; {len(built)} buffer(s) built at init, not in its files, left as they were "
                f"({sum(e.nbytes for e in built):,} bytes)"
            )
    except Left as left:
        from ddo_hooks.release.repack import _left_as_it_was

        return _left_as_it_was(name, left, started)
    LEDGER.write(module, pinned=pinned)
    return found_row(
        name,
        "registered" if mode == "register" else "repacked",
        detail,
        component,
        located,
        started,
        pinned_bytes_after=owned,
        slabs=pinned.slabs,
    )


def check_ddo_pinning(pipeline: Any, *, encoders: bool, on: Literal["raise", "warn"], source: str) -> None:
    """At attach, before pinning: raise (or warn) where DDO's runtime pins copies of its own of what would be pinned.

    Args:
        pipeline: The pipeline attach pins from its files.
        encoders: Whether its encoders are pinned too (``keep_encoders_pinned``).
        on: The policy's ``pinned_copies.on_ddo_pinning``.
        source: Where the policy came from, for the message.

    Raises:
        InvalidArgumentError: ``on`` is ``raise`` and DDO pins copies of such a component; the message names them, the
            fix, and the policy switch.
    """
    names = ddo_pinned(pipeline, encoders)
    if not names:
        return
    what = ddo_pinning(names)
    if on == "raise":
        raise InvalidArgumentError(
            f"attach(): {what}. The policy ({source}) pins the weights in place from their files "
            "(pinned_copies.from_files); to go on anyway, leaving such components as they are, set "
            "pinned_copies.on_ddo_pinning: warn"
        )
    warnings.warn(f"{what}; left as they are (pinned_copies.on_ddo_pinning: warn)", stacklevel=outside_stacklevel())


def pin_from_files(
    pipeline: Any, mode: FromFilesMode, *, encoders: bool = False, phase: str = "attach"
) -> PinnedCopyRepackReport:
    """Pin the weights of ``pipeline``'s components (its encoders and priors too with ``encoders``) from their files.

    Call it before the pipeline's first call, with the pipeline loaded with the files' dtype, and either offloaded
    by diffusers with streams and ``low_cpu_mem_usage=True`` (``enable_group_offload(..., use_stream=True,
    low_cpu_mem_usage=True)``), or offloaded by DDO's linear runtime without its own pinned copies, or not offloaded
    yet (then offload it afterwards: it finds the weights pinned and pins nothing of its own);
    :func:`~ddo_hooks.attach` does it when the policy says ``pinned_copies.from_files``.

    Args:
        pipeline: A diffusers pipeline.
        mode: ``register`` (in place, no copy) or ``stage`` (exact-size slabs).
        encoders: Pin the components that run once per call (:data:`ONCE_PER_CALL`) too; they then stay pinned
            between calls.
        phase: The label the report carries.

    Returns:
        The report (route ``pinned_copy_repack``, step ``register`` or ``stage``): each component ``registered`` or
        ``repacked`` (staged), or left with its reason. Where torch has no CUDA host allocator, a no-op
        ``unsupported_build`` that says what would be pinned (:func:`~ddo_hooks.release.file_census.census`).
    """
    from ddo_hooks.release.counters import read_snapshot
    from ddo_hooks.release.host_memory import observe_host
    from ddo_hooks.release.repack import _report

    started = time.perf_counter()
    backend = _allocator.backend()
    unsupported = backend.entry_point(lazy_init_done=False)
    if isinstance(unsupported, str):  # no CUDA host allocator: nothing can be pinned, what would be is found
        from ddo_hooks.release.file_census import census

        return census(pipeline, mode, encoders=encoders, phase=phase, unsupported=unsupported)
    host_before, before = observe_host(), read_snapshot(backend.raw_host_stats)
    results = [_one(name, module, mode, others) for name, module, others in chosen(pipeline, encoders)]
    return _report(phase, results, started, before=before, host_before=host_before, step=mode)


def _restore(module: torch.nn.Module, pinned: Pinned) -> None:
    """Point what still reads a pinned tensor back at the view it was.

    That is each weight and group source :func:`pin_from_files` pointed at it, and the sources of groups an offload
    applied afterwards made from it; a weight moved since (to the device, by such an offload) stays where it is.
    """
    views = {entry.tensor.data_ptr(): view for entry, view in pinned.restore}
    for entry, view in pinned.restore:
        entry.weights = [w for w in entry.weights if w.device.type == "cpu" and w.data_ptr() == entry.tensor.data_ptr()]
        entry.point(view)
    for group in diffusers_compat.offload_groups(module):
        for key, source in list(diffusers_compat.group_cpu_sources(group).items()):
            before = views.get(source.data_ptr()) if source.device.type == "cpu" else None
            if before is not None and before.shape == source.shape:
                diffusers_compat.set_group_cpu_source(group, key, before)


def unpin_from_files(pipeline: Any) -> None:
    """Point the weights :func:`pin_from_files` pinned back at the views they were, and unpin (exact inverse)."""
    for module in pipeline.components.values():
        pinned: Pinned | None = LEDGER.erase(module, "pinned")
        if pinned is None:
            continue
        _restore(module, pinned)
        for group in diffusers_compat.offload_groups(module):  # those of unpinned buffers too
            LEDGER.erase(group, "repacked")
        if pinned.finalizer is not None:
            pinned.finalizer()
        for held in pinned.files:
            held.close()
