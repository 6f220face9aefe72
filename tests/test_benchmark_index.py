"""docs/benchmark-results*.md are the map benchmarks/index.py makes of benchmarks/results/, and the map is true.

The pages (the scripts and the files no page names; the results files of bench_box.py; those of every other
script) are regenerated and compared; each results file has one row and each row a file; the few facts the
generator cannot read from the files (its explicit tables) still hold; and the finders see each way a page
names a results file.
"""

from __future__ import annotations

import doctest
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.file_modules import load_file

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmark-results.md"
FILES_PAGES = [ROOT / "docs" / name for name in ("benchmark-results-box.md", "benchmark-results-files.md")]
ROW = re.compile(r"^\| `(?P<name>[^`]+)` \((?P<when>[^)]*)\) \| (?P<command>.*) \| (?P<used>.*) \|$", re.MULTILINE)


@pytest.fixture(scope="module")
def index() -> Any:
    return load_file(ROOT / "benchmarks" / "index.py", "benchmarks_index", beside=True)


@pytest.fixture(scope="module")
def uses(index: Any) -> Any:
    return index.index_uses


def _files_text() -> str:
    """The pages of the results files, one after the other."""
    return "\n".join(page.read_text(encoding="utf-8") for page in FILES_PAGES)


@pytest.fixture(scope="module")
def rows() -> dict[str, re.Match[str]]:
    return {match.group("name"): match for match in ROW.finditer(_files_text())}


def _full_history() -> bool:
    found = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    return found.returncode == 0 and found.stdout.strip() == "false"


needs_history = pytest.mark.skipif(
    not _full_history(), reason="the dates come from the git history: missing or shallow"
)


@needs_history
def test_the_page_is_the_one_the_results_the_scripts_and_the_pages_give(index):
    pages = index.render()
    assert list(pages) == [PAGE, *FILES_PAGES]
    for page, text in pages.items():
        assert page.read_text(encoding="utf-8") == text, f"regenerate {page.name}: python benchmarks/index.py"


def test_every_results_file_has_one_row_and_every_row_names_a_file(rows):
    files = {path.name for path in RESULTS.iterdir() if path.is_file()}
    assert len(rows) == len(ROW.findall(_files_text()))  # no file twice
    assert not ROW.findall(PAGE.read_text(encoding="utf-8"))  # the scripts' page lists none
    missing, gone = sorted(files - set(rows)), sorted(set(rows) - files)
    assert (missing, gone) == ([], []), (
        f"results files the map lacks: {missing}; files it names that do not exist: {gone}; "
        "run python benchmarks/index.py"
    )


def test_a_file_no_page_names_is_said_to_be_used_by_no_page(index, rows):
    sections, _ = index.index_uses.all_uses(ROOT, set(rows), index.MAP_FILES)
    unused = sorted(set(rows) - set(sections))
    assert unused, "every results file is named somewhere: drop this test's expectation of a list"
    for name in rows:
        said = "**used by no page**" in rows[name].group("used")
        assert said == (name in unused), name
    listed = re.findall(r"^- `([^`]+)` \(`", PAGE.read_text(encoding="utf-8").split("## Used by no page")[1], re.M)
    assert listed == unused


def test_every_results_file_has_its_script_and_an_unknown_one_fails(index):
    scripts = list(index.scripts(index.BENCH))
    made = {path.name: index.script_of(path.name, scripts) for path in RESULTS.iterdir()}
    assert made["bench_box-timing-10.json"] == "bench_box.py"
    assert made["bench_pinned_memory.json"] == "bench_pinned_memory.py"
    assert made["probe_register-h200.log"] == "probe_register.py"
    assert {made[name] for name in index.MADE_BY} == {"scripts/gpu_session.sh"}
    with pytest.raises(ValueError, match="no script's name starts it"):
        index.script_of("somewhere-else.json", scripts)


@needs_history
def test_every_command_shown_is_the_one_its_file_records(index, rows):
    for record in index.records():
        shown = rows[record.name].group("command")
        if record.commands:
            assert all(f"`{command}`" in shown for command in record.commands), record.name
        else:
            assert shown.startswith("*not recorded*"), record.name


@needs_history
def test_the_explicit_tables_name_files_and_keys_that_exist_and_are_still_needed(index, uses):
    files = {path.name for path in RESULTS.iterdir()}
    assert set(index.MADE_BY) <= files
    assert set(index.LEFTOVERS) <= files
    sections, _ = uses.all_uses(ROOT, files, index.MAP_FILES)
    for pattern, (page, heading) in index.UNNAMED.items():
        matched = [name for name in files if re.fullmatch(pattern.replace(".", r"\.").replace("*", ".*"), name)]
        assert matched, f"UNNAMED: {pattern} matches no results file"
        assert not set(matched) & set(sections), f"UNNAMED: a page names {pattern} now: drop it from the table"
        uses.section_of(ROOT, page, heading)  # the section exists
    records = index.records()
    for script, keys in index.OPTION_KEYS.items():
        assert any(r.script == script and set(keys) <= set(r.keys or ()) for r in records), script
    for script, key in index.SHAPE_NOTES:
        files_of = [r for r in records if r.script == script and r.keys is not None]
        differing = [k for found in index.differing(files_of).values() for k in found]
        assert key in differing, f"SHAPE_NOTES: every file of {script} has {key!r} now, or none"


def test_the_leftover_log_was_superseded_by_a_later_run_of_the_same_tests():
    passed = re.compile(r"^PASSED (\S+)", re.MULTILINE)
    leftover = passed.findall((RESULTS / "gpu-tests-from-files-h200.log").read_text(encoding="utf-8"))
    later = passed.findall((RESULTS / "gpu-suite-h200.log").read_text(encoding="utf-8"))
    assert len(leftover) == 4
    assert set(leftover) <= set(later)


def test_the_gpu_logs_end_as_the_pages_say():
    development = " ".join((ROOT / "docs" / "development.md").read_text(encoding="utf-8").split())
    for log, card in (("gpu-suite-h200.log", "H200"), ("gpu-suite-h100.log", "H100")):
        last = (RESULTS / log).read_text(encoding="utf-8").strip().splitlines()[-1]
        found = re.fullmatch(r"(\d+) passed, (\d+) skipped in (\d+)\.\d+s \(.*\)", last)
        assert found is not None, (log, last)
        said = f"{found[1]} passed and {'the same ' if card == 'H100' else ''}{found[2]} skipped"
        assert said in development, (log, said)
        assert f"in {round(float(last.split(' in ')[1].split('s')[0]))} s on one {card}" in development
    ring = " ".join((ROOT / "docs" / "ring-runtime.md").read_text(encoding="utf-8").split())
    for log in ("gpu-ring-tests-h100.log", "gpu-ring-tests-h100-2.log"):
        assert (RESULTS / log).read_text(encoding="utf-8").strip().splitlines()[-1].startswith("2 passed in "), log
        assert f"`{log}`" in ring


def test_each_way_a_page_names_a_results_file_is_found_in_its_section(uses):
    names = {f"bench_x-{n}.json" for n in ("a", "b", "run-1", "run-2", "run-3", "run-4", "cut")} | {"bench_y.json"}
    page = "\n".join([
        "# A page",
        "Above every section: `benchmarks/results/bench_y.json`.",
        "## Named: a full name, then a short one",
        "See `bench_x-a.json` and `-b.json`; `-nothing.json` is none.",
        "```text",
        "bench_x-cut.json in a code block counts for nothing",
        "```",
        "## Named",  # the second heading of this text: its anchor gets _1
        "A range: `bench_x-run-1.json` to `bench_x-run-3.json`.",
        "### A pattern",
        "Raw results: `bench_x-*.json`, not `*.json` alone.",
        "## A placeholder in `code`",
        "The run (`bench_x-<run>.json`):",
        "",
        "| run |",
        "|---|",
        "| `run-4` |",
    ])  # fmt: skip
    found = {
        name: [(s.heading, s.anchor) for s in sections]
        for name, sections in uses.page_uses(page, "p.md", names).items()
    }
    pattern = ("A pattern", "a-pattern")
    assert found == {
        "bench_y.json": [(None, None)],
        "bench_x-a.json": [("Named: a full name, then a short one", "named-a-full-name-then-a-short-one"), pattern],
        "bench_x-b.json": [("Named: a full name, then a short one", "named-a-full-name-then-a-short-one"), pattern],
        "bench_x-run-1.json": [("Named", "named"), pattern],
        "bench_x-run-2.json": [("Named", "named"), pattern],
        "bench_x-run-3.json": [("Named", "named"), pattern],
        "bench_x-run-4.json": [pattern, ("A placeholder in `code`", "a-placeholder-in-code")],
        "bench_x-cut.json": [pattern],
    }


def test_code_names_a_file_in_its_text_or_as_a_constant_its_f_string_completes(uses):
    names = {"bench_x-a.json", "bench_x-b.json", "bench_x-c.json", "bench_z.json"}
    source = 'RUN = "a"\nOTHER = "c"\npath = f"bench_x-{RUN}.json"\n# and bench_z.json\n'
    assert uses.code_names(source, names) == {"bench_x-a.json", "bench_x-c.json", "bench_z.json"}
    assert uses.code_names('glob("*.json")', names) == set()  # no script's files in particular


def test_the_anchors_are_those_the_site_gives(uses):
    toc = pytest.importorskip("markdown.extensions.toc")
    for heading in ("At FLUX.1-dev's own shapes", "`low_cpu_mem_usage=True`", "Register presets against `nothing`, x"):
        assert uses.slug(heading) == toc.slugify(heading.replace("`", ""), "-")


def test_the_examples_in_the_generator_s_docstrings_run(index, uses):
    for module in (index, uses, sys.modules[index.scripts.__module__]):
        failed, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert tried > 0, module.__name__
        assert failed == 0, module.__name__


def test_a_results_file_that_is_no_json_object_is_named_with_its_line(index, tmp_path, monkeypatch):
    monkeypatch.setattr(index, "RESULTS", tmp_path)
    (tmp_path / "bench_x-broken.json").write_text('{\n  "command": "python3 benchmarks/bench_x.py",\n}\n')
    with pytest.raises(ValueError, match=r"benchmarks/results/bench_x-broken.json, line 3: not JSON"):
        index.load("bench_x-broken.json")
    (tmp_path / "bench_x-list.json").write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match=r"bench_x-list.json: its top level is a list, not an object"):
        index.load("bench_x-list.json")


def test_the_scripts_list_says_which_step_of_gpu_session_sh_runs_each(index):
    session = (ROOT / "scripts" / "gpu_session.sh").read_text(encoding="utf-8")
    steps = index.gpu_steps(session, list(index.scripts(index.BENCH)))
    assert steps["bench_box.py"] == ["bench", "box"]
    assert steps["probe_register.py"] == ["register"]
    assert "plot_box.py" not in steps  # run by nothing there
    line = next(x for x in PAGE.read_text(encoding="utf-8").splitlines() if x.startswith("- [`probe_onload.py`]"))
    assert "on the GPU machine: `scripts/gpu_session.sh` `onload`" in line
