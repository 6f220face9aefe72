"""What ``ddo-hooks demo`` prints: what each component holds, one row per boundary, what attach would pin, the reports.

Examples:
    >>> import io, pathlib, tempfile, torch
    >>> from ddo_hooks.cli.demo import run_demo
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     report = pathlib.Path(folder) / "run.jsonl"
    ...     result = run_demo(family="sd", device=torch.device("cpu"), steps=1, calls=1,
    ...                       report=report, progress=False, log=io.StringIO())
    >>> text = format_result(result)
    >>> text.splitlines()[0]
    'what each component of the tiny StableDiffusionPipeline holds (parameters and buffers):'
    >>> "no-op: " in text or torch.cuda.is_available(), max(map(len, text.splitlines())) <= 100
    (True, True)
"""

from __future__ import annotations

import os
from typing import Any

from ddo_hooks.cli.cells import ATTACH_CALL
from ddo_hooks.cli.demo import _ENCODER_PREFIXES, H200_FIGURES, DemoResult
from ddo_hooks.cli.layout import TABLE_WIDTH, Column, render_table, wrap_text
from ddo_hooks.sizes import format_size

__all__ = ["census_lines", "format_result"]


def _components(result: DemoResult, width: int) -> list[str]:
    """What each component holds, once: a small table and its total."""
    sizes = result.component_bytes
    dropped = [name for name in sizes if name.startswith(_ENCODER_PREFIXES)]
    rows = [[name, format_size(size)] for name, size in sizes.items()]
    rows.append(["total", format_size(sum(sizes.values()))])
    heading = f"what each component of the tiny {result.pipeline} holds (parameters and buffers):"
    lines = [wrap_text(heading, width=width)]
    lines += ["  " + line for line in render_table([Column("component"), Column("holds")], rows, width=width - 2)]
    if dropped and len(set(result.calls) - {ATTACH_CALL}) > 1:
        lines.append(wrap_text(f"{', '.join(dropped)} left the pipeline after call 1", width=width))
    return lines


def census_lines(report: Any, *, width: int = TABLE_WIDTH) -> list[str]:
    """What attach would pin from the files on a CUDA machine, per component and in total (a census's report).

    Empty unless ``report`` is the census of ``pinned_copies.from_files`` where nothing could be pinned (a no-op
    ``unsupported_build`` with components): see :mod:`ddo_hooks.release.file_census`. The files are named relative
    to the folder they share.
    """
    repack = report.repack
    if repack.noop_reason != "unsupported_build" or not repack.components:
        return []
    files = [path for c in repack.components for path in c.files]
    common = os.path.commonpath(files) if files else ""
    short = (lambda path: os.path.relpath(path, common)) if len(common) > 1 else (lambda path: path)
    where = f" (in {common})" if len(common) > 1 else ""
    heading = (
        f"what attach/{repack.step} would do on a CUDA machine (this torch has no CUDA host allocator, so it pinned "
        f"nothing), from the pipeline's weights files{where}:"
    )
    lines = [wrap_text(heading, width=width)]
    name_width = max(len(c.component) for c in repack.components) + 2
    how = "in place" if repack.step == "register" else "into exact-size slabs"
    for c in repack.components:
        if c.status.startswith("would_"):
            what = f"would {repack.step} {format_size(c.tensor_bytes)} {how} from {', '.join(map(short, c.files))}"
        else:
            what = f"would {'refuse' if c.status == 'refused' else 'skip'}: {c.reason}: {c.detail}"
        text = f"  {c.component:<{name_width}}{what}"
        lines.append(wrap_text(text, width=width, indent=" " * (name_width + 4)))
    pinned = [c for c in repack.components if c.status.startswith("would_")]
    left = len(repack.components) - len(pinned)
    count = len({path for c in pinned for path in c.files})
    total = (
        f"  total: would {repack.step} {format_size(sum(c.tensor_bytes for c in pinned))} {how} from {count} "
        f"file{'' if count == 1 else 's'} ({len(pinned)} of {len(repack.components)} components); would leave "
        f"{left} as {'it is' if left == 1 else 'they are'}"
    )
    lines.append(wrap_text(total, width=width, indent="    "))
    return lines


def format_result(result: DemoResult, *, arrow: str = "→", width: int = TABLE_WIDTH) -> str:
    """What the demo prints: what each component holds, one row per boundary, what attach would pin, the reports.

    On CUDA the table is :func:`~ddo_hooks.cli.table.format_table` (owned pinned bytes and RSS
    before and after each release); on a CPU it is :func:`~ddo_hooks.cli.table.format_rss_table`
    (the RSS the demo observed at each boundary), followed by what attach would pin from the files on a CUDA
    machine (:func:`census_lines`) and a line on what a CUDA machine adds.

    Args:
        result: From :func:`run_demo`.
        arrow: Between before and after values.
        width: The widest a line may be.

    Returns:
        The text, without a trailing newline.
    """
    from ddo_hooks.cli.table import MEMORY_NOTE, boundary_rows, format_memory_table, format_rss_table, format_table

    rows = boundary_rows(result.tracker.records(), result.calls)
    lines = [*_components(result, width), ""]
    if result.observer is None:
        lines.append(format_table(rows, arrow=arrow, width=width))
    else:
        lines.append(format_rss_table(rows, observer=result.observer, arrow=arrow, width=width))
    for component, report in result.tracker.records():
        if component == "pinned_from_files" and (census := census_lines(report, width=width)):
            lines += ["", *census]
    observed = {(r.call, r.boundary) for r in rows if r.action != result.observer and r.memory_after is not None}
    kept = [r for r in rows if r.action != result.observer or (r.call, r.boundary) not in observed]
    memory = format_memory_table(kept, width=width)  # the demo's own reading only where no release read the host
    if memory is not None:
        lines += ["", wrap_text(MEMORY_NOTE + ":", width=width), memory]
    if result.observer is not None:
        lines += ["", wrap_text(f"On a CUDA machine the table also shows the pinned bytes; {H200_FIGURES}.", indent="")]
    count = len(result.calls)
    written = f"wrote {count} validated report{'' if count == 1 else 's'} to {result.report_path}"
    lines += ["", wrap_text(f"{written} (check: ddo-hooks summarize {result.report_path})", width=width)]
    return "\n".join(lines)
