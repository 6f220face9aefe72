"""What the process holds at module level and changes at run time: exactly the objects docs/architecture.md lists.

A module-level container (a dict, list, set, deque or weak container) that a function of its module changes in
place, or a module-level instance of a ddo_hooks class whose ``__init__`` makes such a container, is state of the
process: the architecture page's table names each one, and nothing else is.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "ddo_hooks"
CONTAINERS = {"dict", "list", "set", "deque", "defaultdict", "OrderedDict", "Counter"} | {
    "WeakKeyDictionary", "WeakValueDictionary", "WeakSet"
}  # fmt: skip
MUTATORS = {"append", "add", "pop", "setdefault", "update", "clear", "remove", "discard", "extend", "insert", "popitem"}


def _callee(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)


def _makes_container(value: ast.AST | None) -> bool:
    return isinstance(value, (ast.Dict, ast.List, ast.Set)) or _callee(value) in CONTAINERS


def _changed_in_place(tree: ast.Module, name: str) -> bool:
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else []
            if any(isinstance(t, ast.Subscript) and getattr(t.value, "id", None) == name for t in targets):
                return True
            called = node.func if isinstance(node, ast.Call) else None
            if isinstance(called, ast.Attribute) and called.attr in MUTATORS and getattr(called.value, "id", 0) == name:
                return True
    return False


def process_state() -> set[str]:
    """Each module-level object of ddo_hooks that changes at run time, as ``module:name``."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(PACKAGE.rglob("*.py"))}
    holders = {
        cls.name
        for tree in trees.values()
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for init in cls.body
        if isinstance(init, ast.FunctionDef) and init.name == "__init__"
        for node in ast.walk(init)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and _makes_container(node.value)
    }
    found = set()
    for path, tree in trees.items():
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for node in tree.body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if not isinstance(target, ast.Name):
                    continue
                mutable = _makes_container(node.value) and _changed_in_place(tree, target.id)
                if mutable or _callee(node.value) in holders:
                    found.add(f"{module}:{target.id}")
    return found


def test_the_process_holds_four_objects_that_change_and_the_architecture_page_names_each():
    found = process_state()
    assert found == {
        "ledger:LEDGER",
        "actions.registry:REGISTRY",
        "offload.runtimes:_RUNTIMES",
        "release.guard:_open",
    }
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("## What the process holds", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == len(found)
    assert section.split()[0] == "Four"
    for entry in found:
        module = entry.split(":")[0]
        assert any(row.startswith(f"| `{module}") for row in rows), entry
