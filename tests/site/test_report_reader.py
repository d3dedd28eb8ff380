"""The report as a reader opens it from the file system, on a desktop (1400x900) and a phone (390x844):
every page answers first (a verdict line on the first screen), no table cell breaks a token (a number,
an identifier, a dtype) across lines, no link points at a missing file and no page logs a console error,
404.html included."""

import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from test_report_site import ARTIFACTS  # same folder: pytest puts it on sys.path

SIZES = ((1400, 900), (390, 844))

#: Every whitespace-separated token of every table cell whose characters lie on more than one line box.
TOKEN_PROBE = """() => {
  const split = [];
  for (const cell of document.querySelectorAll('.md-content td, .md-content th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /\\S{2,}/g;
      let m;
      while ((m = re.exec(node.nodeValue))) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const rects = Array.from(range.getClientRects()).filter(r => r.width > 0 && r.height > 0)
          .sort((a, b) => a.top - b.top);
        let lines = 0, bottom = -Infinity;
        for (const r of rects) { if (r.top >= bottom - 1) { lines += 1; bottom = r.bottom; } }
        if (lines > 1) split.push(m[0]);
      }
    }
  }
  return split;
}"""

#: The top of the page's first verdict line, at the top of the page (null: none).
VERDICT_PROBE = """() => {
  window.scrollTo(0, 0);
  const line = document.querySelector('.md-content .verdict-line');
  return line ? line.getBoundingClientRect().top : null;
}"""

#: The widest and narrowest table column of the page (first row's cells), in px.
NARROWEST_PROBE = """() => Math.min(Infinity, ...Array.from(document.querySelectorAll('.md-content table tr:first-child > *'))
  .map(c => c.getBoundingClientRect().width).filter(w => w > 0))"""


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"a": "href", "link": "href", "script": "src", "img": "src"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.targets.append(value)


def broken_links(build: Path, page: Path) -> list[str]:
    """Every relative href / src of the page's <a>, <link>, <script>, <img> that names no file of the site."""
    parser = _Links()
    parser.feed(page.read_text())
    broken = []
    for target in parser.targets:
        parts = urlsplit(target)
        if parts.scheme or parts.netloc or not parts.path:  # not relative (the theme's credit link), or #fragment
            continue
        path = unquote(parts.path)
        resolved = (build / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
        if (
            path.startswith("/")
            or not resolved.resolve().is_file()
            or build.resolve() not in resolved.resolve().parents
        ):
            broken.append(target)
    return broken


@pytest.mark.slow
@pytest.mark.browser
def test_every_page_answers_first_keeps_tokens_whole_and_links_resolve(full_site, chromium_path):
    playwright = pytest.importorskip("playwright.sync_api")
    build = full_site["build"]
    pages = sorted(build.rglob("*.html"))
    assert build / "404.html" in pages and build / "results" / "devices.html" in pages
    figures: dict[str, dict[str, object]] = {}
    links = {p.relative_to(build).as_posix(): broken_links(build, p) for p in pages}
    problems: list[str] = [f"{rel}: broken links {bad[:5]}" for rel, bad in links.items() if bad]
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
        try:
            for width, height in SIZES:
                size = f"{width}x{height}"
                page = browser.new_page(viewport={"width": width, "height": height})
                errors: list[str] = []
                page.on("console", lambda m, acc=errors: acc.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e, acc=errors: acc.append(str(e)))
                page.on("requestfailed", lambda r, acc=errors: acc.append(f"request failed: {r.url}"))
                splits: dict[str, list[str]] = {}
                tops: dict[str, float | None] = {}
                console: dict[str, list[str]] = {}
                for html in pages:
                    rel = html.relative_to(build).as_posix()
                    errors.clear()
                    page.goto(html.as_uri())
                    charts = page.locator(".vega-chart").count()
                    if charts:
                        page.wait_for_function(
                            "n => document.querySelectorAll('.vega-chart svg, .vega-chart canvas').length >= n",
                            arg=charts,
                            timeout=20_000,
                        )
                    tops[rel] = page.evaluate(VERDICT_PROBE)
                    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
                    splits[rel] = page.evaluate(TOKEN_PROBE)
                    console[rel] = list(errors)
                    if rel == "results/devices.html":
                        narrowest = page.evaluate(NARROWEST_PROBE)
                        if narrowest < 60:
                            problems.append(f"{size} {rel}: a table column only {narrowest:.0f} px wide")
                page.close()
                for rel in splits:
                    if splits[rel]:
                        problems.append(
                            f"{size} {rel}: {len(splits[rel])} token(s) split across lines: {splits[rel][:5]}"
                        )
                    top = tops[rel]
                    if top is None or top >= height:
                        problems.append(
                            f"{size} {rel}: verdict line {'missing' if top is None else f'at {top:.0f} px'}"
                        )
                    if console[rel]:
                        problems.append(f"{size} {rel}: console errors {console[rel][:3]}")
                figures[size] = {
                    "pages": len(pages),
                    "tokens split": sum(len(s) for s in splits.values()),
                    "verdict line top, worst (px)": max((t for t in tops.values() if t is not None), default=None),
                    "pages without a verdict line": sum(t is None for t in tops.values()),
                    "broken links": sum(len(b) for b in links.values()),
                    "console errors": sum(len(c) for c in console.values()),
                }
        finally:
            browser.close()
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "site-reader-figures.json").write_text(json.dumps(figures, indent=1))
    assert problems == [], "\n".join(problems)


def test_broken_link_finder_sees_root_absolute_and_missing_targets(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "assets.css").write_text("")
    page = tmp_path / "results" / "p.html"
    page.write_text(
        '<link href="../assets.css"><a href="#top">x</a><a href="/assets.css">root</a>'
        '<script src="missing.js"></script><img src="../assets.css"><a href="../assets.css#x">ok</a>'
    )
    assert broken_links(tmp_path, page) == ["/assets.css", "missing.js"]
