"""A long, seeded fuzz campaign of the policy loader, the report parser and the file commands.

    python scripts/fuzz_campaign.py [--policies 100000] [--reports 60000] [--files 2000] [--seed 0]

Prints, per target, how many inputs were tried, accepted, rejected cleanly (a ddo_hooks error)
and escaped (any other exception, or a !!python tag honoured: must be 0), and the slowest input
in seconds. Exits 1 if anything escaped. The inputs come from tests/support/fuzz_inputs.py and
tests/support/report_corpus.py (the same generators the suite's fuzz tests use), driven by
random.Random(seed) instead of hypothesis, so a run of 100,000 documents takes minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.fuzz_inputs import mutate_json_text, random_policy_text  # noqa: E402
from support.report_corpus import base_reports, corpus, random_mutant  # noqa: E402

from ddo_hooks import HookPolicy, parse_report  # noqa: E402
from ddo_hooks.cli import main  # noqa: E402
from ddo_hooks.errors import DdoHooksError  # noqa: E402
from ddo_hooks.reports.files import load_report_file  # noqa: E402


class _Refused(DdoHooksError):
    """A file command exited 1 with its message (a clean refusal)."""


class Tally:
    """Counts of one target."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tried = self.accepted = self.rejected = self.escaped = 0
        self.slowest = 0.0
        self.slowest_input = ""
        self.first_escape = ""

    def run(self, call: Callable[[], Any], shown: str) -> None:
        self.tried += 1
        start = time.perf_counter()
        try:
            call()
            self.accepted += 1
        except DdoHooksError:
            self.rejected += 1
        except Exception:
            self.escaped += 1
            self.first_escape = self.first_escape or f"{shown[:300]!r}\n{traceback.format_exc(limit=4)}"
        elapsed = time.perf_counter() - start
        if "fuzz_sentinel" in sys.modules:
            self.escaped += 1
            self.first_escape = self.first_escape or f"a !!python tag was honoured: {shown[:300]!r}"
            del sys.modules["fuzz_sentinel"]
        if elapsed > self.slowest:
            self.slowest, self.slowest_input = elapsed, shown[:80]

    def line(self) -> str:
        return (
            f"{self.name:<24} tried {self.tried:>7,}  accepted {self.accepted:>7,}  rejected cleanly "
            f"{self.rejected:>7,}  escaped {self.escaped}  slowest input {self.slowest:.3f} s"
        )


def report_inputs(rng: random.Random, count: int) -> Iterator[Any]:
    """Every single mutation of the real reports first, then random multiple mutations and broken JSON text."""
    bases = base_reports()
    fixed = corpus()
    yield from fixed[:count]
    for n in range(max(count - len(fixed), 0)):
        base = rng.choice(bases)
        yield mutate_json_text(rng, base) if n % 3 == 0 else random_mutant(rng, base, changes=4)


def cli_call(command: str, path: Path) -> Callable[[], None]:
    def call() -> None:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            status = main([command, str(path)])
        if status not in (0, 1) or "Traceback" in err.getvalue():
            raise AssertionError(f"{command} exited {status}: {err.getvalue()[:300]}")
        if status == 1:
            raise _Refused(err.getvalue())

    return call


def main_campaign(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", type=int, default=100_000, help="policy documents to try")
    parser.add_argument("--reports", type=int, default=60_000, help="report documents to try")
    parser.add_argument("--files", type=int, default=2_000, help="files for each file command")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    started = time.process_time()
    policies, reports, report_text = (
        Tally("HookPolicy.from_yaml_text"),
        Tally("parse_report"),
        Tally("parse_report(JSON)"),
    )
    files, validate_policy, validate_report = (
        Tally("load_report_file"),
        Tally("validate-policy"),
        Tally("validate-report"),
    )

    for _ in range(args.policies):
        text = random_policy_text(rng)
        policies.run(lambda text=text: HookPolicy.from_yaml_text(text), text)
    for document in report_inputs(rng, args.reports):
        if isinstance(document, str):
            report_text.run(lambda document=document: parse_report(document), document)
        else:
            reports.run(lambda document=document: parse_report(document), json.dumps(document)[:300])
    bases = base_reports()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input"
        for n in range(args.files):
            if n % 2:
                lines = [json.dumps({"component": "c", "report": random_mutant(rng, rng.choice(bases))})]
                lines += [mutate_json_text(rng, rng.choice(bases)) for _ in range(rng.randint(0, 2))]
                text = "\n".join(lines)
            else:
                text = random_policy_text(rng)
            path.write_bytes(text.encode("utf-8", "surrogatepass"))
            files.run(lambda: load_report_file(path), text)
            validate_policy.run(cli_call("validate-policy", path), text)
            validate_report.run(cli_call("validate-report", path), text)

    tallies = [policies, reports, report_text, files, validate_policy, validate_report]
    for tally in tallies:
        print(tally.line())
    total = sum(t.tried for t in tallies)
    escaped = sum(t.escaped for t in tallies)
    slowest = max(tallies, key=lambda t: t.slowest)
    print(f"{'all':<24} tried {total:>7,}  escaped {escaped}  slowest input {slowest.slowest:.3f} s "
          f"({slowest.name}: {slowest.slowest_input!r})")  # fmt: skip
    print(f"CPU time {time.process_time() - started:.0f} s, seed {args.seed}")
    for tally in tallies:
        if tally.first_escape:
            print(f"\nfirst escape of {tally.name}:\n{tally.first_escape}")
    return 1 if escaped else 0


if __name__ == "__main__":
    sys.exit(main_campaign())
