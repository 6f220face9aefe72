"""What ``ddo-hooks plot`` draws of a run, and where: its points on the x axis, their byte units, its label.

:func:`release_points` are a run's release and repack reports that hold a reading; :func:`observed_points` the
process RSS the actions observed, for a run whose releases read nothing (a CPU run); :func:`positions` the x axis
that every series shares. :mod:`~ddo_hooks.cli.plot` draws them.

Examples:
    >>> from ddo_hooks.cli.table import BoundaryRow
    >>> row = BoundaryRow(2, "before_vae", "host_cache_release", "executed", None, "",
    ...                   owned_before=3 << 30, owned_after=1 << 20, delta=(3 << 30) - (1 << 20))
    >>> points = [Point(row.call, row.boundary, row)]
    >>> positions([points]), format_bytes_tick(3 << 30)
    ([(2, 'before_vae', 1)], '3.0 GiB')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ddo_hooks.actions.host_cache_release import NAME as HOST_CACHE_RELEASE
from ddo_hooks.boundaries import BOUNDARIES
from ddo_hooks.cli.summarize import Run
from ddo_hooks.cli.table import BoundaryRow
from ddo_hooks.reports.ddo.host import DDO_RELEASE_ACTION
from ddo_hooks.sizes import format_size

__all__ = ["Point", "byte_unit", "format_bytes_tick", "observed_points", "positions", "release_points", "series_label"]


@dataclass(frozen=True)
class Point:
    """One release report of a run, where it sits on the x axis."""

    call: int
    boundary: str
    row: BoundaryRow


_DRAWN = (HOST_CACHE_RELEASE, DDO_RELEASE_ACTION, "repack")
"""The reports drawn: each release (ddo_hooks' report, or DDO's under ``core: ddo``), and the repack of
pinned copies (at attach, before the first call)."""


def release_points(run: Run) -> list[Point]:
    """The run's release and repack reports that hold a reading (refusals hold none, a no-op at most the RSS).

    A no-op's one reading of the RSS is no release: it is drawn with what actions observed (``observed_points``).
    """
    found = []
    for row in run.rows():
        owned = row.owned_before is not None or row.owned_after is not None
        rss = row.rss_before is not None or row.rss_after is not None
        if row.action in _DRAWN and row.kind != "refused" and (owned or (rss and row.kind == "executed")):
            found.append(Point(row.call, row.boundary, row))
    return found


def _order(boundary: str) -> int:
    if boundary == "attach":  # the repack, before the first call's boundaries
        return -1
    return BOUNDARIES.index(boundary) if boundary in BOUNDARIES else len(BOUNDARIES)


def positions(series: Sequence[Sequence[Point]]) -> list[tuple[int, str, int]]:
    """The x axis: every ``(call, boundary, nth report there)`` of any series, in call and boundary order."""
    keys: set[tuple[int, str, int]] = set()
    for points in series:
        seen: dict[tuple[int, str], int] = {}
        for point in points:
            n = seen[(point.call, point.boundary)] = seen.get((point.call, point.boundary), 0) + 1
            keys.add((point.call, point.boundary, n))
    return sorted(keys, key=lambda key: (key[0], _order(key[1]), key[1], key[2]))


def format_bytes_tick(value: float, _position: object = None) -> str:
    """A byte count for people (``3.0 GiB``)."""
    return format_size(max(int(value), 0))


def byte_unit(largest: float) -> tuple[str, int]:
    """The binary unit an axis whose largest value is ``largest`` bytes is drawn in.

    Examples:
        >>> byte_unit(3.6 * 2**30), byte_unit(230 * 2**20), byte_unit(0)
        (('GiB', 1073741824), ('MiB', 1048576), ('KiB', 1024))
    """
    for name, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if largest >= size:
            return name, size
    return "KiB", 1 << 10


def series_label(run: Run, *, hosts: bool = True) -> str:
    """How a run is named in the legend: its id (or file), its rank and, when asked, its host (cut to 24)."""
    parts = [run.rank_text()] if run.ranks else []
    host = ", ".join(run.hosts)
    if hosts and host:
        parts.append(host if len(host) <= 24 else host[:23] + "…")
    name = run.name if run.run_id else Path(run.files[0]).name + " (no envelope)"
    return f"{name} ({'; '.join(parts)})" if parts else name


def observed_points(run: Run) -> list[Point]:
    """The process RSS that actions observed at each call and boundary: what a run that read no pinned bytes holds.

    A CPU run pins nothing, so its releases read nothing, but an action may observe the RSS there
    (``ddo-hooks demo``'s ``ddo_demo.rss`` records it at every boundary, ``malloc_trim`` before and
    after it trims). Per call and boundary: the first reading (before the boundary's actions) and
    the last (after them); one reading alone is the RSS after it.

    Examples:
        >>> from ddo_hooks.cli.table import BoundaryRow
        >>> rows = [BoundaryRow(1, "before_vae", "malloc_trim", "executed", None, "",
        ...                     rss_before=9, rss_after=7),
        ...         BoundaryRow(1, "before_vae", "ddo_demo.rss", "executed", None, "", rss_after=8)]
        >>> [(p.boundary, p.row.rss_before, p.row.rss_after)
        ...  for p in observed_points(Run("r", records=rows))]
        [('before_vae', 9, 8)]
    """
    readings: dict[tuple[int, str], list[int]] = {}
    for row in run.rows():
        if row.kind != "refused":
            values = [v for v in (row.rss_before, row.rss_after) if v is not None]
            if values:
                readings.setdefault((row.call, row.boundary), []).extend(values)
    return [
        Point(call, boundary, BoundaryRow(call, boundary, "observed", "executed", None, "", rss_before=(
            values[0] if len(values) > 1 else None), rss_after=values[-1]))
        for (call, boundary), values in readings.items()
    ]  # fmt: skip
