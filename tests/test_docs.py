"""The README and the docs stay true.

* Every fenced code block of ``README.md`` and ``docs/**/*.md`` is checked: ``python`` blocks
  run (one fresh interpreter per page, its blocks in order), console blocks of ``$ ddo-hooks``
  commands run through the installed command, policy YAML loads, other YAML, TOML and JSON
  parse. A block opts out only with ``<!-- docs-test: skip (reason) -->`` right above it; the
  skips are counted per page. (The marker grammar is documented in ``docs/development.md``.)
* The README opens with its two commands, and ``.ci/run`` runs the second one and nothing else.
* ``mkdocs build --strict`` passes, and the generated references cover every model field.
* The pipelines matrix of ``docs/pipelines.md`` names tests that exist, and lists every id of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.file_modules import load_file

from ddo_hooks import HookPolicy, PolicyError

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]

INSTALL_AND_DEMO = (
    'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e ".[demo]" && ddo-hooks demo'
)
INSTALL_AND_TEST = 'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e ".[dev]" && pytest'

# Blocks each page skips, by count. A new skip must be added here on purpose; the README skips
# only its two install commands (CI runs the second one for real, through .ci/run).
EXPECTED_SKIPS = {
    "README.md": 3,  # the two install commands, and the FLUX.1-dev recipe (downloads, needs CUDA and DDO)
    "docs/architecture.md": 3,  # the drawing of the layers, an option's corridor, and an attachment's steps
    "docs/cli.md": 1,  # installs the plot extra
    "docs/benchmarks-cli.md": 2,  # start-up, the file commands at scale
    "docs/benchmarks-costs.md": 2,  # hook overhead, the page count (writes 1.38 GiB)
    "docs/benchmarks-pinned-floor.md": 2,  # two runs on the GPU machine
    "docs/benchmarks-pinned-memory.md": 1,  # a run on the GPU machine
    "docs/development.md": 3,  # the quick subset; downloads the GPU machine's wheels; installs DDO beside the tree
    "docs/done-components.md": 1,  # a saved Flux pipeline under group offloading on a CUDA GPU
    "docs/pinned-copies.md": 2,  # a saved Flux pipeline pinned from its files on a CUDA GPU, under DDO and diffusers
    "docs/quickstart.md": 1,  # the install command
    "docs/pipelines.md": 1,  # downloads FLUX.1-dev and needs a CUDA GPU
    "docs/ring-runtime.md": 2,  # downloads FLUX.1-dev and needs a CUDA GPU; the runs left to make on the GPU machine
    "docs/workers.md": 1,  # needs two CUDA GPUs and torchrun
    "docs/with-ddo.md": 1,  # calls diffusers-dynamic-offloader, which ddo-hooks does not depend on
}

PAGE_TIMEOUT_S = 900


# -- reading the blocks -----------------------------------------------------------------------

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
SHELLS = {"console", "bash", "sh", "shell"}


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page."""

    page: str
    line: int  # 1-based line of the first line of content
    lang: str
    text: str
    skip: str | None = None
    save: str | None = None
    invalid: bool = False
    exit: int = 0
    output: bool = False
    options: tuple[str, ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def commands(self) -> list[str]:
        return [line[2:].strip() for line in self.text.splitlines() if line.startswith("$ ")]

    @property
    def outputs(self) -> list[str]:
        """What the block shows after each command, up to the next one (the ``output`` option compares it)."""
        shown: list[list[str]] = []
        for line in self.text.splitlines():
            if line.startswith("$ "):
                shown.append([])
            elif shown:
                shown[-1].append(line)
        return ["\n".join(lines) for lines in shown]

    @property
    def kind(self) -> str:
        """How the block is checked: python, console, policy, yaml, toml, json, skip, or unrunnable."""
        if self.skip is not None:
            return "skip"
        if self.lang in {"python", "py"}:
            return "python"
        if self.lang in SHELLS:
            commands = self.commands
            runnable = commands and all(c == "ddo-hooks" or c.startswith("ddo-hooks ") for c in commands)
            return "console" if runnable else "unrunnable"
        if self.lang in {"yaml", "yml"}:
            return "policy" if re.search(r"^version:", self.text, re.MULTILINE) else "yaml"
        if self.lang in {"toml", "json"}:
            return self.lang
        return "unrunnable"


class DocsTestError(ValueError):
    """A page's blocks or markers are malformed."""


def _options(body: str, where: str) -> dict[str, Any]:
    found: dict[str, Any] = {"options": []}
    # A skip takes no other option, and its reason may hold any text (';' too).
    parts = [body] if body.startswith("skip") else [part.strip() for part in body.split(";")]
    for option in parts:
        found["options"].append(option)
        if m := re.fullmatch(r"skip\s*\((?P<reason>.*)\)", option):
            if not m["reason"].strip():
                raise DocsTestError(f"{where}: 'skip' needs a reason: <!-- docs-test: skip (why) -->")
            found["skip"] = m["reason"].strip()
        elif option == "skip":
            raise DocsTestError(f"{where}: 'skip' needs a reason: <!-- docs-test: skip (why) -->")
        elif m := re.fullmatch(r"save\s+(?P<name>[\w.\-]+)", option):
            found["save"] = m["name"]
        elif option == "invalid":
            found["invalid"] = True
        elif m := re.fullmatch(r"exit\s+(?P<code>\d+)", option):
            found["exit"] = int(m["code"])
        elif option == "output":
            found["output"] = True
        else:
            known = "skip (reason), save NAME, invalid, exit N, output"
            raise DocsTestError(f"{where}: unknown docs-test option {option!r} (known: {known})")
    found["options"] = tuple(found["options"])
    return found


def extract_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown page, with the options of the marker right above it."""
    page = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    marker: tuple[int, str] | None = None  # (line index, body) of a marker not yet used
    last_text = -1  # index of the last non-blank line outside blocks
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := MARKER.match(line):
            if marker is not None:
                raise DocsTestError(f"{page}:{marker[0] + 1}: a docs-test marker not followed by a code block")
            marker = (i, m["body"].strip())
        elif m := FENCE.match(line):
            indent, fence, info = m["indent"], m["fence"], m["info"]
            closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
            end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), None)
            if end is None:
                raise DocsTestError(f"{page}:{i + 1}: a code block that is never closed")
            body = [text[len(indent) :] if text.startswith(indent) else text.lstrip() for text in lines[i + 1 : end]]
            options: dict[str, Any] = {}
            if marker is not None:
                if marker[0] != last_text:
                    raise DocsTestError(f"{page}:{marker[0] + 1}: a docs-test marker must be right above its block")
                options = _options(marker[1], f"{page}:{marker[0] + 1}")
                marker = None
            lang = info.split()[0].lower() if info.split() else ""
            blocks.append(Block(page, i + 2, lang, "\n".join(body) + "\n", **options))
            i = end
        elif line.strip() and marker is not None and i != marker[0]:
            raise DocsTestError(f"{page}:{marker[0] + 1}: a docs-test marker must be right above its block")
        if line.strip():
            last_text = i
        i += 1
    if marker is not None:
        raise DocsTestError(f"{page}:{marker[0] + 1}: a docs-test marker not followed by a code block")
    return blocks


def all_blocks() -> list[Block]:
    """The blocks of every well-formed page (the first test reports the malformed ones)."""
    blocks = []
    for page in PAGES:
        try:
            blocks += extract_blocks(page)
        except DocsTestError:
            continue
    return blocks


def _page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# -- the markers and the skips ----------------------------------------------------------------


def test_every_page_has_well_formed_blocks_and_markers():
    problems = []
    for page in PAGES:
        try:
            extract_blocks(page)
        except DocsTestError as e:
            problems.append(str(e))
    assert not problems, "\n".join(problems)


def test_every_block_is_checked_or_skipped_with_a_reason():
    unchecked = [
        f"{b.where}: a ```{b.lang or '(no language)'} block the docs test cannot check; make it a python block, "
        "a console block of `$ ddo-hooks ...` commands, a policy, or mark it <!-- docs-test: skip (reason) -->"
        for b in all_blocks()
        if b.kind == "unrunnable"
    ]
    assert not unchecked, "\n".join(unchecked)


def test_options_fit_their_blocks():
    misfits = []
    for b in all_blocks():
        if b.invalid and b.kind != "policy":
            misfits.append(f"{b.where}: 'invalid' is for policy blocks (yaml with a version: key)")
        if b.exit and b.kind != "console":
            misfits.append(f"{b.where}: 'exit N' is for console blocks of ddo-hooks commands")
    assert not misfits, "\n".join(misfits)


def test_skipped_blocks_are_counted_per_page():
    counted: dict[str, int] = {}
    for b in all_blocks():
        if b.kind == "skip":
            counted[b.page] = counted.get(b.page, 0) + 1
    reasons = "\n".join(f"  {b.where}: {b.skip}" for b in all_blocks() if b.kind == "skip")
    assert counted == EXPECTED_SKIPS, f"skipped blocks changed; update EXPECTED_SKIPS if that is meant:\n{reasons}"


def test_the_readme_skips_only_its_two_install_commands_and_the_gpu_recipe():
    skipped = [b for b in extract_blocks(README) if b.kind == "skip"]
    assert [b.text.strip() for b in skipped[:2]] == [INSTALL_AND_DEMO, INSTALL_AND_TEST]
    assert len(skipped) == 3
    assert skipped[2].skip == "downloads the gated FLUX.1-dev weights and needs a CUDA GPU and DDO"
    assert 'attach(pipe, "smallest-box")' in skipped[2].text


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        ("<!-- docs-test: skip -->\n```python\npass\n```\n", "'skip' needs a reason"),
        ("<!-- docs-test: skip () -->\n```python\npass\n```\n", "'skip' needs a reason"),
        ("<!-- docs-test: sikp (typo) -->\n```python\npass\n```\n", "unknown docs-test option"),
        ("<!-- docs-test: skip (x) -->\n\nSome text.\n\n```python\npass\n```\n", "right above its block"),
        ("<!-- docs-test: skip (x) -->\n", "not followed by a code block"),
        ("```python\npass\n", "never closed"),
    ],
)
def test_the_checker_refuses_malformed_markers(tmp_path: Path, page: str, problem: str):
    path = tmp_path / "page.md"
    path.write_text(page, encoding="utf-8")
    with pytest.raises(DocsTestError, match=re.escape(problem)):
        extract_blocks(path)


def test_the_checker_sorts_blocks_by_what_it_can_check(tmp_path: Path):
    path = tmp_path / "page.md"
    path.write_text(
        "```\nplain\n```\n\n"
        "```console\n$ ddo-hooks schema policy\n{...}\n```\n\n"
        "```bash\n$ rm -rf build\n```\n\n"
        "```yaml\nversion: 1\n```\n\n"
        "  ```python\n  print(1)\n  ```\n\n"
        "<!-- docs-test: skip (a diagram) -->\n```text\na -> b\n```\n",
        encoding="utf-8",
    )
    blocks = extract_blocks(path)
    assert [b.kind for b in blocks] == ["unrunnable", "console", "unrunnable", "policy", "python", "skip"]
    assert blocks[1].commands == ["ddo-hooks schema policy"]
    assert blocks[4].text == "print(1)\n"
    assert blocks[5].skip == "a diagram"


# -- the README and CI ------------------------------------------------------------------------


def test_the_readme_opens_with_its_two_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    first, second = extract_blocks(README)[:2]
    assert (first.lang, first.text.strip()) == ("bash", INSTALL_AND_DEMO)
    assert (second.lang, second.text.strip()) == ("bash", INSTALL_AND_TEST)
    assert first.text.count("\n") == second.text.count("\n") == 1, "each command is one line"

    def prose(start: int, stop: int) -> list[str]:
        return [
            line for line in lines[start:stop] if not MARKER.match(line) and not line.startswith("# ")
        ]  # the title and the markers do not count

    before = prose(0, first.line - 2)
    paragraphs = "\n".join(before).strip().split("\n\n")
    assert len([p for p in paragraphs if p.strip()]) <= 1, "at most one paragraph comes before the commands"
    assert not any(line.lstrip().startswith(("#", "-", "*", "```", "|")) for line in before if line.strip())
    between = prose(first.line + 1, second.line - 2)
    assert not any(line.strip() for line in between), "nothing but a marker comes between the two commands"


def test_ci_runs_the_readmes_second_command_then_the_hook_tests_on_the_oldest_diffusers():
    script = CI_RUN.read_text(encoding="utf-8")
    assert os.access(CI_RUN, os.X_OK), ".ci/run must be executable"
    assert script.startswith("#!/usr/bin/env bash\n")
    second = extract_blocks(README)[1].text.strip()
    assert second in script.splitlines(), ".ci/run must contain the README's second command verbatim"
    statements = [s.strip() for s in script.splitlines()[1:] if s.strip() and not s.lstrip().startswith("#")]
    assert statements[:3] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', second]
    rest = "\n".join(statements[3:])
    assert 'pip install torch==2.13.0 -e ".[dev]" "diffusers==$oldest"' in rest  # pyproject's lower bound
    assert "pytest -q" in rest
    assert "tests/test_attach_boundaries.py" in rest


def test_the_readmes_links_point_at_files_that_exist():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = [t for t in targets if not re.match(r"[a-z]+://", t) and not (ROOT / t).exists()]
    assert targets
    assert not missing, missing


# -- blocks checked in this process: policies and other data ----------------------------------


def _blocks_of(*kinds: str) -> list[Block]:
    return [b for b in all_blocks() if b.kind in kinds]


@pytest.mark.parametrize("block", _blocks_of("policy"), ids=lambda b: b.where)
def test_policy_blocks_load(block: Block):
    if block.invalid:
        with pytest.raises(PolicyError):
            HookPolicy.from_yaml_text(block.text, source=block.where)
    else:
        HookPolicy.from_yaml_text(block.text, source=block.where)


@pytest.mark.parametrize("block", _blocks_of("yaml", "toml", "json"), ids=lambda b: b.where)
def test_data_blocks_parse(block: Block):
    if block.kind == "yaml":
        yaml.safe_load(block.text)
    elif block.kind == "json":
        json.loads(block.text)
    else:
        tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
        tomllib.loads(block.text)


# -- blocks run page by page ------------------------------------------------------------------

# Runs one page's steps in order in one interpreter: python blocks share a namespace, console
# commands run through the installed ddo-hooks, saved files land in the working directory.
DRIVER = textwrap.dedent(
    r"""
    import json, os, shlex, shutil, subprocess, sys, traceback, warnings

    warnings.filterwarnings("error")
    # transformers warns at import that torchvision is missing (as pyproject's pytest settings say)
    warnings.filterwarnings("ignore", message=r".*requires torchvision.*", category=UserWarning)

    steps = json.load(open(sys.argv[1], encoding="utf-8"))
    namespace = {"__name__": "__main__"}
    exe = shutil.which("ddo-hooks", path=os.path.dirname(sys.executable)) or shutil.which("ddo-hooks")
    # Where the package is importable but not pip-installed (PYTHONPATH), run the same CLI as a module.
    ddo_hooks_cmd = [exe] if exe else [sys.executable, "-m", "ddo_hooks"]
    for step in steps:
        where = step["where"]
        if step["kind"] == "save":
            with open(step["name"], "w", encoding="utf-8") as f:
                f.write(step["text"])
        elif step["kind"] == "python":
            print(f"--- {where} (python)", flush=True)
            code = compile("\n" * (step["line"] - 1) + step["text"], step["path"], "exec")
            try:
                exec(code, namespace)
            except BaseException:
                traceback.print_exc()
                sys.exit(f"FAILED {where}: the python block raised")
        else:
            for command in step["commands"]:
                print(f"--- {where}: $ {command}", flush=True)
                argv = [*ddo_hooks_cmd, *shlex.split(command)[1:]]
                env = {**os.environ, "COLUMNS": "80"}  # argparse's help is as wide as this
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
                print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n", flush=True)
                if proc.returncode != step["exit"]:
                    sys.exit(f"FAILED {where}: `{command}` exited {proc.returncode}, expected {step['exit']}")
                shown = step["outputs"].pop(0) if step["outputs"] else None
                printed = (proc.stdout + proc.stderr).rstrip("\n")
                if shown is not None and printed != shown:
                    sys.exit(f"FAILED {where}: `{command}` printed\n{printed}\n--- where the page shows\n{shown}")
    print("all steps ran", flush=True)
    """
)


def _steps(page: Path) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for b in (b for b in all_blocks() if b.page == _page_id(page)):
        if b.save is not None and b.kind != "skip":
            steps.append({"kind": "save", "where": b.where, "name": b.save, "text": b.text})
        if b.kind == "python":
            steps.append({"kind": "python", "where": b.where, "line": b.line, "path": str(page), "text": b.text})
        elif b.kind == "console":
            outputs = b.outputs if b.output else []
            steps.append(
                {"kind": "console", "where": b.where, "commands": b.commands, "exit": b.exit, "outputs": outputs}
            )
    return steps


RUN_PAGES = [page for page in PAGES if any(s["kind"] in {"python", "console"} for s in _steps(page))]


@pytest.mark.parametrize("page", RUN_PAGES, ids=_page_id)
def test_the_code_blocks_of_a_page_run(page: Path, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(ROOT / "examples", work / "examples")  # pages refer to examples/...
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps(_steps(page)), encoding="utf-8")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "",  # the CPU, also on a GPU machine
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.run(
        [sys.executable, str(driver), str(steps)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"{_page_id(page)}:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"


# -- the site ---------------------------------------------------------------------------------


def _load_docs_hooks() -> Any:
    return load_file(DOCS / "hooks.py", "ddo_docs_hooks")


def _sections(markdown: str) -> dict[str, str]:
    """Generated sections by anchor: ``{"policy-releasepolicy": "...table..."}``."""
    parts = re.split(r"^#+ .*\{#([\w-]+)\}$", markdown, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _check_reference(markdown: str, schema: dict[str, Any], prefix: str, roots: list[str]) -> None:
    sections = _sections(markdown)
    models = {name: schema["$defs"][name] for name in schema.get("$defs", {})}
    if "properties" in schema:
        models[schema["title"]] = schema
    expected = {name: node for name, node in models.items() if "properties" in node}
    for root in roots:
        assert f"{prefix}-{root.lower()}" in sections, f"{root} is not rendered"
    missing = []
    for name, node in expected.items():
        section = sections.get(f"{prefix}-{name.lower()}")
        if section is None:
            missing.append(name)
            continue
        for key in node["properties"]:
            if not re.search(rf"^\| `{re.escape(key)}` \|", section, re.MULTILINE):
                missing.append(f"{name}.{key}")
    assert not missing, f"not in the generated reference: {missing}"


def test_the_policy_reference_renders_every_field_of_the_model():
    hooks = _load_docs_hooks()
    schema = HookPolicy.model_json_schema()
    _check_reference(hooks.policy_reference(), schema, "policy", ["HookPolicy"])
    assert "<!-- generated: policy-reference -->" in (DOCS / "policy-fields.md").read_text(encoding="utf-8")


def test_the_report_reference_renders_every_field_of_every_route():
    """Of both shapes: the schema holds ddo_hooks' reports and DDO's own, each rendered by its generator."""
    from ddo_hooks.reports.ddo.routes import DDO_REPORT_TYPES
    from ddo_hooks.reports.parse import REPORT_TYPES, report_json_schema

    hooks = _load_docs_hooks()
    roots = [model.__name__ for model in (*REPORT_TYPES, *DDO_REPORT_TYPES)]
    rendered = hooks.report_reference() + "\n" + hooks.ddo_report_reference()
    _check_reference(rendered, report_json_schema(), "report", roots)
    # the pages of the report reference, one per family of routes: together they name each route once...
    markers = [m for page in sorted(DOCS.rglob("*.md")) for m in hooks.MARKER.finditer(page.read_text("utf-8"))]
    for name, routes in (
        ("report-reference", [model.model_fields["route"].default for model in REPORT_TYPES]),
        ("ddo-report-reference", [typing.get_args(d.model_fields["route"].annotation)[0] for d in DDO_REPORT_TYPES]),
    ):
        named = [route for marker in markers if marker.group(1) == name for route in marker.group(2).split()]
        assert sorted(named) == sorted(routes), f"the pages' {name} markers should name each route once"
    # ...and render every field of every route
    shown = "\n".join(hooks.generated(m) for m in markers if m.group(1) in ("report-reference", "ddo-report-reference"))
    _check_reference(shown, report_json_schema(), "report", roots)


def test_the_ddo_page_renders_the_release_mapping_from_the_code():
    from ddo_hooks.reports.ddo.mapping import DDO_RELEASE_FIELDS, DDO_RELEASE_STATUSES

    hooks = _load_docs_hooks()
    page = (DOCS / "with-ddo.md").read_text(encoding="utf-8")
    assert "<!-- generated: ddo-release-statuses -->" in page
    assert "<!-- generated: ddo-release-fields -->" in page
    statuses, fields = hooks.ddo_release_statuses(), hooks.ddo_release_fields()
    for status in DDO_RELEASE_STATUSES:
        assert re.search(rf"^\| `{status}` \|", statuses, re.MULTILINE), status
    assert len(fields.splitlines()) == 2 + len(DDO_RELEASE_FIELDS)
    assert "| *none* |" in fields  # a field without a counterpart says so


def test_the_reference_shows_defaults_types_and_descriptions():
    section = _sections(_load_docs_hooks().policy_reference())["policy-hostcachereleaseoptions"]
    row = next(line for line in section.splitlines() if line.startswith("| `collect` |"))
    assert row == (
        "| `collect` | one of `full`, `young`, `auto` | `auto` | Garbage collection before the release: `full` "
        "(every generation), `young` (0 and 1) or `auto` (young, then full only if a dropped component is still "
        "alive). |"
    )


def test_the_site_builds_strictly(built_site):  # built once per session (conftest.py); test_site.py reads it too
    site = built_site.path
    assert built_site.returncode == 0, built_site.output
    names = ("policy-fields", "reports", "reports-ddo-host")
    page = {name: (site / name / "index.html").read_text(encoding="utf-8") for name in names}
    assert "<code>min_releasable_bytes</code>" in page["policy-fields"]  # a name in a table stays whole (hooks.py)...
    assert "<code>allocator_bytes_delta</code>" in page["reports"]
    assert "available_<wbr>process_<wbr>commit_<wbr>bytes" in page["reports-ddo-host"]  # ...or breaks between its words
    for name in ("hook-policy.schema.json", "ddo-report.schema.json"):
        published = json.loads((site / "schemas" / name).read_text(encoding="utf-8"))
        assert published == json.loads((ROOT / "ddo_hooks" / "schemas" / name).read_text(encoding="utf-8"))


def test_the_reports_page_lists_every_route():
    from ddo_hooks.reports.parse import REPORT_TYPES

    text = (DOCS / "reports.md").read_text(encoding="utf-8")
    routes = [model.model_fields["route"].default for model in REPORT_TYPES]
    missing = [route for route in routes if not re.search(rf"^\| `{route}` \|", text, re.MULTILINE)]
    assert not missing, f"docs/reports.md's table of routes lacks {missing}"


def test_the_readme_names_every_route_and_its_example_reads_every_report_through_summary():
    from ddo_hooks.reports.parse import ROUTES

    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    assert [route for route in ROUTES if f"`{route}`" not in section] == []
    example = section.split("```python", 1)[1].split("```", 1)[0]
    assert 'HookPolicy.preset("lowest-peak")' in example  # a preset whose reports are of several routes
    assert "for component, report in tracker.records():  # every report, whatever its route" in example
    assert "s = report.summary()" in example  # the accessor every route has, before any route's own field


def test_the_suite_time_is_stated_with_its_load_and_the_ddo_skips_name_the_extra():
    text = " ".join((DOCS / "development.md").read_text(encoding="utf-8").split("\n## ", 2)[1].split())
    found = re.search(r"takes (\d+):(\d\d) to (\d+):(\d\d) on 2 cores", text)
    assert found is not None, "the development page states the suite's time as a range on 2 cores"
    assert int(found[1]) * 60 + int(found[2]) < int(found[3]) * 60 + int(found[4])
    assert re.search(r"the last `\.ci/run` \([^)]*\d{4}-\d\d-\d\d[^)]*\): [\d,]+ passed and \d+ skipped", text)
    for name in ("test_ddo_core.py", "test_ddo_reports.py", "test_ddo_offload.py"):
        source = (ROOT / "tests" / name).read_text(encoding="utf-8")
        reasons = re.findall(r'reason=f"\{DISTRIBUTION\} is not installed([^"]*)"', source)
        assert reasons, name
        assert all("pip install -e '.[dev,ddo]'" in reason for reason in reasons), (name, reasons)


def test_no_docstring_cites_a_file_the_repository_lacks_or_holds_an_rst_table():
    cited, tables = [], []
    for path in sorted((ROOT / "ddo_hooks").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for name in re.findall(r"\b([\w.-]+\.md)\b", text):
            if not any((where / name).exists() for where in (ROOT, DOCS)) and not list(ROOT.rglob(name)):
                cited.append(f"{path.relative_to(ROOT)}: {name}")
        if re.search(r"^\s*=+(?: +=+)+\s*$", text, re.MULTILINE):  # the API pages render it as a run-on line
            tables.append(str(path.relative_to(ROOT)))
    assert cited == []
    assert tables == []


def test_the_api_index_names_every_public_name():
    import ddo_hooks

    text = (DOCS / "api" / "index.md").read_text(encoding="utf-8")
    missing = [name for name in ddo_hooks.__all__ if f"`{name}`" not in text]
    assert not missing, f"docs/api/index.md does not name {missing}"


def test_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def listed(nav: Any) -> set[str]:
        if isinstance(nav, str):
            return {nav}
        if isinstance(nav, list):
            return set().union(*(listed(item) for item in nav))
        if isinstance(nav, dict):
            return set().union(*(listed(item) for item in nav.values()))
        return set()

    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert listed(config["nav"]) == pages


# -- the pipelines matrix ---------------------------------------------------------------------

MATRIX_PAGE = DOCS / "pipelines.md"
FAMILY_COLUMNS = {"Flux": "flux", "SD 1.5": "sd", "Wan": "wan"}
CELL = re.compile(r"^(?P<where>CPU|GPU) `(?P<id>[\w.\-]+)`$")
UNTESTED = "not yet tested"


def _matrix() -> list[dict[str, str]]:
    """The rows of the offload-mode tables, each with its table's test (named in the line above the table)."""
    lines = MATRIX_PAGE.read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("| Offload mode |")]
    assert starts, f"{MATRIX_PAGE.name}: no table of offload modes"
    rows = []
    for start in starts:
        above = next(line for line in reversed(lines[:start]) if line.strip())
        named = re.findall(r"`(tests/[\w/]+\.py::\w+)`", above)
        test = f"`{named[-1]}`" if named else "—"
        header = [c.strip() for c in lines[start].strip().strip("|").split("|")]
        for line in lines[start + 2 :]:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            assert len(cells) == len(header), f"{MATRIX_PAGE.name}: a row with {len(cells)} cells: {line}"
            rows.append({**dict(zip(header, cells, strict=True)), "Test": test})
    return rows


def _collected(paths: set[str]) -> set[str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "gpu or not gpu",
            *sorted(paths),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}


def test_the_pipelines_matrix_names_tests_that_exist_and_every_id_of_them():
    rows = _matrix()
    assert rows
    assert set(FAMILY_COLUMNS) <= set(rows[0])
    problems, listed = [], {}
    for row in rows:
        mode, test = row["Offload mode"], row["Test"]
        cells = {family: row[column] for column, family in FAMILY_COLUMNS.items()}
        if test == "—":
            problems += [
                f"{mode} / {f}: {c!r} needs a test in the Test column" for f, c in cells.items() if c != UNTESTED
            ]
            continue
        path = test.strip("`")
        if not re.fullmatch(r"tests/[\w/]+\.py::\w+", path):
            problems.append(f"{mode}: the Test cell {test!r} is not `tests/...py::test_name`")
            continue
        for family, cell in cells.items():
            if cell == UNTESTED:
                continue
            m = CELL.match(cell)
            if m is None:
                problems.append(f"{mode} / {family}: {cell!r} is not 'CPU `id`', 'GPU `id`' or {UNTESTED!r}")
            elif (m["where"] == "GPU") != path.startswith("tests/gpu/"):
                problems.append(f"{mode} / {family}: {m['where']} does not match where {path} runs")
            elif family not in m["id"].split("-"):
                problems.append(f"{mode} / {family}: the id {m['id']!r} is not this family's")
            else:
                listed[f"{path}[{m['id']}]"] = f"{mode} / {family}"
    assert not problems, "\n".join(problems)

    paths = {node.split("::")[0] for node in listed}
    collected = _collected(paths)
    absent = [f"{where}: {node}" for node, where in listed.items() if node not in collected]
    assert not absent, "the matrix names tests that do not exist:\n" + "\n".join(absent)
    functions = {node.split("[")[0] for node in listed}
    unlisted = sorted(node for node in collected if node.split("[")[0] in functions and node not in listed)
    assert not unlisted, "ids of the matrix's tests that the matrix does not list:\n" + "\n".join(unlisted)


def test_the_policy_page_spells_out_the_packaged_default_as_it_is():
    preset = (ROOT / "ddo_hooks" / "policy" / "presets" / "default.yaml").read_text(encoding="utf-8")
    body = "".join(line for line in preset.splitlines(keepends=True) if not line.startswith("#"))
    first = next(b for b in extract_blocks(DOCS / "policy.md") if b.kind == "policy")
    assert first.text == body, "docs/policy.md's first block must be ddo_hooks/policy/presets/default.yaml"
