"""No test reads the clock: a loaded machine must not fail the suite (figures belong to benchmarks).

What a test must bound (hostile input), it bounds by size or by counting work; a wait for another
thread has a hang guard (``fakes.HANG_SECONDS``), which is not a measurement.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"perf_counter", "perf_counter_ns", "process_time", "process_time_ns", "monotonic", "monotonic_ns", "time",
          "time_ns", "thread_time", "thread_time_ns"}  # fmt: skip


def clock_reads(source: str) -> list[int]:
    """The lines of ``source`` that read a clock of the ``time`` module."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "time":
            lines += [node.lineno] if node.attr in CLOCKS else []
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            lines += [node.lineno] if any(alias.name in CLOCKS for alias in node.names) else []
    return lines


def test_the_checker_finds_clock_reads():
    assert clock_reads("import time\nstart = time.process_time()\n") == [2]
    assert clock_reads("from time import perf_counter\n") == [1]
    assert clock_reads("import time\ntime.sleep(0)\nthread.join(timeout=5)\n") == []


def test_no_test_reads_the_clock():
    found = {
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in clock_reads(path.read_text(encoding="utf-8"))
    }
    assert not found, f"tests that read the clock (bound by size or by counting work instead): {sorted(found)}"
