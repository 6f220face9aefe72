"""Check that every internal link and image of a built mkdocs site resolves to a file of the site.

`check_site(site, site_url)` reads every HTML file under `site`, takes each `href` and `src`,
and resolves it as a browser would from the page's URL: relative links against the page,
absolute paths and the site's own full URLs against `site_url` (the site is served from its
sub-path, e.g. `/ddo-hooks/`). External `http(s)` links, `mailto:`, `javascript:` and `data:`
are left alone. A `#fragment` must name an `id` (or an `<a name>`) of the target page.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

SKIPPED_SCHEMES = {"mailto", "javascript", "data", "tel"}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            if name in ("href", "src"):
                self.links.append((tag, name, value))


def _read(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _page_url(site: Path, path: Path, base: str) -> str:
    """The URL path a page is served at, e.g. ``/ddo-hooks/cli/`` for ``cli/index.html``."""
    relative = path.relative_to(site).as_posix()
    if relative == "index.html":
        return base
    if relative.endswith("/index.html"):
        return base + relative[: -len("index.html")]
    return base + relative


def _target(site: Path, url_path: str, base: str) -> Path | None:
    """The file a URL path under ``base`` is served from, or None when it is outside the site."""
    if not url_path.startswith(base):
        return None
    inside = unquote(url_path[len(base) :])
    candidate = site / inside if inside else site
    if inside.endswith("/") or not inside or candidate.is_dir():
        candidate = candidate / "index.html"
    return candidate


def check_site(site: Path, site_url: str) -> tuple[list[str], int]:
    """Every broken internal link of the site, as ``page: <tag attr="value">: problem``, and how many were checked."""
    split = urlsplit(site_url)
    base = split.path if split.path.endswith("/") else split.path + "/"
    pages = {path: _read(path) for path in sorted(site.rglob("*.html"))}
    problems: list[str] = []
    checked = 0
    for path, page in pages.items():
        here = _page_url(site, path, base)
        for tag, attribute, value in page.links:
            where = f"{path.relative_to(site).as_posix()}: <{tag} {attribute}={value!r}>"
            link = urlsplit(value)
            if link.scheme in SKIPPED_SCHEMES:
                continue
            if link.scheme or link.netloc:
                if not value.startswith(site_url):
                    continue  # an external link
                url_path = base + value[len(site_url) :].split("#")[0].split("?")[0]
            else:  # relative to the page, as a browser resolves it ("#anchor" is this page)
                url_path = urlsplit(urljoin(f"http://site{here}", value)).path
            checked += 1
            target = _target(site, url_path, base)
            if target is None:
                problems.append(f"{where}: {url_path} is outside the site's path {base}")
                continue
            if not target.is_file():
                problems.append(f"{where}: {url_path} is not a file of the site ({target.relative_to(site)})")
                continue
            fragment = unquote(link.fragment)
            if fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _read(target).ids
                if fragment not in ids:
                    problems.append(f"{where}: no id {fragment!r} in {target.relative_to(site).as_posix()}")
    return problems, checked
