"""How long ``ddo-hooks`` takes to start, next to the interpreter's own start.

Runs each command in a fresh process, the commands interleaved, several times, and prints the
median and the spread (min-max) of each, and the median beyond ``python -c pass``. Targets,
beyond the interpreter's start: ``--help`` under 0.3 s (it imports no model: ``tests/test_layers.py``
checks what it imports), the file commands (``schema``, ``validate-policy``, ``validate-report``)
under 0.5 s.

Run: ``python benchmarks/bench_cli_startup.py [--repeats 7] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.5
"""The file commands' target, beyond the interpreter's start."""

HELP_TARGET_S = 0.3
"""``--help``'s target, beyond the interpreter's start."""


def commands(folder: Path) -> dict[str, list[str]]:
    from ddo_hooks import MetricsTracker, release_pytorch_host_cache

    tracker = MetricsTracker()
    tracker.record(release_pytorch_host_cache(phase="after_call"), component="host_cache_after_call")
    reports = tracker.write_jsonl(folder / "run.jsonl")
    policy = Path(__file__).resolve().parent.parent / "examples" / "after-call-only.yaml"
    cli = [sys.executable, "-m", "ddo_hooks"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "ddo-hooks --help": [*cli, "--help"],
        "ddo-hooks schema report": [*cli, "schema", "report"],
        "ddo-hooks validate-policy": [*cli, "validate-policy", str(policy)],
        "ddo-hooks validate-report": [*cli, "validate-report", str(reports)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        runs = commands(Path(folder))
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, argv in runs.items():  # interleaved: one of each per round
                start = time.perf_counter()
                subprocess.run(argv, check=True, capture_output=True)
                times[name].append(time.perf_counter() - start)
    base = statistics.median(times["python -c pass"])
    print(f"{'command':<28} {'median s':>9} {'min-max s':>13} {'beyond python s':>16}  target")
    results = {}
    for name, values in times.items():
        median = statistics.median(values)
        beyond = median - base
        target = HELP_TARGET_S if name == "ddo-hooks --help" else TARGET_S
        verdict = "" if name == "python -c pass" else ("met" if beyond < target else "not met")
        print(f"{name:<28} {median:9.3f} {min(values):6.3f}-{max(values):6.3f} {beyond:16.3f}  {verdict}")
        results[name] = {"median_s": median, "min_s": min(values), "max_s": max(values), "beyond_python_s": beyond}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_cli_startup.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
