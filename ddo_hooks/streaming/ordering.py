"""Proof over a log that the ring's order would hold on a GPU: every read after its copy, every copy after the reads.

A GPU runs each stream in order, and orders two streams only where one waits for an event the other
recorded (the latest record issued before the wait; a wait for an event never recorded waits for
nothing). :func:`check_log` replays a :class:`~ddo_hooks.streaming.transport.LoggedTransport` log
under exactly that rule (a vector clock per stream) and names each place where the order is not
forced:

* ``read_before_copy``: a unit's compute may start before a copy of the bytes it reads finished
  (the compute stream did not wait for the unit's ``ready`` event);
* ``overwrite_before_read``: a copy (or a poison fill) into a range may start before the last
  compute that read the older bytes there finished (the copy stream did not wait for that unit's
  ``consumed`` event);
* ``never_copied``: a compute read bytes no copy wrote.

A ``drain`` entry is the host waiting for a stream: whatever is issued after it, on any stream, comes
after everything issued on that stream before it.

These are the bugs the overlapping offloaders of vLLM and ComfyUI shipped (a wrap-around copy over a
buffer still in use; a missing stream edge): the copies in the log ran at once, so the outputs were
right on the CPU, and only the order says whether they would be on a GPU.

Examples:
    >>> log = [("copy", "copy", 1, (0, 64)), ("record", "copy", 0), ("wait", "compute", 0),
    ...        ("read", "compute", 1, ((0, 64),), False), ("read", "compute", 1, ((0, 64),), True)]
    >>> check_log(log)
    []
    >>> [v.kind for v in check_log([entry for entry in log if entry[0] != "wait"])]
    ['read_before_copy']
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Violation", "check_log"]

_BLOCK = 512  # ranges are indexed by 512-byte block, the ring's alignment


@dataclass(frozen=True)
class Violation:
    """One place where the log does not force the order."""

    kind: Literal["read_before_copy", "overwrite_before_read", "never_copied"]
    detail: str


@dataclass
class _Op:
    stream: str
    index: int  # its position on its stream, from 1
    clock: dict[str, int]  # what it happens after: the last position of each stream
    at: int  # its position in the log


@dataclass
class _Write:
    op: _Op
    load: int | None  # None: a poison fill
    span: tuple[int, int]


@dataclass
class _Read:
    begin: _Op
    end: _Op | None
    load: int
    ranges: tuple[tuple[int, int], ...]


def _after(first: _Op, then: _Op) -> bool:
    """Whether ``then`` happens after ``first`` ends, on a GPU."""
    return then.clock.get(first.stream, 0) >= first.index


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _blocks(span: tuple[int, int]) -> range:
    return range(span[0] // _BLOCK, (span[1] - 1) // _BLOCK + 1) if span[1] > span[0] else range(0)


def _replay(log: Iterable[Sequence[Any]]) -> tuple[list[_Write], list[_Read]]:
    clocks: dict[str, dict[str, int]] = defaultdict(dict)
    recorded: dict[Any, dict[str, int]] = {}
    host: dict[str, int] = {}  # what the host waited for: everything issued after it comes after
    writes: list[_Write] = []
    open_reads: dict[tuple[str, int], _Read] = {}
    reads: list[_Read] = []
    for at, entry in enumerate(log):
        kind, stream = entry[0], entry[1]
        if kind == "drain":  # the host waited for every op issued on that stream so far
            host[stream] = max(host.get(stream, 0), clocks[stream].get(stream, 0))
            continue
        clock = clocks[stream]
        for other, position in host.items():
            clock[other] = max(clock.get(other, 0), position)
        if kind == "wait" and entry[2] in recorded:
            for other, position in recorded[entry[2]].items():
                clock[other] = max(clock.get(other, 0), position)
        clock[stream] = clock.get(stream, 0) + 1
        op = _Op(stream, clock[stream], dict(clock), at)
        if kind == "record":
            recorded[entry[2]] = dict(clock)
        elif kind == "copy":
            writes.append(_Write(op, entry[2], tuple(entry[3])))
        elif kind == "fill":
            writes.append(_Write(op, None, tuple(entry[2])))
        elif kind == "read":
            load, ranges, done = entry[2], tuple(tuple(r) for r in entry[3]), entry[4]
            if not done:
                read = _Read(op, None, load, ranges)
                open_reads[(stream, load)] = read
                reads.append(read)
            elif (stream, load) in open_reads:
                open_reads.pop((stream, load)).end = op
    return writes, reads


def check_log(log: Iterable[Sequence[Any]]) -> list[Violation]:
    """Every place where the logged order would not hold on a GPU (empty: it holds), in log order.

    Args:
        log: A :class:`~ddo_hooks.streaming.transport.LoggedTransport`'s ``log``.
    """
    writes, reads = _replay(log)
    by_block: dict[int, list[_Write]] = defaultdict(list)
    for write in writes:
        for block in _blocks(write.span):
            by_block[block].append(write)
    found: list[tuple[int, Violation]] = []
    for read in reads:
        near = {id(w): w for span in read.ranges for block in _blocks(span) for w in by_block[block]}
        touching = [w for w in near.values() if any(_overlap(w.span, span) for span in read.ranges)]
        producers = [w for w in touching if w.load == read.load and w.op.at < read.begin.at]
        where = f"load {read.load} read at log entry {read.begin.at}"
        if not producers:
            found.append((read.begin.at, Violation("never_copied", f"{where}: no copy wrote its bytes")))
            continue
        for producer in producers:
            if not _after(producer.op, read.begin):
                detail = f"{where} may start before its copy at entry {producer.op.at} finished"
                found.append((read.begin.at, Violation("read_before_copy", detail)))
        for other in touching:
            if other.load == read.load:
                continue
            older = all(_after(other.op, p.op) for p in producers if _overlap(p.span, other.span))
            later = read.end is not None and _after(read.end, other.op)
            if not (older or later):
                what = "copy" if other.load is not None else "poison fill"
                detail = f"the {what} at entry {other.op.at} may overwrite {where} before it finished"
                found.append((other.op.at, Violation("overwrite_before_read", detail)))
    return [violation for _, violation in sorted(found, key=lambda pair: pair[0])]
