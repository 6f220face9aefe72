"""``ddo-hooks summarize FILE...``: saved runs as tables, one per run, then totals.

Each file is one worker's (or one rank's) report file. Records carry an envelope (run id, call,
boundary, time, process, host, rank): records of one run (one attachment in one process) are
grouped by their run id and pid (a process forked after attach recorded its parent's run id: its
records are a run of their own), numbered by the envelope's call index, and headed with the run
id's first 8 characters, the host, the pid and the rank when known. Records without an envelope (files written before
envelopes existed) form one group per file whose calls are inferred from the boundary order
(:func:`~ddo_hooks.cli.table.infer_calls`), and the output says so. A record that appears twice
(the same run, call, boundary, component and time, e.g. in a policy's ``report_sink`` and in the
demo's file) is counted once.

After the tables come the totals per boundary across calls: per run, per rank (when ranks are
known) and in total (a group equal to one already shown is left out): counts by outcome, the
bytes released (the sum of the positive ``allocator_bytes_delta``), the total elapsed time, and
the bytes pinned between each boundary and the previous one with the time that took
(``pinned_since_previous``: what the releases cost in re-pinning). Each run's rows are tallied
once; the totals of a rank and of all runs add up their runs' tallies
(:mod:`~ddo_hooks.cli.totals`).

Each record is validated and reduced to its table row (:class:`~ddo_hooks.cli.rows.BoundaryRow`)
as it is read, so that 100,000 records cost their rows, not their reports.

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
    >>> runs[0].rows()[0].status
    'no-op: disabled'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import Any, Protocol

from ddo_hooks.cli.cells import ATTACH_CALL, number_cell
from ddo_hooks.cli.layout import TABLE_WIDTH, wrap_text
from ddo_hooks.cli.rows import BoundaryRow, numbered, row_of
from ddo_hooks.cli.table import MEMORY_NOTE, format_run_tables
from ddo_hooks.cli.totals import merged_tallies, tally_rows, totals_table
from ddo_hooks.reports.tracker import Entry

__all__ = [
    "Collected",
    "FileTally",
    "ReportSource",
    "Run",
    "collect",
    "collect_runs",
    "format_summary",
    "summary_lines",
]


class ReportSource(Protocol):
    """A report file as the commands read it.

    A :class:`~ddo_hooks.reports.files.ReportFile`, or an
    :class:`~ddo_hooks.reports.files.OpenReportFile`, whose records are validated as they are read.
    """

    path: str
    form: str

    @property
    def entries(self) -> Iterable[Entry]:
        """The records, read once."""


@dataclass
class Run:
    """The records of one run (one attachment in one process), or of one file's records without an envelope.

    Attributes:
        run_id: The envelope's run id; ``None`` for records without an envelope.
        pid: The process id (runs are told apart by run id and pid); ``None`` without an envelope.
        files: The files its records came from, in order.
        records: The table row of each record, in call order.
        hosts: The host names seen (one, normally).
        ranks: ``(rank, world_size)`` pairs seen; empty when not one of several processes.
        first_seen: The earliest record's time, when known.
        shared_id: Whether another process recorded the same run id (a process forked after
            attach): the run's name then says its pid.
    """

    run_id: str | None
    pid: int | None = None
    files: list[str] = field(default_factory=list)
    records: list[BoundaryRow] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    ranks: list[tuple[int | None, int | None]] = field(default_factory=list)
    first_seen: datetime | None = None
    shared_id: bool = False

    @property
    def inferred(self) -> bool:
        """Whether its calls were inferred from the boundary order (no envelope)."""
        return self.run_id is None

    @property
    def name(self) -> str:
        """``run 3f2a9c1e`` (``run 3f2a9c1e pid 4242`` when its id is shared), or ``FILE (no envelope)``."""
        if not self.run_id:
            return f"{self.files[0]} (no envelope)"
        return f"run {self.run_id[:8]}" + (f" pid {number_cell(self.pid)}" if self.shared_id else "")  # type: ignore[arg-type]  # a run read from envelopes carries their pid

    @property
    def rank(self) -> int | None:
        """The rank of its process, when known."""
        return self.ranks[0][0] if self.ranks else None

    def rank_text(self) -> str:
        """``rank 0 of 2``, ``rank 3``, ``world size 2`` or ``""``."""
        texts = []
        for rank, world in self.ranks:
            if rank is None:
                texts.append(f"world size {number_cell(world)}")  # type: ignore[arg-type]  # a rank unknown comes with a world size
            else:
                texts.append(f"rank {number_cell(rank)}" + ("" if world is None else f" of {number_cell(world)}"))
        return ", ".join(texts)

    def rows(self) -> list[BoundaryRow]:
        """Its table rows, in call order."""
        return self.records

    def heading(self, width: int = TABLE_WIDTH) -> str:
        """What the run's table is headed with (the host is shortened to fit ``width``)."""
        calls = len({row.call for row in self.records if row.call != ATTACH_CALL})
        at_attach = sum(row.call == ATTACH_CALL for row in self.records)
        count = f"{_plural(calls, 'call')}, {_plural(len(self.records), 'report')}"
        if at_attach:
            count += f" ({at_attach} at attach)"
        if self.inferred:
            return wrap_text(
                f"{self.files[0]}: records without an envelope (no run id, host, pid or rank), {count}; "
                "calls inferred from the boundary order",
                width=width,
            )
        parts = [] if self.pid is None else [f"pid {number_cell(self.pid)}"]
        if self.ranks:
            parts.append(self.rank_text())
        parts.append(count)
        rest = ", " + ", ".join(parts)
        host = ", ".join(self.hosts)
        name = f"run {self.run_id[:8]}"  # type: ignore[index]  # a run that is not inferred has an id
        room = width - len(f"{name}, host ") - len(rest)
        if len(host) > room:
            host = host[: max(room - 1, 8)] + "…"
        return wrap_text(f"{name}, host {host}{rest}", width=width)


@dataclass
class FileTally:
    """What one file held: its reports, those with an envelope, and the runs they belong to."""

    path: str
    form: str
    reports: int = 0
    with_envelope: int = 0
    runs: set[tuple[str, int]] = field(default_factory=set)


@dataclass
class Collected:
    """The runs of report files (see :func:`collect`)."""

    runs: list[Run]
    duplicates: int
    files: list[FileTally]


def collect(files: Iterable[ReportSource]) -> Collected:
    """Group the records of report files into runs, keeping each record's table row only.

    Args:
        files: The files (:func:`~ddo_hooks.reports.files.load_report_file` or
            :func:`~ddo_hooks.reports.files.open_report_file`), each read once, in order.

    Returns:
        The runs (ordered by rank when known, then by their first record's time; groups without
        an envelope last, in file order), how many duplicate records were left out (the same run,
        call, boundary, component, time and pid), and what each file held.
    """
    runs: dict[tuple[str, int], Run] = {}
    unlabelled: list[Run] = []
    tallies: list[FileTally] = []
    seen: set[tuple[Any, ...]] = set()
    strings: dict[str, str] = {}  # each text once across 100,000 rows
    duplicates = 0
    for loaded in files:
        tally = FileTally(loaded.path, loaded.form)
        tallies.append(tally)
        bare: list[BoundaryRow] = []
        origin: tuple[Any, ...] | None = None  # the previous record's run, pid, host and rank: most repeat it
        run: Run | None = None
        for component, report, envelope in loaded.entries:
            tally.reports += 1
            if envelope is None:
                bare.append(row_of(component, report, 0, strings))
                continue
            tally.with_envelope += 1
            run_id, pid, call, boundary = envelope.run_id, envelope.pid, envelope.call_index, envelope.boundary
            run_id, timestamp = strings.setdefault(run_id, run_id), envelope.timestamp
            unique = (
                run_id,
                pid,
                call,
                boundary if boundary is None else strings.setdefault(boundary, boundary),
                strings.setdefault(component, component),
                timestamp,
            )
            if unique in seen:
                duplicates += 1
                continue
            seen.add(unique)
            here = (run_id, pid, envelope.host, envelope.rank, envelope.world_size)
            if run is None or here != origin:
                run, origin = _run_of(runs, tally, loaded.path, here), here
            if run.first_seen is None or timestamp < run.first_seen:
                run.first_seen = timestamp
            run.records.append(row_of(component, report, call, strings))
        if bare:
            unlabelled.append(Run(None, files=[loaded.path], records=numbered(bare)))
    ordered = sorted(
        runs.values(),
        key=lambda run: (run.rank is None, run.rank or 0, run.first_seen.timestamp() if run.first_seen else 0.0),
    )
    processes: dict[str | None, int] = {}
    for run in ordered:
        run.records.sort(key=attrgetter("call"))  # stable: the recorded order within a call
        processes[run.run_id] = processes.get(run.run_id, 0) + 1
    for run in ordered:
        run.shared_id = processes[run.run_id] > 1
    return Collected([*ordered, *unlabelled], duplicates, tallies)


def _run_of(runs: dict[tuple[str, int], Run], tally: FileTally, path: str, origin: tuple[Any, ...]) -> Run:
    """The run of a record of ``path`` from ``origin`` (run id, pid, host, rank, world size), which it notes."""
    run_id, pid, host, rank, world_size = origin
    key = (run_id, pid)
    tally.runs.add(key)
    run = runs.get(key)
    if run is None:
        run = runs[key] = Run(run_id, pid)
    _add(run.files, path)
    _add(run.hosts, host)
    if rank is not None or world_size is not None:
        _add(run.ranks, (rank, world_size))
    return run


def collect_runs(files: Iterable[ReportSource]) -> tuple[list[Run], int]:
    """The runs of report files and how many duplicate records were left out (see :func:`collect`)."""
    collected = collect(files)
    return collected.runs, collected.duplicates


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _add(items: list[Any], item: Any) -> None:
    if item not in items:
        items.append(item)


def _file_line(tally: FileTally, width: int) -> str:
    text = f"{tally.path}: {_plural(tally.reports, 'report')} ({tally.form})"
    if tally.with_envelope:
        text += f" from {_plural(len(tally.runs), 'run')}"
    if tally.with_envelope < tally.reports:
        without = tally.reports - tally.with_envelope
        text += f"; {without} without an envelope (written before envelopes existed): calls inferred "
        text += "from the boundary order"
    return wrap_text(text, width=width)


def format_summary(files: Iterable[ReportSource], *, arrow: str = "→", width: int = TABLE_WIDTH) -> str:
    """The summary of report files: a line per file, a table per run, then the totals.

    Args:
        files: The files, in the order given (each read once).
        arrow: Between before and after values.
        width: The widest a line may be.

    Returns:
        The text, without a trailing newline.
    """
    return "\n".join(summary_lines(files, arrow=arrow, width=width))


def summary_lines(files: Iterable[ReportSource], *, arrow: str = "→", width: int = TABLE_WIDTH) -> Iterator[str]:
    """:func:`format_summary` a piece at a time (a piece may hold several lines), to print as it is made.

    Every file is read, and every record validated, before the first piece.
    """
    collected = collect(files)
    runs = collected.runs
    yield from (_file_line(tally, width) for tally in collected.files)
    if collected.duplicates:
        yield wrap_text(
            f"left out {_plural(collected.duplicates, 'record')} seen twice (the same run, call, "
            "boundary, component and time, e.g. a report_sink and a copy of it)",
            width=width,
        )
    for run_id, pids in _shared_ids(runs).items():
        yield wrap_text(
            f"{len(pids)} processes recorded run {run_id[:8]} (pids {', '.join(map(number_cell, pids))}; a process "
            "forked after attach keeps its parent's run id): each is shown as a run of its own",
            width=width,
        )
    for run in runs:
        table, memory = format_run_tables(run.records, arrow=arrow, width=width)
        yield from ("", run.heading(width), table)
        if memory is not None:
            yield from ("", wrap_text(MEMORY_NOTE + ":", width=width), memory)
    tallies = {id(run): tally_rows((0, row) for row in run.records) for run in runs}  # each run's rows once
    for heading, group in _total_groups(runs):
        totals = merged_tallies(tallies[id(run)] for run in group)
        yield from ("", wrap_text(heading, width=width), totals_table(totals, width=width))
    yield ""
    if any(row.call == ATTACH_CALL for run in runs for row in run.records):
        yield wrap_text(
            "attach: what attach() did before the first call (its pinned copies repacked, or pinned from their "
            "files); it is not a call, and not counted as one",
            width=width,
        )
    yield wrap_text(
        "released: the sum of the positive allocator_bytes_delta (bytes the allocator gave back); "
        "pinned since the previous: bytes pinned (the cost of a release: re-pinned) between the previous "
        "boundary and this one, and the time pinning took; refused includes the boundaries a call did "
        "not reach (not_reached)",
        width=width,
    )


def _shared_ids(runs: Sequence[Run]) -> dict[str, list[int]]:
    """The run ids that several processes recorded, with their pids."""
    pids: dict[str, list[int]] = {}
    for run in runs:
        if run.shared_id and run.run_id is not None and run.pid is not None:
            pids.setdefault(run.run_id, []).append(run.pid)
    return pids


def _total_groups(runs: Sequence[Run]) -> list[tuple[str, list[Run]]]:
    """The totals to show: per run, per rank, in total; a group equal to one shown earlier in priority is left out."""
    total = "totals per boundary across calls"
    groups: list[tuple[str, list[Run]]] = []
    shown = [frozenset(map(id, runs))]
    if len(runs) > 1:
        for run in runs:
            ranks_note = f" ({run.rank_text()})" if run.ranks else ""
            groups.append((f"{total}, {run.name}{ranks_note}:", [run]))
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
