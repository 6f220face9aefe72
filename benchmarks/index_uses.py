"""Where the docs, the README, the benchmarks and the tests name a results file (for ``index.py``; not run on its own).

A page names ``benchmarks/results/NAME`` in one of five ways, all found here:

* its name (``bench_box-today.json``, with or without a folder before it);
* a pattern (``bench_soak-*.json``): every results file it matches;
* ``-name.json`` after a full name in the same paragraph: the same script's ``<script>-name.json``;
* a range, ``bench_box-timing-5.json`` to ``bench_box-timing-7.json``: the numbers between too;
* a placeholder (``bench_box-<run>.json``): each word in code in the same section, as a run of that name.

Code (``benchmarks/*.py``, ``tests/**/*.py``) names one the same ways in its text, or as a string constant ``N``
in a module whose f-string builds ``<prefix>{...}<ext>`` (``f"bench_box-{name}.json"``, ``"timing-6"``).
A page's section is the nearest ``##`` or ``###`` heading above the mention, or the page itself above the first.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TOKEN = re.compile(r"(?<![\w*<>.\-])[\w*<>.\-]+\.(?:json|log)\b")
RANGE = re.compile(r"`(?P<a>[\w.\-]+)` to `(?P<b>[\w.\-]+)`")
NUMBERED = re.compile(r"(?P<stem>.+-)(?P<n>\d+)(?P<ext>\.\w+)")
CODE_WORD = re.compile(r"`([\w.\-]+)`")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Section:
    """A section of a page: the page (docs-relative, or ``README.md``), its title, its heading and anchor."""

    page: str
    title: str
    heading: str | None  # None: the page itself, above its first ``##``
    anchor: str | None


def slug(text: str) -> str:
    """The anchor Python-Markdown's ``toc`` gives a heading's text (its default ``slugify``).

    Examples:
        >>> slug("At FLUX.1-dev's own shapes")
        'at-flux1-devs-own-shapes'
        >>> slug("`bench_box.py`")
        'bench_boxpy'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _unique(anchor: str, used: set[str]) -> str:
    """An anchor made unique as ``toc`` does: ``_1``, ``_2``... after one already used."""
    while anchor in used or not anchor:
        match = re.fullmatch(r"(.*)_(\d+)", anchor)
        anchor = f"{match.group(1)}_{int(match.group(2)) + 1}" if match else f"{anchor}_1"
    used.add(anchor)
    return anchor


def _paragraphs(text: str, page: str) -> Iterator[tuple[Section, str]]:
    """Each paragraph (lines outside code fences between blank lines and headings) with its section."""
    title, section = page, None
    used: set[str] = set()  # the anchors given so far
    lines: list[str] = []
    fence = None
    for line in [*text.splitlines(), ""]:
        match = FENCE.match(line)
        if fence or match:
            if fence is None:
                fence = match.group(1) if match else None
            elif line.strip().startswith(fence):
                fence = None
            continue
        heading = HEADING.match(line)
        if heading or not line.strip():
            if lines:
                yield section or Section(page, title, None, None), " ".join(lines)
                lines = []
            if heading:
                level, words = len(heading.group(1)), heading.group(2)
                anchor = _unique(slug(words), used)
                if level == 1:
                    title = words
                if level <= 3:
                    section = Section(page, title, words, anchor) if level > 1 else None
            continue
        lines.append(line.strip())


def _stem(name: str) -> str:
    """The script part of a results file's name: ``bench_box`` of ``bench_box-today.json``."""
    return re.split(r"[-.]", name, maxsplit=1)[0]


def named_in_text(text: str, names: set[str]) -> set[str]:
    """The results files a paragraph (or a whole source file) names by name, pattern, short name or range.

    Examples:
        >>> names = {"bench_x-a.json", "bench_x-b.json", "bench_x-run-1.json", "bench_x-run-2.json", "bench_y.json"}
        >>> sorted(named_in_text("`bench_x-a.json` and `-b.json`; see `bench_y.json`", names))
        ['bench_x-a.json', 'bench_x-b.json', 'bench_y.json']
        >>> sorted(named_in_text("`bench_x-run-1.json` to `bench_x-run-2.json`", names))
        ['bench_x-run-1.json', 'bench_x-run-2.json']
        >>> sorted(named_in_text("every `bench_x-*.json`, not `*.json`", names))
        ['bench_x-a.json', 'bench_x-b.json', 'bench_x-run-1.json', 'bench_x-run-2.json']
    """
    found: set[str] = set()
    last = None  # the last full name seen: what a short ``-name.json`` completes
    for token in TOKEN.findall(text):
        if token in names:
            found.add(token)
            last = _stem(token)
        elif "*" in token and len(_stem(token.partition("*")[0])) > 2:  # not ``*.json``: a script's files
            found.update(fnmatch.filter(names, token))
        elif token.startswith("-") and last and f"{last}{token}" in names:
            found.add(f"{last}{token}")
    for match in RANGE.finditer(text):
        a, b = NUMBERED.fullmatch(match.group("a")), NUMBERED.fullmatch(match.group("b"))
        if a and b and a.group("stem", "ext") == b.group("stem", "ext"):
            between = range(int(a.group("n")), int(b.group("n")) + 1)
            found.update(n for k in between if (n := f"{a.group('stem')}{k}{a.group('ext')}") in names)
    return found


def page_uses(text: str, page: str, names: set[str]) -> dict[str, list[Section]]:
    """Each results file a Markdown page names, with the sections that name it, in page order."""
    uses: dict[str, list[Section]] = {}
    placeholders: dict[Section, list[str]] = {}
    words: dict[Section, list[str]] = {}

    def add(name: str, section: Section) -> None:
        if section not in uses.setdefault(name, []):
            uses[name].append(section)

    for section, paragraph in _paragraphs(text, page):
        for name in sorted(named_in_text(paragraph, names)):
            add(name, section)
        placeholders.setdefault(section, []).extend(t for t in TOKEN.findall(paragraph) if "<" in t)
        words.setdefault(section, []).extend(CODE_WORD.findall(paragraph))
    for section, found in placeholders.items():
        for placeholder in found:
            before, _, after = placeholder.partition("<")
            after = after.partition(">")[2]
            for word in words[section]:
                if f"{before}{word}{after}" in names:
                    add(f"{before}{word}{after}", section)
    return uses


def code_names(source: str, names: set[str]) -> set[str]:
    """The results files a Python source names: in its text, or as a constant its f-strings complete."""
    found = named_in_text(source, names)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return found
    affixes = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for before, value, after in zip(parts, parts[1:], [*parts[2:], None], strict=False):
                if isinstance(before, ast.Constant) and isinstance(value, ast.FormattedValue):
                    prefix = re.search(r"[\w.\-]+-$", str(before.value))
                    ext = re.match(r"\.(?:json|log)", str(after.value)) if isinstance(after, ast.Constant) else None
                    if prefix and ext:
                        affixes.add((prefix.group(), ext.group()))
    constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    found.update(f"{p}{c}{e}" for p, e in affixes for c in constants if f"{p}{c}{e}" in names)
    return found


def all_uses(root: Path, names: set[str], skip: set[Path]) -> tuple[dict[str, list[Section]], dict[str, list[str]]]:
    """The docs sections and the code files that name each results file (``skip``: the map and its test)."""
    sections: dict[str, list[Section]] = {}
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    for path in pages:
        if path in skip:
            continue
        page = "README.md" if path.parent == root else path.relative_to(root / "docs").as_posix()
        for name, found in page_uses(path.read_text(encoding="utf-8"), page, names).items():
            sections.setdefault(name, []).extend(found)
    code: dict[str, list[str]] = {}
    for path in [*sorted((root / "benchmarks").glob("*.py")), *sorted((root / "tests").rglob("*.py"))]:
        if path in skip:
            continue
        for name in code_names(path.read_text(encoding="utf-8"), names):
            code.setdefault(name, []).append(path.relative_to(root).as_posix())
    return sections, code


def section_of(root: Path, page: str, heading: str) -> Section:
    """The section of ``docs/<page>`` under the ``##`` or ``###`` heading ``heading`` (KeyError: none)."""
    text = (root / "docs" / page).read_text(encoding="utf-8")
    for section, _ in _paragraphs(text, page):
        if section.heading == heading:
            return section
    raise KeyError(f"docs/{page} has no section {heading!r}")
