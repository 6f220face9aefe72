"""The README says plainly how to install, and what a DDO report is where it first names one."""

from __future__ import annotations

import re
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
