"""The README: how to install, what a report is where it first names one, a GPU run as it was."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from support.file_modules import load_file

README = Path(__file__).resolve().parent.parent / "README.md"
TEXT = README.read_text(encoding="utf-8")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _paragraph_with(needle: str) -> str:
    """The first paragraph of the README's prose (outside code blocks) that holds ``needle``."""
    prose = re.sub(r"```.*?```", "", TEXT, flags=re.DOTALL)
    return next(_flat(p) for p in prose.split("\n\n") if needle in _flat(p))


def test_the_install_text_says_to_install_cuda_torch_first_then_the_package():
    text = _paragraph_with("CUDA machine")
    assert "install your own CUDA build of torch first" in text
    assert "`pip install ddo-hooks`" in text
    assert '`pip install -e ".[demo]"`' in text
    assert text.index("CUDA build of torch first") < text.index("`pip install ddo-hooks`")


def test_the_install_text_says_what_the_torch_pin_is_and_how_to_get_a_small_cpu_build():
    text = _paragraph_with("torch==2.13.0")
    assert "is what CI here uses" in text
    assert "on a plain public index (PyPI) that version is a CUDA build" in text
    assert "--index-url https://download.pytorch.org/whl/cpu" in text


def test_a_report_is_said_where_the_readme_first_names_one_and_ddo_names_only_the_other_package():
    assert "validated account" in _paragraph_with("returns a *report*")
    assert "DDO report" not in _flat(TEXT)  # "DDO" is diffusers-dynamic-offloader; ddo-hooks writes reports


def test_the_gpu_table_is_what_summarize_prints_for_the_saved_h200_reports():
    # The README shows `ddo-hooks summarize` of reports saved on the H200; the output must be
    # exactly what the command prints for that file today.
    block = re.search(r"```console\n\$ ddo-hooks summarize (\S+)\n(.*?)```", TEXT, flags=re.DOTALL)
    assert block is not None, "the GPU section shows `ddo-hooks summarize` of the saved H200 reports"
    path, shown = block.group(1), block.group(2)
    assert path.startswith("examples/reports/h200-")
    proc = subprocess.run(
        [sys.executable, "-m", "ddo_hooks", "summarize", path], cwd=README.parent, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert shown == proc.stdout


def test_the_first_screen_says_who_it_is_for_what_they_gain_and_shows_the_plot():
    top = _flat(TEXT.split("<!-- docs-test:", 1)[0])  # before the two commands: who, what, one result
    assert top.startswith("# ddo-hooks For people who run large diffusion models")  # the pitch: tests/test_pitch.py
    assert "1.5 minutes" in top  # what the first command costs, before it runs
    assert "the second runs the tests (how long they take: [development](docs/development.md#tests))" in top
    assert not re.search(r"\d,\d{3} passed|load average", top)  # CI's figures are on the development page
    first = TEXT[: TEXT.index("## On a GPU")]  # the first screen; tests/test_runtimes_page.py holds its figures
    glossary = first.index("| word | what it means here |")
    gains = first.index("## What it gains")
    assert glossary < gains, "the glossary comes before the words it defines are used"
    for word in ("box", "pinned, registered", "offload, onload", "offload runtime", "DDO", "boundary", "steady call"):
        assert f"| {word} |" in first[glossary:gains], f"the glossary lacks {word}"
    for word in (r"(?<!-)\bbox\b", "steady call", "DDO", "registered"):  # used after the glossary only
        assert not re.search(word, top), word
    presets = [line for line in first.splitlines() if line.startswith("| ") and line.endswith("` |")]
    assert [line.rsplit("|", 2)[1].strip() for line in presets] == [
        "`smallest-box`",
        "`default`",
        "`lowest-peak`",
        "`streamed-box`",
    ]
    assert "| DDO | diffusers-dynamic-offloader, a separate package" in first  # what DDO is to this project
    for what in ("`low_cpu_mem_usage=False`", "With `True`", "DDO's `enable_pipeline_offload`"):  # the baselines
        assert what in _flat(first)
    assert "![Memory against the steady call, one point per arm](docs/img/box-runtimes.png)" in first


def test_pip_install_ddo_hooks_appears_only_as_what_it_will_be_once_published():
    text = _paragraph_with("CUDA machine")
    assert "ddo-hooks is not on PyPI yet; once it is, that will be `pip install ddo-hooks`" in text
    everywhere = _flat(TEXT) + " ".join(p.read_text(encoding="utf-8") for p in README.parent.glob("docs/*.md"))
    assert everywhere.count("pip install ddo-hooks") == 1
    assert "ddo-hooks[plot]" not in everywhere


GIB = 2**30


def test_the_problem_sections_figures_of_dropped_encoders_are_those_of_the_checked_in_run():
    """'What problem it solves': the encoders dropped, each setting, from bench_pinned_memory.json (one run)."""
    root = README.parent
    bench = load_file(root / "benchmarks" / "bench_pinned_memory.py", "bench_pinned_memory", beside=True)
    doc = json.loads((root / "benchmarks" / "results" / "bench_pinned_memory.json").read_text(encoding="utf-8"))
    summary = bench.summarize(doc["runs"])
    text = _flat(TEXT)
    false, true = summary["b/group_lcmu_false"], summary["b/group_lcmu_true"]
    release = false["ddo_hooks"]["boundaries"][0]
    assert release["boundary"] == "before_transformer"
    assert release["allocator_bytes_delta"] == false["ddo_hooks"]["encoders_pinned"]
    expected = [
        f"leave {false['ddo_hooks']['encoders_pinned'] / GIB:.2f} GiB of pinned copies cached",
        f"gives them back in {release['timings']['release_seconds']:.2f} s ({release['elapsed_seconds']:.2f} s with",
        f"after the second call is {false['ddo_hooks']['resting_rss'][-1] / GIB:.2f} GiB instead of "
        f"{false['nothing']['resting_rss'][-1] / GIB:.2f};",
        f"lowered the peak RSS from {true['nothing']['peak_rss'] / GIB:.2f} GiB to "
        f"{true['ddo_hooks']['peak_rss'] / GIB:.2f} GiB",
        f"call from {true['nothing']['resting_rss'][-1] / GIB:.2f} GiB to "
        f"{true['ddo_hooks']['resting_rss'][-1] / GIB:.2f} GiB.",
    ]
    missing = [piece for piece in expected if piece not in text]
    assert not missing, f"the README should say, from the checked-in run: {missing}"
