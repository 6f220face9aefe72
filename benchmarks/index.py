"""The map of ``benchmarks/``: each results file, the script and command that made it, when, and what uses it.

No ``bench_`` prefix: it is no benchmark. It reads every file of ``benchmarks/results/`` (the command it records,
``command``, or ``commands`` for a run resumed over several calls; else the options it records; a date it records,
``started_at``), the day the git commit that added each file was authored (``git log --diff-filter=A``), each
script's module docstring and the steps of ``scripts/gpu_session.sh`` that run it, and every mention of a results
file in ``docs/``, ``README.md``, ``benchmarks/*.py`` and ``tests/`` (``index_uses.py``), and writes
``docs/benchmark-results.md`` (the scripts, and the files no page names) and the pages of the results files
(:data:`FILES_PAGES`: ``bench_box.py``'s on one, every other script's on another, so that no page is longer
than a reader scrolls). The few facts the files cannot give are the tables below (:data:`MADE_BY`,
:data:`OPTION_KEYS`, :data:`UNNAMED`, :data:`SHAPE_NOTES`, :data:`LEFTOVERS`), each held true by the test.
``tests/test_benchmark_index.py`` regenerates the pages and compares them with the checked-in ones.

Run: ``python benchmarks/index.py`` (writes the pages; ``--check``: exit 1 where one differs, writing nothing).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import index_uses
from index_scripts import first_sentence, gpu_steps, scripts
from index_uses import Section

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
PAGE = ROOT / "docs" / "benchmark-results.md"
FILES_PAGES = {
    "bench_box.py": (ROOT / "docs" / "benchmark-results-box.md", "Benchmark results: the box's runs"),
    None: (ROOT / "docs" / "benchmark-results-files.md", "Benchmark results: every other script's runs"),
}
"""The pages of the results files: a script's own page and title, or (``None``) the page of every other script."""
PAGES = (PAGE, *(page for page, _ in FILES_PAGES.values()))
ARROW = "\u203a"  # between a page's title and its section's heading
MAP_FILES = {
    *(BENCH / f"index{part}.py" for part in ("", "_scripts", "_uses")),
    ROOT / "tests" / "test_benchmark_index.py",
    *PAGES,
}

GPU_SESSION = "scripts/gpu_session.sh"
MADE_BY = {
    "gpu-suite-h200.log": (GPU_SESSION, "the `gpu-suite` step (pytest-xdist: the log opens with `bringing up nodes`)"),
    "gpu-tests-from-files-h200.log": (
        GPU_SESSION,
        "the `tests` step, `GPU_TESTS` the tests of `tests/gpu/test_from_files_gpu.py` (`-s`: the captured JSON "
        "leads the log)",
    ),
    "gpu-ring-tests-h100.log": (
        GPU_SESSION,
        "the `ring` step, `RING_PARTS=tests`: `tests/gpu/test_ring_gpu.py` (`-s`: each scenario's JSON leads its "
        "result)",
    ),
    "gpu-ring-tests-h100-2.log": (
        GPU_SESSION,
        'the `ring` step, `RING_PARTS="tests timeline"`, on the code of 2026-12-08: `tests/gpu/test_ring_gpu.py`',
    ),
    "gpu-suite-h100.log": (GPU_SESSION, "the `gpu-suite` step, on the code of 2026-12-08 (one H100: two tests skip)"),
}
"""Results files whose name starts with no script's: what made them, read from the log's form and its commit."""
OPTION_KEYS = {
    "bench_census.py": ("gib", "reps"),
    "bench_cli_scale.py": ("repeats", "timeout_s", "per_file", "commit"),
    "bench_hook_overhead.py": ("family", "steps", "repeats"),
    "bench_latency.py": ("arms",),
    "bench_repack_forward.py": ("reps",),
    "bench_soak.py": ("calls", "family", "sink"),
    "probe_onload.py": ("folder", "reps"),
}
"""The top-level keys that hold a run's options, for the scripts that record no command and no ``args``."""
NOTE_KEYS = ("note", "sessions", "runs")
"""Top-level keys whose text says how a file was put together (a string, or a mapping of strings)."""
UNNAMED = {
    "bench_census.json": ("benchmarks-costs.md", "Counting resident file pages"),
    "bench_cli_scale-*.json": ("benchmarks-cli.md", "Reading many saved records: `summarize` and `plot`"),
    "bench_hook_overhead-run*.json": ("benchmarks-costs.md", "Hook overhead"),
    "bench_repack_forward.json": ("benchmarks-pinned-floor.md", "Call time with repacked copies"),
}
"""Results files no page names whose figures a section shows all the same (read against the files)."""
SHAPE_NOTES = {
    ("bench_box.py", "setup"): "`bench_box.py` writes it since commit 6587a3b; the runs before that lack it.",
    ("bench_box.py", "commands"): "a run resumed over several calls (`--resume`) lists each call's command, since "
    "commit 6587a3b.",
    ("bench_box.py", "resumed"): "what `--resume` wrote from commit 609353e until `commands` replaced it in 6587a3b.",
    ("bench_box.py", "seconds"): "written at a run's end, and its arms as each finishes; that run was cut off before "
    "its end.",
    ("bench_done_components.py", "runs"): "that file was joined by hand from two device calls; its `runs` says which "
    "part came from which.",
    ("bench_latency.py", "arms"): "that file joins the extras of several sessions by hand (its `sessions` says "
    "which); a run of the script writes `arms` and `summary` (and `extras` with `--extras`).",
    ("bench_pinned_floor.py", "args"): "that file holds the arms that came back of a run cut off at the device "
    "call's time limit, put together by hand (its `note`).",
}
"""Why a script's files differ in a top-level key, where the files alone cannot say (read in git and the code).

A key that differs in the same files as one named here (``summary`` beside ``arms``) shares its note."""
LEFTOVERS = {
    "gpu-tests-from-files-h200.log": "superseded: `gpu-suite-h200.log` ran these four tests again, with the whole "
    "GPU suite",
}
"""Results files nothing uses any more, kept as they were: why."""


@dataclass
class Record:
    """One results file as the page shows it."""

    name: str
    script: str
    commands: list[str]
    options: list[str]  # ``key=value`` the file records instead of a command
    notes: list[str]  # what the file says of how it was put together
    date: str
    date_key: str | None  # the file's key the date comes from; None: git
    keys: tuple[str, ...] | None  # its top-level keys; None: not JSON


def script_of(name: str, stems: list[str]) -> str:
    """The script that made a results file: the longest script name its name starts with, or :data:`MADE_BY`.

    Examples:
        >>> script_of("bench_box-timing-10.json", ["bench_box.py", "box_workload.py"])
        'bench_box.py'
        >>> script_of("gpu-suite-h200.log", ["bench_box.py"])
        'scripts/gpu_session.sh'
        >>> script_of("elsewhere.json", ["bench_box.py"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: benchmarks/results/elsewhere.json: no script's name starts it and MADE_BY does not name it: ...
    """
    matches = [s for s in stems if name.startswith((f"{s.removesuffix('.py')}-", f"{s.removesuffix('.py')}."))]
    if matches:
        return max(matches, key=len)
    if name in MADE_BY:
        return MADE_BY[name][0]
    raise ValueError(
        f"benchmarks/results/{name}: no script's name starts it and MADE_BY does not name it: name it "
        "<script>-<run>.json after the script that made it, or add it to MADE_BY in benchmarks/index.py"
    )


def git_added() -> dict[str, str]:
    """Each results file's day: that of the git commit that added it (its last add), as authored."""
    log = subprocess.run(
        ["git", "log", "--diff-filter=A", "--no-renames", "--format=>%ad", "--date=short", "--name-only", "--",
         "benchmarks/results"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    commits = [block.split("\n") for block in log.split(">")[1:]]
    found: dict[str, str] = {}
    for date, *paths in reversed(commits):
        for path in filter(None, paths):
            found[Path(path).name] = date.strip()
    return found


def load(name: str) -> dict[str, Any]:
    """A JSON results file's top level (ValueError naming the file and line where it is no JSON object)."""
    path = RESULTS / name
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(
            f"benchmarks/results/{name}, line {error.lineno}: not JSON ({error.msg}): a results file named .json "
            "holds what its script wrote; give a log another extension"
        ) from error
    if not isinstance(doc, dict):
        raise ValueError(f"benchmarks/results/{name}: its top level is a {type(doc).__name__}, not an object")
    return doc


def _value(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def record(name: str, script: str, added: dict[str, str]) -> Record:
    """A results file read the same way whatever its script's shape (the normalizing step)."""
    date = added.get(name, "not committed yet")
    if not name.endswith(".json"):
        return Record(name, script, [], [], [], date, None, None)
    doc = load(name)
    commands = doc.get("commands") or ([doc["command"]] if "command" in doc else [])
    options = [f"{k}={_value(doc[k])}" for k in OPTION_KEYS.get(script, ()) if k in doc]
    notes = []
    for key in NOTE_KEYS:
        value = doc.get(key)
        texts = [value] if isinstance(value, str) else list(value.values()) if isinstance(value, dict) else []
        notes += [f"`{key}`: “{text}”" for text in texts if isinstance(text, str)]
    date_key = "started_at" if "started_at" in doc else None
    if date_key:
        date = doc[date_key][:10]
    return Record(name, script, commands, options, notes, date, date_key, tuple(doc))


def records() -> list[Record]:
    """Every results file, in its script's order, each ``args`` shown where it differs between the script's files."""
    stems, added = list(scripts(BENCH)), git_added()
    found = [record(p.name, script_of(p.name, stems), added) for p in sorted(RESULTS.iterdir()) if p.is_file()]
    by_script: dict[str, list[Record]] = {}
    for rec in found:
        by_script.setdefault(rec.script, []).append(rec)
    for group in by_script.values():
        args = {r.name: load(r.name)["args"] for r in group if "args" in (r.keys or ())}
        varying = [
            k for k in dict.fromkeys(k for a in args.values() for k in a) if len({a.get(k) for a in args.values()}) > 1
        ]
        for r in group:
            if r.name in args:
                r.options.extend(f"{k}={args[r.name].get(k)}" for k in varying)
    return found


def differing(files: list[Record]) -> dict[frozenset[str], list[str]]:
    """The top-level keys not every file of a script has, grouped by the files that have them."""
    groups: dict[frozenset[str], list[str]] = {}
    for key in dict.fromkeys(k for r in files for k in r.keys or ()):
        having = frozenset(r.name for r in files if key in (r.keys or ()))
        if len(having) < len(files):
            groups.setdefault(having, []).append(key)
    return groups


def shape(group: list[Record]) -> str:
    """What top-level keys a script's JSON files share, which files lack or alone hold the others, and why."""
    files = [r for r in group if r.keys is not None]
    if not files:
        return "Its results are logs (text)."
    common = [k for k in files[0].keys or () if all(k in (r.keys or ()) for r in files)]
    said = ", ".join(f"`{k}`" for k in common)
    if len(files) == 1:
        return f"Top-level keys: {said}."
    parts = []
    for having, keys in differing(files).items():
        named = " and ".join(", ".join(f"`{k}`" for k in keys).rsplit(", ", 1))
        if len(having) <= len(files) - len(having):
            part = f"{named} only in {_names([r for r in files if r.name in having])}"
        else:
            part = f"{named} not in {_names([r for r in files if r.name not in having])}"
        notes = [SHAPE_NOTES[(group[0].script, k)] for k in keys if (group[0].script, k) in SHAPE_NOTES]
        parts.append(f"- {part}: {notes[0]}" if notes else f"- {part}.")
    if not parts:
        return f"Top-level keys: each of its {len(files)} files has {said}."
    return "\n".join([f"Top-level keys: each of its {len(files)} files has {said}; the others:", "", *parts])


def _names(group: list[Record]) -> str:
    return ", ".join(f"`{r.name}`" for r in group)


def unnamed_sections(name: str) -> list[Section]:
    """The sections :data:`UNNAMED` says show a file's figures without naming it."""
    return [index_uses.section_of(ROOT, page, heading) for pattern, (page, heading) in UNNAMED.items()
            if fnmatch.fnmatch(name, pattern)]  # fmt: skip


def _link(section: Section) -> str:
    where = section.title if section.heading is None else f"{section.title} {ARROW} {section.heading}"
    if section.page == "README.md":
        return f"the README {ARROW} {section.heading}" if section.heading else "the README"
    return f"[{where}]({section.page}#{section.anchor})" if section.anchor else f"[{where}]({section.page})"


def used_by(rec: Record, sections: list[Section], code: list[str]) -> str:
    """The ``used by`` cell: the sections that name the file, or *used by no page*; then the code that names it."""
    parts = [", ".join(_link(s) for s in sections)] if sections else ["**used by no page**", *_unused(rec)]
    if code:
        parts.append("named in " + ", ".join(f"`{path}`" for path in code))
    return "; ".join(parts)


def _unused(rec: Record) -> list[str]:
    """What the page says of a file no page names: where its figures are all the same, or why it is left over."""
    said = [f"its figures are in {_link(s)}" for s in unnamed_sections(rec.name)]
    return said + ([f"a leftover, {LEFTOVERS[rec.name]}"] if rec.name in LEFTOVERS else [])


def command(rec: Record) -> str:
    """The ``command`` cell: the commands the file records, in order, or *not recorded* and what it holds instead."""
    if rec.commands:
        if len(rec.commands) == 1:
            return f"`{rec.commands[0]}`"
        return " ".join(f"({i}) `{c}`" for i, c in enumerate(rec.commands, start=1))
    said = "*not recorded*"
    if rec.name in MADE_BY:
        said += f"; made by {MADE_BY[rec.name][1]}"
    if rec.options:
        said += "; it records " + " ".join(f"`{o}`" for o in rec.options)
    if rec.notes:
        said += "; its " + "; its ".join(rec.notes)
    return said


FILES_INTRO = """\
Each results file ({files} here) with the command it records, when, and the sections of the docs that
name it. [Benchmark results](benchmark-results.md) says what each column holds and what each script is
for."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


INTRO = """\
# Benchmark results

Every file under `benchmarks/results/` ({files} of them), the script that made it and the command it
records, when, and the sections of the docs that name it, is on two pages,
{pages}.
Here, what each script in `benchmarks/` is for ({scripts} of them) and which steps of
`scripts/gpu_session.sh` run it on the GPU machine, then the results files no page names. The
figures and what they mean are on [Benchmarks](benchmarks.md).
`python benchmarks/index.py` writes these pages from the files, the scripts, the pages and the git
history; `tests/test_benchmark_index.py` fails when a page differs from what they give.

- **when**: the date the file records (`started_at`), else the day of the git commit that added it.
- **command**: what the file records (`command`; `commands` for a run resumed over several calls,
  in order), else *not recorded*, with the options it records instead.
- **used by**: the sections of the docs and the README that name the file (by name, by a pattern
  such as `bench_soak-*.json`, as `-name.json` after a full name of the same script, in a range
  such as `bench_box-timing-5.json` to `bench_box-timing-7.json`, or as a run in a section that
  names `bench_box-<run>.json`), else **used by no page**; then the code (`benchmarks/*.py`,
  `tests/`) that names it.
"""


def files_page(script: str) -> Path:
    """The page of a script's results files (:data:`FILES_PAGES`)."""
    return FILES_PAGES.get(script, FILES_PAGES[None])[0]


def render() -> dict[Path, str]:
    """The pages: :data:`PAGE` first, then each page of :data:`FILES_PAGES`."""
    found, summaries = records(), scripts(BENCH)
    sections, code = index_uses.all_uses(ROOT, {r.name for r in found}, MAP_FILES)
    by_script: dict[str, list[Record]] = {}
    for rec in sorted(found, key=lambda r: (r.script.startswith("scripts/"), r.script, r.name)):
        by_script.setdefault(rec.script, []).append(rec)
    named = " and ".join(f"[{title.partition(': ')[2]}]({page.name})" for page, title in FILES_PAGES.values())
    pages = {PAGE: [INTRO.format(files=len(found), pages=named, scripts=len(summaries)), "## Scripts", ""]}
    lines = pages[PAGE]
    session = (ROOT / GPU_SESSION).read_text(encoding="utf-8")
    steps = gpu_steps(session, list(summaries))
    summaries[GPU_SESSION] = first_sentence(session)
    for script, summary in summaries.items():
        count = len(by_script.get(script, []))
        about = [f"{count} results file{'s' if count > 1 else ''}"] if count else []
        if script in steps:
            about.append(f"on the GPU machine: `{GPU_SESSION}` " + ", ".join(f"`{s}`" for s in steps[script]))
        link = f"{files_page(script).name}#{index_uses.slug(script)}"
        name = f"[`{script}`]({link})" if count else f"`{script}`"
        said = f" ({'; '.join(about)})" if about else ""
        lines.append(f"- {name}{said}: {summary}")
    for page, title in FILES_PAGES.values():
        count = sum(len(group) for script, group in by_script.items() if files_page(script) == page)
        pages[page] = [f"# {title}", "", FILES_INTRO.format(files=count), ""]
    for script, group in by_script.items():
        lines = pages[files_page(script)]
        lines += [f"## `{script}`", "", shape(group), ""]
        lines += ["| results file (when) | command | used by |", "|---|---|---|"]
        for rec in group:
            when = rec.date + (f", its `{rec.date_key}`" if rec.date_key else "")
            uses = used_by(rec, sections.get(rec.name, []), code.get(rec.name, []))
            cells = [f"`{rec.name}` ({when})", command(rec), uses]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    unused = [r for r in found if r.name not in sections]
    lines = pages[PAGE]
    lines += ["", "## Used by no page", "", f"{len(unused)} results files are named by no page:", ""]
    lines += [
        f"- `{r.name}` (`{r.script}`)" + "".join(f": {'; '.join(_unused(r))}" if _unused(r) else "") for r in unused
    ]
    return {page: "\n".join(lines).rstrip("\n") + "\n" for page, lines in pages.items()}


def main(argv: list[str] | None = None) -> int:
    """Write the pages, or with ``--check`` say whether each is the one the files give."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 where a page differs")
    args = parser.parse_args(argv)
    pages = render()
    if args.check:
        stale = [page for page, text in pages.items() if not page.exists() or page.read_text(encoding="utf-8") != text]
        for page in pages:
            said = "stale: run python benchmarks/index.py" if page in stale else "up to date"
            print(f"{page.relative_to(ROOT)} is {said}")
        return 1 if stale else 0
    for page, text in pages.items():
        page.write_text(text, encoding="utf-8")
        print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
