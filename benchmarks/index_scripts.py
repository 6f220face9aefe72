"""The scripts of ``benchmarks/`` as the map shows them (for ``index.py``; not run on its own).

What each is for (its module docstring's first line), and which steps of ``scripts/gpu_session.sh``, the one call on
the GPU machine, run it.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path


def scripts(folder: Path) -> dict[str, str]:
    """Each Python script of ``folder`` (``benchmarks/``) with the first line of its module docstring."""
    found = {}
    for path in sorted(folder.glob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        found[path.name] = docstring.split("\n", 1)[0]
    return found


def gpu_steps(text: str, names: list[str]) -> dict[str, list[str]]:
    """The steps of ``scripts/gpu_session.sh`` (its ``case`` arms) that run each script, by name or by a glob.

    Examples:
        >>> arms = "    box) python3 benchmarks/bench_box.py --out x\\n    bench) for b in benchmarks/bench_*.py; do\\n"
        >>> gpu_steps(arms, ["bench_box.py", "bench_soak.py", "plot_box.py"])
        {'bench_box.py': ['box', 'bench'], 'bench_soak.py': ['bench']}
    """
    found: dict[str, list[str]] = {}
    for arm in re.finditer(r"^ {4}(?P<step>[\w-]+)\)(?P<body>.*?)(?=^ {4}[\w*-]+\)|\Z)", text, re.M | re.S):
        for pattern in re.findall(r"benchmarks/([\w*]+\.py)", arm.group("body")):
            for name in fnmatch.filter(names, pattern):
                if arm.group("step") not in found.setdefault(name, []):
                    found[name].append(arm.group("step"))
    return found


def first_sentence(shell: str) -> str:
    """The first sentence of a shell script's opening comment.

    Examples:
        >>> first_sentence("#!/bin/sh\\n# One call: install,\\n# then run. More.\\n#\\n# Steps:\\nset -u\\n")
        'One call: install, then run.'
    """
    comment = []
    for line in shell.splitlines()[1:]:
        if not line.startswith("# "):
            break
        comment.append(line.removeprefix("# ").strip())
    return " ".join(comment).split(". ", 1)[0].removesuffix(".") + "."
