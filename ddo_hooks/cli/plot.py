"""``ddo-hooks plot FILE... -o run.png``: pinned bytes and process RSS at each boundary, drawn.

From the ``host_cache_release`` reports of saved runs and their ``pinned_copy_repack`` report
(grouped into runs as ``summarize`` does: :func:`~ddo_hooks.cli.summarize.collect`), two
panels share one x axis, the records in order, grouped and labelled by call and boundary (the
repack at attach is labelled ``attach``, before the first call):

* the pinned bytes the allocator owned before and after each release
  (``setup.host_cache_release.before.allocated_bytes`` and ``.after.allocated_bytes``), with the
  bytes it gave back written where ``allocator_bytes_delta`` is positive;
* the process RSS before and after (``.host_before.rss_bytes`` and ``.host_after.rss_bytes``;
  in DDO's report, ``.process_rss_bytes``).

A release run on DDO's core (``core: ddo``) is DDO's report, whose row is
``ddo.host_cache_release``: the same readings, drawn the same way.

Where no release read anything (a CPU run: every release is a no-op), the process RSS that
actions observed at each boundary (``data.rss_bytes``, as the demo's ``ddo_demo.rss`` records) is
drawn alone, in one panel (:func:`~ddo_hooks.cli.plot_points.observed_points`).

Each run (each worker or rank) is a series of its own colour; an open marker is a value before
the boundary, a filled one after. Beyond :data:`MARKED_POSITIONS` boundaries, a few calls are
named and each kind of marker is one artist per series. Needs matplotlib (the ``plot`` extra),
drawn with the Agg backend (no display needed). What is drawn where: :mod:`~ddo_hooks.cli.plot_points`.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ddo_hooks.cli.cells import ATTACH_CALL, number_cell, size_cell
from ddo_hooks.cli.plot_points import Point, byte_unit, observed_points, positions, release_points, series_label
from ddo_hooks.cli.summarize import ReportSource, Run, collect
from ddo_hooks.cli.table import BoundaryRow
from ddo_hooks.errors import DdoHooksError, ReportError
from ddo_hooks.reports.atomic_file import replace_with_bytes

__all__ = ["MARKED_POSITIONS", "NOTHING_TO_DRAW", "PLOT_INSTALL", "draw_runs"]

PLOT_INSTALL = "pip install 'matplotlib>=3.8' (the plot extra: pip install -e '.[plot]' in a checkout)"
"""The command that installs what ``ddo-hooks plot`` needs."""

_MINUS = "\N{MINUS SIGN}"
_SHIFT = 0.18  # how far before and after values sit left and right of their boundary's position

MARKED_POSITIONS = 60
"""Up to this many positions on the x axis (about what the widest figure, 30 inches, holds apart), each is
labelled by its boundary, each call named and each release marked with what it gave back; beyond, the
axis names a few calls and the before and after markers alone show each release (one artist per series,
so that 30,000 releases draw in seconds)."""


def _matplotlib() -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise DdoHooksError(
            f"ddo-hooks plot needs matplotlib, which is not installed here; install it with: {PLOT_INSTALL}"
        ) from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


NOTHING_TO_DRAW = (
    "no report holds a reading of pinned bytes or of the process RSS, so there is nothing to plot; plot needs "
    "host_cache_release reports that read the allocator (a run on a CUDA machine), or an action's report that "
    "observed the RSS (data.rss_bytes, as ddo-hooks demo's ddo_demo.rss records at each boundary on a CPU; on a "
    "CPU-only torch every release is a no-op that observes nothing)"
)
"""Why ``plot`` refuses files, and what it would need."""


_PINNED_TITLE = "Pinned host memory the allocator owned, before and after each release (and repack)"
_RSS_TITLE = "Process RSS (resident memory), before and after each release (and repack)"
_OBSERVED_TITLE = "Process RSS (resident memory) the actions observed, before and after each boundary's actions"


def draw_runs(files: Iterable[ReportSource], out: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Draw the pinned bytes and the RSS of the runs in ``files`` into a PNG.

    Where no release read the allocator (a CPU run), the RSS the actions observed at each boundary
    is drawn alone (:func:`~ddo_hooks.cli.plot_points.observed_points`), and the title says that no pinned
    memory was read.

    Args:
        files: The report files (each read once).
        out: The image to write (PNG; replaced if it exists).
        title: The figure's title (default: says what is drawn and from how many runs).

    Returns:
        The path written.

    Raises:
        DdoHooksError: matplotlib is not installed (the message says how to install it).
        ReportError: No report holds a reading of pinned bytes or RSS (:data:`NOTHING_TO_DRAW`).
    """
    collected = collect(files)
    series = [(run, release_points(run)) for run in collected.runs]
    series = [(run, points) for run, points in series if points]
    observed = not series  # no release read anything: the RSS that actions observed, alone
    if observed:
        series = [(run, points) for run in collected.runs if (points := observed_points(run))]
    if not series:
        names = ", ".join(tally.path for tally in collected.files)
        raise ReportError(f"{names}: {NOTHING_TO_DRAW}")
    _refuse_undrawable(series)
    plt = _matplotlib()
    from matplotlib.lines import Line2D

    axis = positions([points for _, points in series])
    where = {key: x for x, key in enumerate(axis)}
    marked = len(axis) <= MARKED_POSITIONS
    width = min(max(9.0, 2.0 + 0.6 * len(axis)), 30.0)
    height = 5.0 if observed else 8.5
    specs: list[tuple[Callable[[BoundaryRow], tuple[int | None, int | None]], str]] = [
        (lambda r: (r.rss_before, r.rss_after), _OBSERVED_TITLE if observed else _RSS_TITLE)
    ]
    if not observed:
        specs.insert(0, (lambda r: (r.owned_before, r.owned_after), _PINNED_TITLE))
    fig, grid = plt.subplots(len(specs), 1, sharex=True, figsize=(width, height), squeeze=False)
    panels = list(grid[:, 0])
    pinned = None if observed else panels[0]
    colours = plt.get_cmap("tab10").colors
    rows_of = [[point.row for point in points] for _, points in series]
    readings = {ax: values for ax, (values, _) in zip(panels, specs, strict=True)}
    units = {
        ax: byte_unit(max((v for rows in rows_of for r in rows for v in values(r) if v is not None), default=0))
        for ax, values in readings.items()
    }
    several_hosts = len({host for run, _ in series for host in run.hosts}) > 1
    for index, (run, points) in enumerate(series):
        colour = colours[index % len(colours)]
        shift = (index - (len(series) - 1) / 2) * min(0.1, 0.3 / len(series))
        seen: dict[tuple[int, str], int] = {}
        xs: list[float] = []
        for point in points:
            n = seen[(point.call, point.boundary)] = seen.get((point.call, point.boundary), 0) + 1
            xs.append(where[(point.call, point.boundary, n)] + shift)
        rows = rows_of[index]
        label = series_label(run, hosts=several_hosts)
        for ax, values in readings.items():
            _trace(ax, xs, [values(r) for r in rows], colour, label if ax is panels[0] else None, units[ax][1], marked)
        if pinned is not None:
            _mark_releases(pinned, xs, rows, colour, index, units[pinned][1], marked)
    for ax, (_, what) in zip(panels, specs, strict=True):
        ax.set_title(what, fontsize=10, pad=18)
        ax.set_ylabel(units[ax][0])
        top = max((y for line in ax.get_lines() for y in line.get_ydata()), default=1.0)
        ax.set_ylim(0, top * 1.12 or 1.0)
        ax.grid(axis="y", alpha=0.3)
    _label_calls(panels[0], panels[-1], axis)
    markers = [
        Line2D([], [], color="0.3", marker="o", mfc="none", ls="none", label="before the boundary"),
        Line2D([], [], color="0.3", marker="o", ls="none", label="after the boundary"),
    ]
    if marked and pinned is not None:
        released = f"released ({_MINUS}bytes)"
        markers.append(Line2D([], [], color="0.3", marker=r"$\searrow$", ls="none", ms=10, label=released))
    handles = [*panels[0].get_legend_handles_labels()[0], *markers]
    columns = 2 if width < 14 else 3
    fig.legend(handles=handles, loc="lower center", ncol=columns, fontsize=8, frameon=False)
    count = f"{len(series)} run{'' if len(series) == 1 else 's'}"
    default = f"Pinned host memory and process RSS at each boundary ({count})"
    if observed:
        default = f"Process RSS at each boundary ({count}); no release read pinned memory (a CPU run pins none)"
    fig.suptitle(title or default)
    legend_rows = -(-len(handles) // columns)
    fig.tight_layout(rect=(0, (0.25 + 0.2 * legend_rows) / height, 1, 0.98))
    image = io.BytesIO()
    fig.savefig(image, dpi=110, format="png")
    plt.close(fig)
    return replace_with_bytes(out, image.getvalue())  # never through a link, never over a device


def _mark_releases(
    ax: Any, xs: Sequence[float], rows: Sequence[BoundaryRow], colour: Any, index: int, unit: int, marked: bool
) -> None:
    """An arrow from before to after each release that gave bytes back, and how many (to :data:`MARKED_POSITIONS`)."""
    if not marked:
        return
    for x, row in zip(xs, rows, strict=True):
        if row.delta is None or row.delta <= 0 or row.owned_before is None or row.owned_after is None:
            continue
        ax.annotate(
            "",
            xy=(x + _SHIFT, row.owned_after / unit),
            xytext=(x - _SHIFT, row.owned_before / unit),
            arrowprops={"arrowstyle": "->", "color": colour, "lw": 1.2},
        )
        ax.annotate(
            f"{_MINUS}{size_cell(row.delta)}",
            xy=(x + _SHIFT, (row.owned_before + row.owned_after) / 2 / unit),
            xytext=(5, -11 * index),
            textcoords="offset points",
            fontsize=8,
            color=colour,
            va="center",
        )


def _refuse_undrawable(series: Sequence[tuple[Run, Sequence[Point]]]) -> None:
    """Refuse a reading beyond what a float holds (about 1.8e308 bytes: valid in a report, not on an axis)."""
    for run, points in series:
        for point in points:
            row = point.row
            for value in (row.owned_before, row.owned_after, row.rss_before, row.rss_after):
                if value is not None and value > sys.float_info.max:
                    where = f"{run.name}, call {number_cell(point.call)}, {point.boundary}"
                    raise ReportError(
                        f"{where}: {size_cell(value)} is too large to draw (more than a float holds); "
                        "ddo-hooks summarize shows it"
                    )


def _trace(
    ax: Any,
    xs: Sequence[float],
    pairs: Sequence[tuple[int | None, int | None]],
    colour: Any,
    label: str | None,
    unit: int,
    marked: bool,
) -> None:
    """One series: open markers before, filled after, a line through them in record order (three artists).

    Beyond :data:`MARKED_POSITIONS` (not ``marked``), smaller markers and no line.
    """
    line_x: list[float] = []
    line_y: list[float] = []
    ends: tuple[tuple[list[float], list[float]], tuple[list[float], list[float]]] = (([], []), ([], []))
    for x, pair in zip(xs, pairs, strict=True):
        for value, offset, (end_x, end_y) in zip(pair, (-_SHIFT, _SHIFT), ends, strict=True):
            if value is not None:
                line_x.append(x + offset)
                line_y.append(value / unit)
                end_x.append(x + offset)
                end_y.append(value / unit)
    (before_x, before_y), (after_x, after_y) = ends
    size = 6.0 if marked else 3.0
    ax.plot(before_x, before_y, marker="o", ms=size, mfc="white", color=colour, ls="none")
    if marked:
        ax.plot(after_x, after_y, marker="o", color=colour, ls="none")
        ax.plot(line_x, line_y, color=colour, lw=1.0, alpha=0.6, label=label)
    else:  # thousands of releases: a line through them would only fill the band the markers show
        ax.plot(after_x, after_y, marker="o", ms=size, color=colour, ls="none", label=label)


def _label_calls(top: Any, bottom: Any, axis: Sequence[tuple[int, str, int]]) -> None:
    """Tick labels name the boundaries; each call is labelled above the top panel, calls split by lines.

    Beyond :data:`MARKED_POSITIONS` positions, the ticks name at most 30 calls, at their first boundary.
    """
    from matplotlib.transforms import blended_transform_factory

    bottom.set_xlim(-0.6, len(axis) - 0.4)
    calls: dict[int, list[int]] = {}
    for x, (call, _, _) in enumerate(axis):
        calls.setdefault(call, []).append(x)
    if len(axis) > MARKED_POSITIONS:
        step = -(-len(calls) // 30)
        shown = list(calls.items())[::step]
        bottom.set_xticks([xs[0] for _, xs in shown])
        bottom.set_xticklabels([f"call {call}" for call, _ in shown], rotation=30, ha="right", fontsize=8)
        bottom.set_xlabel(f"{len(axis):,} boundaries of {len(calls):,} calls, in call order", fontsize=9)
        return
    bottom.set_xticks(range(len(axis)))
    bottom.set_xticklabels([boundary.replace("_", " ") for _, boundary, _ in axis], rotation=30, ha="right", fontsize=8)
    where = blended_transform_factory(top.transData, top.transAxes)
    for n, (call, xs) in enumerate(calls.items()):
        name = "attach" if call == ATTACH_CALL else f"call {call}"
        top.text(sum(xs) / len(xs), 1.01, name, transform=where, ha="center", va="bottom", fontsize=9)
        if n:
            for ax in (top, bottom):
                ax.axvline(xs[0] - 0.5, color="0.6", lw=0.8, ls="--")
