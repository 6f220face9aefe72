"""The shipped example policies run against the docs' own examples: each validates and attaches, as written.

``examples/custom-action.yaml`` names ``my_pkg.log_memory``, the action ``docs/actions.md`` writes and registers:
the page's code defines it here (the same text the docs tests run), and every example policy is then checked by
``validate-policy`` and attached to a tiny pipeline for a call, so an example whose options the docs' action does not
take fails here, with the option's name.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddo_hooks import MetricsTracker, attach, unregister_action
from ddo_hooks.cli import main
from ddo_hooks.testing.tiny_pipelines import build_pipeline, call_kwargs

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
DOCS_ACTION = "my_pkg.log_memory"


def docs_action_code() -> str:
    """The code of docs/actions.md's first example up to its policy: the options model and the registered action."""
    page = (ROOT / "docs" / "actions.md").read_text(encoding="utf-8")
    first = re.search(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert first is not None, "docs/actions.md opens with a python example"
    code = first.group(1).split("\npolicy = ", 1)[0]
    assert f'@register_action("{DOCS_ACTION}", options=LogMemoryOptions)' in code
    return code


@pytest.fixture
def docs_action() -> Iterator[None]:
    exec(compile(docs_action_code(), "docs/actions.md", "exec"), {"__name__": "docs_actions"})
    try:
        yield
    finally:
        unregister_action(DOCS_ACTION)


def test_an_example_names_the_docs_action():
    assert any(DOCS_ACTION in path.read_text(encoding="utf-8") for path in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_example_validates_and_attaches_with_the_docs_action(example, docs_action, tmp_path, capsys):
    path = tmp_path / example.name  # a report_sink it names lands here, not in the checkout
    shutil.copy(example, path)
    assert main(["validate-policy", str(path)]) == 0, capsys.readouterr().err
    pipe, tracker = build_pipeline("sd"), MetricsTracker()
    with attach(pipe, str(path), tracker=tracker):
        pipe(**call_kwargs("sd", steps=1))
    assert tracker.records()
    for component, report in tracker.records():
        if component.startswith(DOCS_ACTION):
            action = report.setup.boundary_action
            assert (action.status, action.detail.split(": RSS ")[0]) == ("executed", "after-call")  # its label option
