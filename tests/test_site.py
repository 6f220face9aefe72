"""The built docs site: its links and images resolve, served from its sub-path, the 404 page included."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from site_links import check_site

ROOT = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def test_the_site_and_the_repository_urls_agree():
    site, repo = CONFIG["site_url"], CONFIG["repo_url"]
    owner, name = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", repo).groups()
    # GitHub Pages serves a project's site from https://OWNER.github.io/REPOSITORY/
    assert site == f"https://{owner}.github.io/{name}/"
    assert CONFIG["repo_name"] == f"{owner}/{name}"


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
