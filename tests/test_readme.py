"""The README: how to install, what a DDO report is where it first names one, a GPU run as it was."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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


def test_a_ddo_report_is_spelled_out_where_the_readme_first_names_one():
    first = _flat(TEXT).index("DDO report")
    spelled = _flat(TEXT).find("DDO: diffusers dynamic offloader")
    assert 0 <= spelled - first < 200, "say what a DDO report is right where the README first names one"
    assert "validated report" in _paragraph_with("DDO report")


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
    first = "\n".join(TEXT.splitlines()[:18])
    assert "For people who run large diffusion models through diffusers with group offloading" in _flat(first)
    # the gain, as the box benchmark's checked-in results give it (tests/test_benchmarks_page.py holds the rest)
    assert "`attach` with the `default` policy and `pinned_copies.from_files: register`" in _flat(first)
    assert "ran in a cgroup `memory.max` of 5.75 GiB at 2.56 s a call, where doing nothing needed 11.75 GiB" in _flat(
        first
    )
    assert "![The smallest cgroup box against the call time, per arm](docs/img/box.png)" in first
    assert "1.5 minutes" in first  # what the first command costs, before it runs
    assert "the test suite (5:58 on 2 cores at a load average of 0.9" in _flat(first)  # and the second, measured


def test_pip_install_ddo_hooks_appears_only_as_what_it_will_be_once_published():
    text = _paragraph_with("CUDA machine")
    assert "ddo-hooks is not on PyPI yet; once it is, that will be `pip install ddo-hooks`" in text
    everywhere = _flat(TEXT) + " ".join(p.read_text(encoding="utf-8") for p in README.parent.glob("docs/*.md"))
    assert everywhere.count("pip install ddo-hooks") == 1
    assert "ddo-hooks[plot]" not in everywhere
