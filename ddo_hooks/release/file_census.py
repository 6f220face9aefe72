"""What pinning from the files would do, found where torch has no CUDA host allocator: a census, nothing pinned.

Registering a file's pages needs CUDA; finding them does not. Where :func:`~ddo_hooks.release.from_files.pin_from_files`
cannot pin (a CPU-only torch), :func:`census` asks every question it would ask, in the same order and with the same
refusals (:mod:`ddo_hooks.release.file_sources`), opens and checks each file as ``register`` would
(:func:`~ddo_hooks.release.file_pins.open_files`), and closes it: each component ``would_register`` (or
``would_stage``) so many bytes from its files, or would be skipped or refused, with the reason. The report stays a
no-op ``unsupported_build`` that pinned nothing; its detail carries the totals.

Examples:
    >>> import tempfile
    >>> from diffusers import DiffusionPipeline
    >>> from ddo_hooks.testing.tiny_pipelines import build_pipeline
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     build_pipeline("sd").save_pretrained(folder)
    ...     pipe = DiffusionPipeline.from_pretrained(folder)  # its weights are views of its files
    ...     report = census(pipe, "register", encoders=False, phase="attach", unsupported="no CUDA")
    >>> sorted((c.component, c.status) for c in report.repack.components)
    [('unet', 'would_register'), ('vae', 'would_register')]
    >>> report.repack.detail.startswith("no CUDA: nothing was pinned. With CUDA, attach would register")
    True
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ddo_hooks.release import file_pages
from ddo_hooks.release.file_pins import FromFilesMode, Located, _close, open_files
from ddo_hooks.release.file_sources import chosen, find, found_row
from ddo_hooks.release.pinned_copies import Left, refuse
from ddo_hooks.release.slabs import plan_slabs
from ddo_hooks.reports.repack import ComponentRepack, PinnedCopyRepackReport
from ddo_hooks.sizes import format_size

__all__ = ["census", "census_sentence"]


def _would_pin(name: str, mode: FromFilesMode, located: list[Located], sizes: list[int]) -> tuple[int, list[str]]:
    """The bytes ``mode`` would pin for these weights, and their files; raises :class:`Left` as pinning would."""
    _close(open_files(name, located))  # the checks register and stage make on each opened file
    files = list(dict.fromkeys(where.mapping.path for where in located))
    if mode == "stage":
        return plan_slabs(sizes).capacity, files
    spans: dict[str, list[tuple[int, int]]] = {path: [] for path in files}
    for where in located:
        spans[where.mapping.path].append((where.offset, where.offset + where.nbytes))
    pages = sum(end - start for path in files for start, end in file_pages._page_runs(spans[path]))
    return pages, files


def _one(name: str, module: torch.nn.Module, mode: FromFilesMode, others: set[int]) -> ComponentRepack:
    from ddo_hooks.release.repack import _left_as_it_was

    started = time.perf_counter()
    try:
        component, built, located = find(name, module, others)
        for entry, where in zip(component.stored, located, strict=True):
            if mode == "register" and where.offset % entry.tensor.element_size():
                what = f"{name}'s {where.mapping.path} holds a weight at an unaligned offset"
                raise refuse("unsupported_tensor", what)
        nbytes, files = _would_pin(name, mode, located, [entry.nbytes for entry in component.stored])
    except Left as left:
        return _left_as_it_was(name, left, started)
    tensor_bytes = sum(entry.nbytes for entry in component.stored)
    how = "in place" if mode == "register" else "into exact-size slabs"
    detail = f"would {mode} {format_size(tensor_bytes)} {how} from {', '.join(files)} ({nbytes:,} bytes pinned)"
    if built:
        detail += f"; {len(built)} buffer(s) built at init, in no file, would be left as they are"
    return found_row(
        name, "would_register" if mode == "register" else "would_stage", detail, component, located, started
    )


def census_sentence(why: str, mode: FromFilesMode, components: list[ComponentRepack]) -> str:
    """The census's detail: why nothing was pinned, then the totals of what would be, and what would be left.

    Examples:
        >>> would = ComponentRepack(component="vae", status="would_register", reason=None,
        ...     detail="would register 1.0 KiB in place from /w/vae.safetensors", groups=0, tensors=1,
        ...     tensor_bytes=1024, pinned_bytes_before=0, pinned_bytes_after=0, slabs=(), seconds=0.0,
        ...     files=("/w/vae.safetensors",))
        >>> for sentence in census_sentence("no CUDA", "register", [would]).split(". "):
        ...     print(sentence)
        no CUDA: nothing was pinned
        With CUDA, attach would register 1.0 KiB in place from 1 file (vae), and leave no component as it is
    """
    pinned = [c for c in components if c.status.startswith("would_")]
    left = [c for c in components if not c.status.startswith("would_")]
    how = "in place" if mode == "register" else "into exact-size slabs"
    total = format_size(sum(c.tensor_bytes for c in pinned))
    files = len({path for c in pinned for path in c.files})
    names = f" ({', '.join(c.component for c in pinned)})" if pinned else ""
    parts = [f"would {mode} {total} {how} from {files} file{'' if files == 1 else 's'}{names}"]
    if not pinned:
        parts = ["would pin nothing"]
    refused = [f"{c.component} ({c.reason})" for c in left if c.status == "refused"]
    skipped = [f"{c.component} ({c.reason})" for c in left if c.status == "skipped"]
    if refused:
        parts.append(f"refuse {', '.join(refused)}")
    if skipped:
        parts.append(f"skip {', '.join(skipped)}")
    if not left:
        parts.append("leave no component as it is")
    listed = parts[-1] if len(parts) == 1 else f"{', '.join(parts[:-1])}, and {parts[-1]}"
    return f"{why}: nothing was pinned. With CUDA, attach {listed}"


def census(
    pipeline: Any, mode: FromFilesMode, *, encoders: bool, phase: str, unsupported: str
) -> PinnedCopyRepackReport:
    """What :func:`~ddo_hooks.release.from_files.pin_from_files` would pin, where ``unsupported`` says why it cannot.

    Returns:
        A no-op ``unsupported_build`` report whose components say what would be pinned (``would_register``,
        ``would_stage``) or left (``skipped``, ``refused``), with the reason; its detail, the totals.
    """
    from ddo_hooks.release.repack import _report

    started = time.perf_counter()
    results = [_one(name, module, mode, others) for name, module, others in chosen(pipeline, encoders)]
    why = census_sentence(unsupported, mode, results) if results else unsupported
    return _report(phase, results, started, unsupported=why, step=mode)
