"""What a browser shows of the built docs in a 1280x900 window: wide tables and code blocks, long pages.

``tests/test_docs_widths.py`` measures the Markdown and the docstrings by the theme's numbers; this
script checks the same thing in a real browser (headless Chromium, e.g. ``apt install chromium``),
page by page: it prints each table and code block that runs past the content column, and each
page's height in screens (``document.documentElement.scrollHeight`` over the window's 900 px).

    mkdocs build -d /tmp/site && python3 scripts/site_widths.py --site /tmp/site

Prints one line per page (its height in screens, its wide tables and wide code blocks with their
widths in px), then the totals; exits 1 when a table or code block is wider than the column or a
page is longer than :data:`MAX_SCREENS` screens, 2 when no browser is at hand.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

WINDOW = (1280, 900)
"""The browser window, width and height in px: a screen is its height."""
MAX_SCREENS = 12
"""The longest a page may be, in screens (issue 52: no page of the docs over 12 screens at 1280x900)."""

PROBE = r"""<script>window.addEventListener('load', () => {
  const column = document.querySelector('.md-content__inner').clientWidth;
  const name = e => (e.closest('.doc-object')?.querySelector('h2,h3,h4')?.id
    || e.textContent.replace(/\s+/g, ' ').trim().slice(0, 40));
  const tables = [...document.querySelectorAll('.md-typeset table')].filter(t => t.scrollWidth > column + 1)
    .map(t => `table "${name(t)}" ${t.scrollWidth}px`);
  const code = [...document.querySelectorAll('pre > code')].filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => `code "${name(c)}" ${c.scrollWidth}px`);
  const out = document.createElement('pre');
  out.id = 'SITE-WIDTHS';
  const height = document.documentElement.scrollHeight;
  out.textContent = JSON.stringify({column, height, wide: [...tables, ...code]});
  document.body.appendChild(out);
});</script>"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No line per request."""


def measure(browser: str, url: str) -> dict[str, object]:
    """The content column's width, the page's height and its wide elements, as the browser lays it out."""
    import html
    import json
    import re

    dom = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000",
         f"--window-size={WINDOW[0]},{WINDOW[1]}", "--dump-dom", url],
        capture_output=True, text=True, timeout=120, check=False,
    ).stdout  # fmt: skip
    found = re.search(r'<pre id="SITE-WIDTHS">(.*?)</pre>', dom, flags=re.DOTALL)
    if not found:
        return {"column": None, "height": None, "wide": ["no measurement"]}
    return json.loads(html.unescape(found.group(1)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, required=True, help="a built site (mkdocs build -d DIR)")
    parser.add_argument("--browser", default=shutil.which("chromium") or shutil.which("chromium-browser") or "")
    args = parser.parse_args(argv)
    if not args.browser:
        print("site_widths: no chromium on PATH; nothing measured", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as copy:
        site = Path(shutil.copytree(args.site, Path(copy) / "site"))
        pages = sorted(site.rglob("index.html"))
        for page in pages:  # the probe goes into a copy: the built site stays as it is
            page.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
        handler = functools.partial(_Quiet, directory=str(site))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        total, long = 0, []
        try:
            for page in pages:
                path = "" if page.parent == site else page.parent.relative_to(site).as_posix()
                found = measure(args.browser, f"http://127.0.0.1:{server.server_port}/" + (f"{path}/" if path else ""))
                screens = found["height"] / WINDOW[1] if found["height"] else float("nan")  # type: ignore[operator]
                if not screens <= MAX_SCREENS:  # a page not measured counts as too long
                    long.append(path or "(home)")
                wide: list[str] = found["wide"]  # type: ignore[assignment]
                print(f"{path or '(home)'}: {screens:.1f} screens, column {found['column']} px, {len(wide)} wide",
                      *wide, sep="\n    " if wide else "")  # fmt: skip
                total += len(wide)
        finally:
            server.shutdown()
    print(f"{len(pages)} pages, {total} tables or code blocks wider than the content column at {WINDOW[0]} px")
    print(f"{len(long)} pages longer than {MAX_SCREENS} screens of {WINDOW[1]} px", *long, sep="\n    " if long else "")
    return 1 if total or long else 0


if __name__ == "__main__":
    raise SystemExit(main())
