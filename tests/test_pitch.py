"""One pitch everywhere: the README, the docs' home, mkdocs.yml, the CLI's help and the package's description.

The sentence is :data:`ddo_hooks.cli.main.PITCH`; change it there and in those files together.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ddo_hooks.cli.main import PITCH, build_parser

ROOT = Path(__file__).resolve().parent.parent


def first_paragraph(path: Path) -> str:
    """The first paragraph after the page's title, on one line, its code marks dropped (``attach(...)``)."""
    title, body = path.read_text(encoding="utf-8").split("\n", 1)
    assert title.startswith("# "), f"{path.name} opens with its title"
    return " ".join(body.strip().split("\n\n", 1)[0].replace("`", "").split())


def test_the_pitch_is_one_sentence_about_smallest_box():
    assert PITCH.count(". ") == 0
    assert PITCH.endswith(".")
    assert 'attach(pipe, "smallest-box")' in PITCH


def test_the_readme_and_the_docs_home_open_with_the_pitch():
    assert first_paragraph(ROOT / "README.md").startswith(PITCH)
    assert first_paragraph(ROOT / "docs" / "index.md") == PITCH


def test_mkdocs_site_description_is_the_pitch():
    lines = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").splitlines()
    (line,) = [line for line in lines if line.startswith("site_description:")]
    assert yaml.safe_load(line)["site_description"] == PITCH


def test_the_package_description_is_the_pitch():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^description = ("(?:[^"\\]|\\.)*")$', pyproject, flags=re.MULTILINE)
    assert found is not None, "pyproject.toml's [project] has a one-line description"
    assert json.loads(found.group(1)) == PITCH  # a TOML basic string escapes as JSON does


def test_the_clis_help_says_the_pitch(capsys):
    assert build_parser().description == PITCH
    from ddo_hooks.cli import main

    assert main(["--help"]) == 0
    assert PITCH in " ".join(capsys.readouterr().out.split())
