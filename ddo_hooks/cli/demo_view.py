"""What ``ddo-hooks demo`` prints: what each component holds, one row per boundary, where the reports went.

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

from ddo_hooks.cli.cells import ATTACH_CALL
from ddo_hooks.cli.demo import _ENCODER_PREFIXES, H200_FIGURES, DemoResult
from ddo_hooks.cli.layout import TABLE_WIDTH, Column, render_table, wrap_text
from ddo_hooks.sizes import format_size

__all__ = ["format_result"]


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


def format_result(result: DemoResult, *, arrow: str = "→", width: int = TABLE_WIDTH) -> str:
    """What the demo prints: what each component holds, one row per boundary, where the reports went.

    On CUDA the table is :func:`~ddo_hooks.cli.table.format_table` (owned pinned bytes and RSS
    before and after each release); on a CPU it is :func:`~ddo_hooks.cli.table.format_rss_table`
    (the RSS the demo observed at each boundary), followed by a line on what a CUDA machine adds.

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
    memory = format_memory_table(rows, width=width)
    if memory is not None:
        lines += ["", wrap_text(MEMORY_NOTE + ":", width=width), memory]
    if result.observer is not None:
        lines += [
            "",
            wrap_text(
                "On a CUDA machine the table also shows, at each boundary, the pinned bytes the allocator owned "
                f"before {arrow} after the release and the bytes it released; {H200_FIGURES}.",
                width=width,
                indent="",
            ),
        ]
    count = len(result.calls)
    written = f"wrote {count} validated report{'' if count == 1 else 's'} to {result.report_path}"
    lines += ["", wrap_text(f"{written} (check: ddo-hooks summarize {result.report_path})", width=width)]
    return "\n".join(lines)
