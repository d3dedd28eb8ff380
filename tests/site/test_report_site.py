import contextlib
import functools
import http.server
import re
import threading
from pathlib import Path

import pytest

from pipeline.pagekit.render import Report
from pipeline.reporting.claims import EXPERIMENTS, SECTIONS

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _pages(build: Path) -> list[Path]:
    return sorted(build.rglob("*.html"))


def test_every_page_is_built_and_verdicts_follow_the_checks(built_site):
    build = built_site["build"]
    for name in ["index.html", "methodology.html", "main-document.html"]:
        assert (build / name).exists()
    for exp in EXPERIMENTS:
        assert (build / "results" / f"{exp.slug}.html").exists(), exp.slug
    verdicts = built_site["output"]["verdicts"]
    # S makes no claim of its own: its checks are run validity (references, the toolkit's self-check).
    assert verdicts["S"] == "no claim"
    # C1 and C3 ran in the site's smoke build: judged, whatever this machine measured
    assert verdicts["C3"] in ("supported", "contradicted", "inconclusive")
    assert verdicts["C1"] in ("supported", "contradicted", "inconclusive")
    for exp_id in ("A", "B", "D", "E"):
        assert verdicts[exp_id] == "not yet run"


def test_pages_show_three_outcomes_and_the_declared_rules(built_site):
    overview = (built_site["build"] / "index.html").read_text()
    assert "run validity" in overview and "findings" in overview
    page = (built_site["build"] / "results" / "rsqrt-iterations.html").read_text()
    assert "Decision rules" in page and "materiality threshold" in page and "sample size" in page
    assert "c3_error_nonincreasing_with_iterations" in page
    toolkit = (built_site["build"] / "results" / "toolkit.html").read_text()
    assert "Run validity" in toolkit and "Decision rules" not in toolkit


def test_experiments_not_run_show_as_not_yet_run_without_numbers(built_site):
    page = (built_site["build"] / "results" / "training.html").read_text()
    assert "Not yet run" in page
    assert "Stored tables" not in page and "Asset checks" not in page
    overview = (built_site["build"] / "index.html").read_text()
    assert overview.count("not yet run") >= 4
    assert "Measured on the CPU only" in overview  # what was not measured is said plainly


def test_claims_link_to_main_document_sections(built_site):
    overview = (built_site["build"] / "index.html").read_text()
    for section in SECTIONS.values():
        assert f'main-document.html#{section.anchor}"' in overview
    anchors = (built_site["build"] / "main-document.html").read_text()
    for section in SECTIONS.values():
        assert f'id="{section.anchor}"' in anchors


def test_configured_main_document_url_is_used_for_section_links():
    report = Report(None, None, Path("."), Path("."), "smoke", "https://docs.invalid/fusion/")
    assert report.section_link("3.2") == "[§3.2](https://docs.invalid/fusion#section-3-2)"


def test_site_has_no_external_resources(built_site):
    external = re.compile(r'(?:src|href)="(https?:)?//', re.I)
    for page in _pages(built_site["build"]):
        text = page.read_text()
        assert not external.search(text.split("</head>")[0]), f"{page.name} loads an external resource"
        for host in ("unpkg.com", "jsdelivr", "fonts.googleapis", "vega.github.io/editor"):
            assert host not in text, f"{page.name} mentions {host}"
    bundle = built_site["build"] / "assets" / "vendor" / "vega-bundle.js"
    assert bundle.stat().st_size > 100_000


def test_every_chart_has_an_svg_fallback_and_spec(built_site):
    build = built_site["build"]
    stems = []
    for page in _pages(build):
        stems += re.findall(r'id="chart-([\w.-]+)"', page.read_text())
    assert len(stems) >= 4  # S coverage, C1 histogram, C3 iterations and histogram
    for stem in stems:
        svg = build / "results" / "charts" / f"{stem}.svg"
        assert svg.read_text().lstrip().startswith("<svg"), stem
        assert (build / "results" / "charts" / f"{stem}.vl.json").exists(), stem


def test_provenance_footer_on_every_page(built_site):
    for page in _pages(built_site["build"]):
        if page.name == "404.html":
            continue
        text = page.read_text()
        assert 'class="provenance"' in text, page.name
        assert "profile <code>smoke</code>" in text


@contextlib.contextmanager
def _serve(directory: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.mark.browser
def test_charts_render_without_console_errors_in_chromium(built_site, chromium_path):
    playwright = pytest.importorskip("playwright.sync_api")
    build = built_site["build"]
    pages = [p.relative_to(build).as_posix() for p in _pages(build) if p.name != "404.html"]
    ARTIFACTS.mkdir(exist_ok=True)
    with playwright.sync_playwright() as p, _serve(build) as http_base:
        browser = p.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
        try:
            for base in (build.as_uri(), http_base):
                for rel in pages:
                    page = browser.new_page(viewport={"width": 1280, "height": 900})
                    problems: list[str] = []
                    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)  # noqa: B023 - this page only
                    page.on("pageerror", lambda e: problems.append(str(e)))  # noqa: B023 - this page only
                    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))  # noqa: B023 - this page only
                    page.goto(f"{base}/{rel}")
                    expected = page.locator(".vega-chart").count()
                    if expected:
                        page.wait_for_function(
                            "n => document.querySelectorAll('.vega-chart svg, .vega-chart canvas').length >= n",
                            arg=expected,
                            timeout=15_000,
                        )
                    rendered = page.evaluate("document.querySelectorAll('.vega-chart svg, .vega-chart canvas').length")
                    assert rendered == expected, f"{base}/{rel}: {rendered} of {expected} charts rendered"
                    assert problems == [], f"{base}/{rel}: {problems}"
                    if rel == "index.html" and base == http_base:
                        page.screenshot(path=str(ARTIFACTS / "site-overview.png"), full_page=True)
                    page.close()
        finally:
            browser.close()
    assert (ARTIFACTS / "site-overview.png").stat().st_size > 10_000


def test_overview_answers_first_in_words_from_the_stored_verdicts(built_site):
    html = (built_site["build"] / "index.html").read_text()
    body = html[html.index("<h1") :]
    answer = body[: body.index('id="claims-and-evidence"')]
    assert 'class="verdict-line answer"' in answer
    assert re.search(r"On this CPU \(.+?\), Inductor's fusion contradicts <strong>\d+ of \d+</strong>", answer)
    # A, D, B ... were not run in this build: counted apart and said, never counted as good
    assert "without a verdict yet" in answer and "not yet run" in answer
    assert "claims are supported; not counted as good:" in answer


def test_every_page_says_its_verdict_directly_under_its_title(built_site):
    build = built_site["build"]
    for page in _pages(build):
        text = page.read_text()
        after_title = text[text.index("</h1>") + len("</h1>") :].lstrip()
        assert after_title.startswith(('<p class="verdict-line', '<div class="verdict-line')), page.name
    c3 = (build / "results" / "rsqrt-iterations.html").read_text()
    assert re.search(r'<p class="verdict-line"><strong>Verdict: (supported|contradicted|inconclusive)</strong>', c3)
    training = (build / "results" / "training.html").read_text()
    assert '<p class="verdict-line"><strong>Verdict: not yet run</strong>' in training


def test_the_404_page_links_relative_to_itself(built_site):
    text = (built_site["build"] / "404.html").read_text()
    assert not re.search(r'(?:href|src)="/', text)
    assert 'href="./index.html"' in text
