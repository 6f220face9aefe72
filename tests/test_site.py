"""The built docs site: its links and images resolve, served from its sub-path, the 404 page included."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from support.site_links import check_site
from support.widths import CODE_LINE_CHARACTERS

ROOT = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def test_the_header_links_to_no_repository_until_there_is_one(built_site):
    # The project is not published yet: a repository link in the header would point at a placeholder.
    assert "repo_url" not in CONFIG
    assert "md-source" not in (built_site.path / "index.html").read_text(encoding="utf-8")
    assert re.fullmatch(r"https://[\w.-]+\.github\.io/[\w.-]+/", CONFIG["site_url"])


def test_every_internal_link_and_image_of_the_site_resolves(built_site):
    if built_site.returncode != 0:
        pytest.fail(f"the site did not build (see test_the_site_builds_strictly):\n{built_site.output}")
    problems, checked = check_site(built_site.path, CONFIG["site_url"])
    assert checked > 1000  # every page's navigation, assets, images, API cross-references
    assert not problems, f"{len(problems)} broken links:\n" + "\n".join(problems[:50])


def test_the_404_page_links_under_the_sites_sub_path(built_site):
    """A 404 page is served at whatever URL was missing, so relative links would break: its own are absolute."""
    if built_site.returncode != 0:
        pytest.fail(f"the site did not build (see test_the_site_builds_strictly):\n{built_site.output}")
    sub_path = urlsplit(CONFIG["site_url"]).path
    page = (built_site.path / "404.html").read_text(encoding="utf-8")
    links = re.findall(r'(?:href|src)="([^"]+)"', page)
    internal = [link for link in links if not re.match(r"[a-z]+:|//", link)]
    assert internal
    assert [link for link in internal if not link.startswith(sub_path)] == []
    assert f'href="{sub_path}cli/"' in page
    assert f'src="{sub_path}assets/javascripts/' in page


def _page(folder: Path, relative: str, body: str) -> None:
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><body>{body}</body></html>", encoding="utf-8")


def test_the_link_checker_sees_broken_links_missing_anchors_and_links_outside_the_sub_path(tmp_path: Path):
    _page(tmp_path, "index.html", '<a href="cli/#usage">ok</a> <img src="img/missing.png"> <a href="#nowhere">x</a>')
    _page(tmp_path, "cli/index.html", '<h2 id="usage">u</h2> <a href="../">up</a> <a href="/elsewhere/">out</a>')
    _page(tmp_path, "404.html", '<a href="/site/cli/#usage">ok</a> <a href="https://example.org/x">external</a>')
    problems, checked = check_site(tmp_path, "https://example.github.io/site/")
    assert checked == 6
    assert problems == [
        "cli/index.html: <a href='/elsewhere/'>: /elsewhere/ is outside the site's path /site/",
        "index.html: <img src='img/missing.png'>: /site/img/missing.png is not a file of the site (img/missing.png)",
        "index.html: <a href='#nowhere'>: no id 'nowhere' in index.html",
    ]


# Measured in headless Chromium at 1280 px (the closing note of 2026-12-01): the content column is
# 688 px; code blocks at 0.54rem (docs/stylesheets/extra.css) fit 100 characters a line (derived in
# tests/support/widths.py, which tests/test_docs_widths.py applies to the pages' Markdown), and a
# table fits when no cell holds a long run of text it cannot break (the longest pipeline class
# name, 46 characters, fits its column). The API pages (docstrings and their source) are left out.
LONGEST_CODE_LINE = CODE_LINE_CHARACTERS
CODE_FONT = "font-size: 0.54rem;"
LONGEST_UNBREAKABLE_IN_A_CELL = 48


def _user_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("index.html") if not {"api", "assets", "schemas"} & set(p.parts))


def _text(html: str) -> str:
    import html as entities

    return entities.unescape(re.sub(r"<[^>]+>", "", html))


def test_no_code_block_or_table_of_a_page_is_wider_than_the_content_column(built_site):
    if built_site.returncode != 0:
        pytest.fail(f"the site did not build (see test_the_site_builds_strictly):\n{built_site.output}")
    problems = []
    for page in _user_pages(built_site.path):
        html = page.read_text(encoding="utf-8")
        where = page.relative_to(built_site.path).parent.as_posix() or "home"
        for block in re.findall(r"<pre[^>]*>(.*?)</pre>", html, flags=re.DOTALL):
            longest = max(_text(block).splitlines() or [""], key=len)
            if len(longest) > LONGEST_CODE_LINE:
                problems.append(f"{where}: a code line of {len(longest)} characters: {longest[:60]}...")
        for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", html, flags=re.DOTALL):
            runs = re.split(r"\s+|<wbr>", re.sub(r"<(?!wbr)[^>]+>", "", cell))
            run = max(runs, key=len)
            if len(run) > LONGEST_UNBREAKABLE_IN_A_CELL and "://" not in run:
                problems.append(f"{where}: a table cell cannot break {run!r}")
    assert len(_user_pages(built_site.path)) > 10
    assert CODE_FONT in (ROOT / "docs" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert not problems, "\n".join(problems)


API_INDEX = ROOT / "docs" / "api" / "index.md"
OFFLOAD_NAMES = (
    "apply_offload_runtime",
    "OffloadRuntimeApplication",
    "OffloadedComponent",
    "OffloadRuntime",
    "register_offload_runtime",
    "unregister_offload_runtime",
    "available_runtimes",
    "SourceObservationAdapter",
    "IntervalObservingAdapter",
    "PayloadInterval",
)


def _entry(name: str, module: str) -> str:
    """The link to a name's entry: the API page that documents its module, at the id mkdocstrings gives it."""
    pages = [
        page.name
        for page in sorted(API_INDEX.parent.glob("*.md"))
        if re.search(rf"^::: {re.escape(module)}$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    ]
    assert len(pages) == 1, f"{module} should be documented on one API page, not {pages}"
    return f"[`{name}`]({pages[0]}#{module}.{name})"


def test_each_name_of_the_api_index_links_to_its_entry():
    """The index's names are links (the built site's anchors are checked by the test of every link above)."""
    import ddo_hooks
    import ddo_hooks.offload

    text = API_INDEX.read_text(encoding="utf-8")
    table = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| Task")]
    named = {name for row in table for name in re.findall(r"`(\w+)`", row.split(" | ", 1)[1])}
    assert named == set(ddo_hooks.__all__), "the index's table should name every public name"
    unlinked = [row for row in table if re.search(r"(?<!\[)`\w+`(?!\]\()", row.split(" | ", 1)[1])]
    assert not unlinked, f"names that are not links: {unlinked}"
    assert set(OFFLOAD_NAMES) <= set(ddo_hooks.offload.__all__)
    modules = {**ddo_hooks._EXPORTS, **{n: getattr(ddo_hooks.offload, n).__module__ for n in OFFLOAD_NAMES}}
    missing = [link for link in (_entry(name, module) for name, module in modules.items()) if link not in text]
    assert not missing, "docs/api/index.md should link:\n" + "\n".join(missing)
