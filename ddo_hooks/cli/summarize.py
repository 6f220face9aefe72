"""``ddo-hooks summarize FILE...``: saved runs as tables, one per run, then totals.

Each file is one worker's (or one rank's) report file. Records carry an envelope (run id, call,
boundary, time, process, host, rank): records of one run (one attachment) are grouped by their
run id, numbered by the envelope's call index, and headed with the run id's first 8 characters,
the host, the pid and the rank when known. Records without an envelope (files written before
envelopes existed) form one group per file whose calls are inferred from the boundary order
(:func:`~ddo_hooks.cli.table.infer_calls`), and the output says so. A record that appears twice
(the same run, call, boundary, component and time, e.g. in a policy's ``report_sink`` and in the
demo's file) is counted once.

After the tables come the totals per boundary across calls: per run, per rank (when ranks are
known) and in total (a group equal to one already shown is left out): counts by outcome, the
bytes released (the sum of the positive ``allocator_bytes_delta``), the total elapsed time, and
the bytes pinned between each boundary and the previous one with the time that took
(``pinned_since_previous``: what the releases cost in re-pinning).

Examples:
    >>> from ddo_hooks import release_pytorch_host_cache
    >>> from ddo_hooks.reports.envelope import RecordEnvelope
    >>> from ddo_hooks.reports.files import ReportFile
    >>> from ddo_hooks.reports.tracker import Entry
    >>> envelope = RecordEnvelope.now(run_id="3f2a9c1e" + "0" * 24, call_index=1, boundary="after_call")
    >>> entry = Entry("host_cache_after_call", release_pytorch_host_cache(phase="after_call"), envelope)
    >>> runs, duplicates = collect_runs([ReportFile("run.jsonl", "JSON Lines", [entry, entry])])
    >>> len(runs), duplicates, runs[0].heading().split(", host")[0]
    (1, 1, 'run 3f2a9c1e')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ddo_hooks.cli.layout import TABLE_WIDTH, wrap_text
from ddo_hooks.cli.table import (
    MEMORY_NOTE,
    BoundaryRow,
    boundary_rows,
    format_memory_table,
    format_table,
    infer_calls,
    total_rows,
)
from ddo_hooks.reports.files import ReportFile

__all__ = ["Run", "collect_runs", "format_summary"]


@dataclass
class Run:
    """The records of one run (one attachment), or of one file's records without an envelope.

    Attributes:
        run_id: The envelope's run id; ``None`` for records without an envelope.
        files: The files its records came from, in order.
        records: ``(call, component, report)`` of each record, in call order.
        hosts: The host names seen (one, normally).
        pids: The process ids seen.
        ranks: ``(rank, world_size)`` pairs seen; empty when not one of several processes.
        first_seen: The earliest record's time, when known.
    """

    run_id: str | None
    files: list[str] = field(default_factory=list)
    records: list[tuple[int, str | None, Any]] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    ranks: list[tuple[int | None, int | None]] = field(default_factory=list)
    first_seen: datetime | None = None

    @property
    def inferred(self) -> bool:
        """Whether its calls were inferred from the boundary order (no envelope)."""
        return self.run_id is None

    @property
    def name(self) -> str:
        """``run 3f2a9c1e``, or ``FILE (no envelope)``."""
        return f"run {self.run_id[:8]}" if self.run_id else f"{self.files[0]} (no envelope)"

    @property
    def rank(self) -> int | None:
        """The rank of its process, when known."""
        return self.ranks[0][0] if self.ranks else None

    def rank_text(self) -> str:
        """``rank 0 of 2``, ``rank 3``, ``world size 2`` or ``""``."""
        texts = []
        for rank, world in self.ranks:
            if rank is None:
                texts.append(f"world size {world}")
            else:
                texts.append(f"rank {rank}" + ("" if world is None else f" of {world}"))
        return ", ".join(texts)

    def rows(self) -> list[BoundaryRow]:
        """Its table rows."""
        return boundary_rows([(c, r) for _, c, r in self.records], [call for call, _, _ in self.records])

    def heading(self, width: int = TABLE_WIDTH) -> str:
        """What the run's table is headed with (the host is shortened to fit ``width``)."""
        count = f"{_plural(len({call for call, _, _ in self.records}), 'call')}, {_plural(len(self.records), 'report')}"
        if self.inferred:
            return wrap_text(
                f"{self.files[0]}: records without an envelope (no run id, host, pid or rank), {count}; "
                "calls inferred from the boundary order",
                width=width,
            )
        parts = [f"pid {', '.join(map(str, self.pids))}"] if self.pids else []
        if self.ranks:
            parts.append(self.rank_text())
        parts.append(count)
        rest = ", " + ", ".join(parts)
        host = ", ".join(self.hosts)
        room = width - len(f"{self.name}, host ") - len(rest)
        if len(host) > room:
            host = host[: max(room - 1, 8)] + "…"
        return f"{self.name}, host {host}{rest}"


def collect_runs(files: Sequence[ReportFile]) -> tuple[list[Run], int]:
    """Group the records of report files into runs.

    Args:
        files: The loaded files (:func:`~ddo_hooks.reports.files.load_report_file`).

    Returns:
        The runs (ordered by rank when known, then by their first record's time; groups without
        an envelope last, in file order) and how many duplicate records were left out.
    """
    runs: dict[str, Run] = {}
    unlabelled: list[Run] = []
    seen: set[tuple[Any, ...]] = set()
    duplicates = 0
    for loaded in files:
        bare: list[tuple[str | None, Any]] = []
        for component, report, envelope in loaded.entries:
            if envelope is None:
                bare.append((component, report))
                continue
            key = (envelope.run_id, envelope.call_index, envelope.boundary, component, envelope.timestamp, envelope.pid)
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            run = runs.setdefault(envelope.run_id, Run(envelope.run_id))
            _add(run.files, loaded.path)
            _add(run.hosts, envelope.host)
            _add(run.pids, envelope.pid)
            if envelope.rank is not None or envelope.world_size is not None:
                _add(run.ranks, (envelope.rank, envelope.world_size))
            if run.first_seen is None or envelope.timestamp < run.first_seen:
                run.first_seen = envelope.timestamp
            run.records.append((envelope.call_index, component, report))
        if bare:
            calls = infer_calls(bare)
            records = [(call, c, r) for call, (c, r) in zip(calls, bare, strict=True)]
            unlabelled.append(Run(None, files=[loaded.path], records=records))
    ordered = sorted(
        runs.values(),
        key=lambda run: (run.rank is None, run.rank or 0, run.first_seen.timestamp() if run.first_seen else 0.0),
    )
    for run in ordered:
        run.records.sort(key=lambda record: record[0])  # stable: the recorded order within a call
    return [*ordered, *unlabelled], duplicates


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _add(items: list[Any], item: Any) -> None:
    if item not in items:
        items.append(item)


def _file_line(loaded: ReportFile, runs: Sequence[Run], width: int) -> str:
    count = len(loaded.entries)
    with_envelope = sum(entry.envelope is not None for entry in loaded.entries)
    text = f"{loaded.path}: {_plural(count, 'report')} ({loaded.form})"
    if with_envelope:
        ids = {run.run_id for run in runs if run.run_id and loaded.path in run.files}
        text += f" from {_plural(len(ids), 'run')}"
    if with_envelope < count:
        text += f"; {count - with_envelope} without an envelope (written before envelopes existed): calls inferred "
        text += "from the boundary order"
    return wrap_text(text, width=width)


def format_summary(files: Sequence[ReportFile], *, arrow: str = "→", width: int = TABLE_WIDTH) -> str:
    """The summary of report files: a line per file, a table per run, then the totals.

    Args:
        files: The loaded files, in the order given.
        arrow: Between before and after values.
        width: The widest a line may be.

    Returns:
        The text, without a trailing newline.
    """
    runs, duplicates = collect_runs(files)
    lines = [_file_line(loaded, runs, width) for loaded in files]
    if duplicates:
        lines.append(
            wrap_text(
                f"left out {_plural(duplicates, 'record')} seen twice (the same run, call, "
                "boundary, component and time, e.g. a report_sink and a copy of it)",
                width=width,
            )
        )
    rows = {id(run): run.rows() for run in runs}
    for run in runs:
        lines += ["", run.heading(width), format_table(rows[id(run)], arrow=arrow, width=width)]
        if (memory := format_memory_table(rows[id(run)], width=width)) is not None:
            lines += ["", wrap_text(MEMORY_NOTE + ":", width=width), memory]
    for heading, group in _total_groups(runs):
        pairs = [(id(run), row) for run in group for row in rows[id(run)]]
        lines += ["", heading, total_rows(pairs, width=width)]
    lines += [
        "",
        wrap_text(
            "released: the sum of the positive allocator_bytes_delta (bytes the allocator gave back); "
            "pinned since the previous: bytes pinned (the cost of a release: re-pinned) between the previous "
            "boundary and this one, and the time pinning took; refused includes the boundaries a call did "
            "not reach (not_reached)",
            width=width,
        ),
    ]
    return "\n".join(lines)


def _total_groups(runs: Sequence[Run]) -> list[tuple[str, list[Run]]]:
    """The totals to show: per run, per rank, in total; a group equal to one shown earlier in priority is left out."""
    total = "totals per boundary across calls"
    groups: list[tuple[str, list[Run]]] = []
    shown = [frozenset(map(id, runs))]
    if len(runs) > 1:
        for run in runs:
            rank = f" ({run.rank_text()})" if run.ranks else ""
            groups.append((f"{total}, {run.name}{rank}:", [run]))
            shown.append(frozenset([id(run)]))
    ranks: dict[int, list[Run]] = {}
    for run in runs:
        if run.rank is not None:
            ranks.setdefault(run.rank, []).append(run)
    for rank, members in sorted(ranks.items()):
        if frozenset(map(id, members)) not in shown:
            groups.append((f"{total}, rank {rank} ({len(members)} runs):", members))
    everything = f"{total}:" if len(runs) == 1 else f"{total}, all {len(runs)} runs:"
    return [*groups, (everything, list(runs))]
