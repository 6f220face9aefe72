"""Every public module shows a face: a ``::: module`` line on an API page, and a name in its package's docstring.

A public module is a module or package under ``ddo_hooks/`` no part of whose dotted name starts
with ``_`` (so ``ddo_hooks._compat``, ``ddo_hooks._diagnostics``, ``ddo_hooks.__main__`` and
``ddo_hooks.testing.structural._builders`` are private). They are listed from the source tree with
:func:`pkgutil.iter_modules`, which imports nothing.

* Each public module has a ``::: module`` line (mkdocstrings) on one page of ``docs/api/``, and
  each ``::: `` line there names a public module, once.
* Each public package's ``__init__`` docstring names each of its public submodules: by its dotted
  path (the ``:mod:`~ddo_hooks.layer.module``` of the layers' docstrings), or, in the top
  package's docstring, by its short name in double backticks (``release``).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from support.api_modules import PACKAGE, public_modules

ROOT = PACKAGE.parent
API = ROOT / "docs" / "api"
DIRECTIVE = re.compile(r"^:::[ \t]+(?P<name>\S+)[ \t]*$", re.MULTILINE)


def parent(module: str) -> str:
    return module.rpartition(".")[0]


def source_of(package: str) -> Path:
    return ROOT.joinpath(*package.split("."), "__init__.py")


def directives() -> list[tuple[str, str]]:
    """``(page, module)`` of every ``::: module`` line of the API pages, in page order."""
    found = []
    for page in sorted(API.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        found += [(page.relative_to(ROOT).as_posix(), match["name"]) for match in DIRECTIVE.finditer(text)]
    return found


def nav_pages() -> list[str]:
    """The pages of mkdocs.yml's nav, in its order, as ``docs/...`` paths."""
    found = re.findall(r"^\s*- (?:[^\n]*: )?([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text("utf-8"), re.MULTILINE)
    return [f"docs/{page}" for page in found]


def page_for(module: str, documented: dict[str, str], modules: dict[str, bool]) -> str:
    """Where a module's ``::: `` line belongs.

    The top package goes on the index page; a package, on the page of its own modules; a module, on
    the page of its sibling modules (a layer spreads over a few pages: the one that holds the most of
    them, the first of the nav where two hold as many); else on the page of its nearest documented
    package.
    """
    if module == "ddo_hooks":
        return "docs/api/index.md"
    if modules[module]:
        pages = [page for name, page in documented.items() if name.startswith(f"{module}.")]
    else:
        pages = [
            page for name, page in documented.items() if parent(name) == parent(module) and not modules.get(name, False)
        ]
    if pages:
        order = nav_pages()
        return min(sorted(set(pages)), key=lambda page: (-pages.count(page), order.index(page)))
    package = parent(module)
    while package:
        if package in documented:
            return documented[package]
        package = parent(package)
    return "a new docs/api page (and its entry in mkdocs.yml's nav)"


def missing_from_pages(modules: dict[str, bool], lines: list[tuple[str, str]]) -> list[str]:
    """One line per public module without a ``::: `` line: the module, and the page it belongs on."""
    documented = {module: page for page, module in lines}
    return [
        f"{module}: add '::: {module}' to {page_for(module, documented, modules)}"
        for module in sorted(modules)
        if module not in documented
    ]


def named_in(package: str, module: str, docstring: str) -> bool:
    """Whether a package's docstring names its submodule ``module`` (see the module docstring)."""
    if re.search(rf"(?<![\w.]){re.escape(module)}(?!\w)", docstring):
        return True
    return package == "ddo_hooks" and f"``{module.rpartition('.')[2]}``" in docstring


def test_the_public_modules_are_found_and_the_private_ones_left_out():
    modules = public_modules()
    assert {"ddo_hooks", "ddo_hooks.errors", "ddo_hooks.reports.done_components", "ddo_hooks.reports.ddo.host"} <= set(
        modules
    )
    assert modules["ddo_hooks.testing.structural"]  # a package
    assert not modules["ddo_hooks.hooks.sink"]
    private = [name for name in modules if any(part.startswith("_") for part in name.split("."))]
    assert private == []
    # every public module file is found (pkgutil sees only packages with an __init__.py)
    files = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in PACKAGE.rglob("*.py")
        if not any(part.startswith("_") for part in path.relative_to(ROOT).with_suffix("").parts[:-1])
        and (path.name == "__init__.py" or not path.name.startswith("_"))
    }
    assert files == set(modules)


def test_every_public_module_has_a_line_on_an_api_page():
    missing = missing_from_pages(public_modules(), directives())
    assert not missing, "public modules without a '::: ' line on a docs/api page:\n" + "\n".join(missing)


def test_every_api_line_names_a_public_module_once():
    modules = public_modules()
    pages_of: dict[str, list[str]] = defaultdict(list)
    for page, module in directives():
        pages_of[module].append(page)
    unknown = [f"{pages[0]}: '::: {module}'" for module, pages in pages_of.items() if module not in modules]
    assert not unknown, (
        "'::: ' lines that name no public module of ddo_hooks (renamed, removed or private; fix or drop them):\n"
        + "\n".join(unknown)
    )
    twice = {module: pages for module, pages in pages_of.items() if len(pages) > 1}
    assert not twice, f"modules with more than one '::: ' line (keep one): {twice}"


def test_the_check_names_the_page_a_missing_module_belongs_on():
    left_out = {"ddo_hooks", "ddo_hooks.cli", "ddo_hooks.hooks.idle", "ddo_hooks.reports.ddo.host", "ddo_hooks.sizes"}
    lines = [(page, module) for page, module in directives() if module not in left_out]
    missing = missing_from_pages(public_modules(), lines)
    assert [line for line in missing if line.partition(":")[0] in left_out] == [
        "ddo_hooks: add '::: ddo_hooks' to docs/api/index.md",
        "ddo_hooks.cli: add '::: ddo_hooks.cli' to docs/api/cli.md",
        "ddo_hooks.hooks.idle: add '::: ddo_hooks.hooks.idle' to docs/api/hooks.md",  # most of its siblings
        "ddo_hooks.reports.ddo.host: add '::: ddo_hooks.reports.ddo.host' to docs/api/reports-ddo.md",
        "ddo_hooks.sizes: add '::: ddo_hooks.sizes' to docs/api/foundation.md",
    ]


def test_every_package_docstring_names_its_public_submodules():
    modules = public_modules()
    missing = []
    for package in sorted(name for name, is_package in modules.items() if is_package):
        source = source_of(package)
        docstring = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) or ""
        children = [name for name in sorted(modules) if parent(name) == package]
        unnamed = [name for name in children if not named_in(package, name, docstring)]
        if unnamed:
            forms = ", ".join(
                f"``{name.rpartition('.')[2]}``" if package == "ddo_hooks" else f":mod:`~{name}`" for name in unnamed
            )
            missing.append(f"{source.relative_to(ROOT)}: add {forms} to its docstring, each with a short phrase")
    assert not missing, "package docstrings that do not name their public submodules:\n" + "\n".join(missing)
