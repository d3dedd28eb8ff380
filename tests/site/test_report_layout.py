"""Layout of the report as a reader sees it at 1280 px, and the pieces that make pages readable:
the plan's deliverable first, collapsible long tables, downloads, and the history of every claim."""

import re
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from test_report_site import ARTIFACTS, _serve  # same folder: pytest puts it on sys.path

from pipeline.pagekit.render import Report, collapsed
from pipeline.reporting.claims import EXPERIMENTS
from pipeline.reporting.history import claim_history, key_figures, moved
from pipeline.reporting.outcomes import readable_value
from pipeline.verdicts import CONTRADICTED, SUPPORTED, Rule, claim_check, claim_result

SCREENSHOTS = ARTIFACTS / "site"


def test_collapsed_block_indents_its_body_under_a_details_marker():
    text = collapsed("t: 3 rows", "| a |\n|---|\n| 1 |\n\nnote", kind="note")
    assert text.splitlines()[0] == '??? note "t: 3 rows"'
    assert "    | a |" in text and "    | 1 |" in text and "    note" in text
    assert collapsed("x", "y", open_=True).startswith('???+ abstract "x"')


def test_json_metadata_reads_as_pairs_not_raw_json():
    assert readable_value('{"float16": ["gelu", "mul"], "bfloat16": []}') == "float16: gelu, mul; bfloat16: —"
    assert readable_value("[1, 2.5]") == "1, 2.5"
    assert readable_value("{not json") == "{not json"
    assert readable_value(0.123456) == "0.1235"


def test_key_figures_keep_numbers_and_drop_the_rule_and_flags():
    meta = {"rows_judged": 10, "margin_max": 0.25, "rule.threshold": 1.0, "complete": True, "reason": "ok"}
    assert key_figures(meta) == {"rows_judged": 10.0, "margin_max": 0.25}


# --- history from the event log -------------------------------------------------------------------

RULE = Rule(
    claim="toy",
    metric="m",
    decision="m <= 1",
    threshold=1.0,
    unit="ULP",
    confidence=None,
    sample_size="1",
    derivation="test",
)
OBSERVED = {"value": 0.0, "commit": "a" * 40, "backend": "inductor"}


@dg.asset(group_name="C3_rsqrt_iterations", name="toy_table")
def toy_table() -> dg.MaterializeResult:
    return dg.MaterializeResult(
        metadata={
            "provenance.profile": "smoke",
            "provenance.device_label": "cpu",
            "provenance.device": "cpu",
            "provenance.git_commit": OBSERVED["commit"],
            "provenance.torch_version": "9.9.9",
            "provenance.backend": OBSERVED["backend"],
        }
    )


@claim_check(rule=RULE, asset=toy_table, name="toy_claim")
def toy_claim() -> dg.AssetCheckResult:
    value = OBSERVED["value"]
    return claim_result(SUPPORTED if value <= 1 else CONTRADICTED, RULE, "toy", {"worst_ulp": value, "rows": 4})


def test_history_pairs_each_evaluation_with_its_commit_and_shows_what_moved():
    instance = dg.DagsterInstance.ephemeral()
    for value, commit in ((0.5, "a" * 40), (3.0, "b" * 40)):
        OBSERVED.update(value=value, commit=commit)
        assert dg.materialize([toy_table, toy_claim], instance=instance).success
    graph = dg.Definitions(assets=[toy_table], asset_checks=[toy_claim]).resolve_asset_graph()
    report = Report(instance, graph, Path("."), Path("."), "smoke", "", "cpu", device_label="cpu")
    points = claim_history(report, dg.AssetCheckKey(dg.AssetKey("toy_table"), "toy_claim"))
    assert [p.verdict for p in points] == [SUPPORTED, CONTRADICTED]
    assert [p.commit for p in points] == ["a" * 12, "b" * 12]
    assert points[-1].torch == "9.9.9"
    assert points[-1].figures == {"worst_ulp": 3.0, "rows": 4.0}
    assert moved(points) == ["verdict supported → contradicted", "worst_ulp 0.5 → 3"]
    other_profile = Report(instance, graph, Path("."), Path("."), "default", "", "cpu", device_label="cpu")
    assert claim_history(other_profile, dg.AssetCheckKey(dg.AssetKey("toy_table"), "toy_claim")) == []


def test_each_compilers_history_is_its_own_baseline(tmp_path):
    """A claim evaluated with Inductor, then with OpenVINO, then Inductor again: each compiler's points
    apart, so OpenVINO's worse figure is no move of Inductor's verdict."""
    instance = dg.DagsterInstance.ephemeral()
    key = dg.AssetCheckKey(dg.AssetKey("toy_table"), "toy_claim")
    for value, backend in ((0.5, "inductor"), (3.0, "openvino"), (0.5, "inductor")):
        OBSERVED.update(value=value, commit="c" * 40, backend=backend)
        assert dg.materialize([toy_table, toy_claim], instance=instance).success
    OBSERVED.update(backend="inductor")
    graph = dg.Definitions(assets=[toy_table], asset_checks=[toy_claim]).resolve_asset_graph()
    report = Report(instance, graph, Path("."), Path("."), "smoke", "", "cpu", device_label="cpu")
    assert [p.compiler for p in claim_history(report, key)] == ["inductor", "openvino", "inductor"]
    inductor = claim_history(report, key, "inductor")
    assert [p.verdict for p in inductor] == [SUPPORTED, SUPPORTED] and moved(inductor) == []
    openvino = claim_history(report, key, "openvino")
    assert [(p.verdict, p.figures["worst_ulp"]) for p in openvino] == [(CONTRADICTED, 3.0)]
    # The page: one section per compiler, each with its own glance table.
    from pipeline.reporting.history import history_page

    report = Report(instance, graph, tmp_path, tmp_path / "docs", "smoke", "", "cpu", device_label="cpu")
    report.compilers = [report.for_compiler("inductor"), report.for_compiler("openvino")]
    page = history_page(report)
    inductor_part, openvino_part = page.split("## Inductor\n")[1].split("## OpenVINO\n")
    assert "**Latest verdicts:** 1 supported, 1 contradicted, of 2 claim check(s)" in page
    claim = "| [C3](rsqrt-iterations.md) | `toy_claim` |"
    assert f'{claim} 2 | <span class="badge badge-ok">supported</span> | nothing |' in inductor_part
    assert f'{claim} 1 | <span class="badge badge-bad">contradicted</span> | — (first point) |' in openvino_part
    assert inductor_part.startswith("\n### At a glance") and openvino_part.startswith("\n### At a glance")


# --- the built smoke report (S, C1, C3) -----------------------------------------------------------


def test_pages_open_with_the_deliverable_then_the_verdict_then_details(built_site):
    page = (built_site["build"] / "results" / "rsqrt-iterations.html").read_text()
    order = [page.index(f'id="{anchor}"') for anchor in ("deliverable", "verdict", "decision-rules", "details")]
    assert order == sorted(order)
    deliverable = page[order[0] : order[1]]
    assert "Newton iterations" in deliverable and "max ULP vs fp64" in deliverable
    c1 = (built_site["build"] / "results" / "instruction-selection.html").read_text()
    c1_deliverable = c1[c1.index('id="deliverable"') : c1.index('id="verdict"')]
    for column in ("ULP = 0 (%)", "ULP = 1 (%)", "ULP &gt;= 2 (%)"):
        assert column in c1_deliverable
    assert 'id="chart-instruction-selection-deliverable-histogram"' in c1_deliverable


def test_stored_tables_collapse_and_download_whole(built_site):
    build = built_site["build"]
    page = (build / "results" / "rsqrt-iterations.html").read_text()
    stored = page[page.index('id="stored-tables"') :]
    assert "<details" in stored and 'href="data/c3_iteration_table.parquet"' in stored
    assert 'href="data/c3_iteration_table.csv"' in stored
    parquet = pl.read_parquet(build / "results" / "data" / "c3_iteration_table.parquet")
    csv = pl.read_csv(build / "results" / "data" / "c3_iteration_table.csv")
    assert csv.height == parquet.height and csv.columns == parquet.columns
    assert csv["ulp_max"].to_list() == pytest.approx(parquet["ulp_max"].to_list())


def test_chart_fallback_links_resolve(built_site):
    build = built_site["build"]
    for page in (build / "results").glob("*.html"):
        for href in re.findall(r'href="(charts/[^"]+)"', page.read_text()):
            assert (page.parent / href).exists(), f"{page.name}: {href}"


def test_history_page_lists_each_claim_with_commit_and_torch(built_site):
    page = (built_site["build"] / "results" / "history.html").read_text()
    assert "c3_framework_correctly_rounded" in page
    import torch

    assert torch.__version__ in page
    assert "(first point)" in page  # one materialization so far: nothing to compare with
    assert 'id="chart-history-verdicts"' in page


# --- the browser: every page of a report with every experiment, at 1280 px ------------------------

LAYOUT_PROBE = """() => {
  const main = document.querySelector('.md-content');
  const box = main.getBoundingClientRect();
  const problems = [];
  if (main.scrollWidth > main.clientWidth + 1) problems.push(`main column scrolls: ${main.scrollWidth} > ${main.clientWidth}`);
  // A wide table scrolls sideways inside its own box (.md-typeset__scrollwrap): the box fits the column.
  for (const el of main.querySelectorAll('.md-typeset__scrollwrap, figure, svg, pre, .vega-bindings, img')) {
    if (el.closest('.md-typeset__scrollwrap') && !el.matches('.md-typeset__scrollwrap')) continue;
    const r = el.getBoundingClientRect();
    if (r.width && r.right > box.right + 1) problems.push(`${el.tagName} ends at ${Math.round(r.right)} > ${Math.round(box.right)}`);
  }
  for (const table of main.querySelectorAll('table')) {
    if (!table.closest('.md-typeset__scrollwrap')) problems.push('a table outside a scrolling box');
  }
  return problems;
}"""

MARKS_PROBE = """() => Array.from(document.querySelectorAll('.vega-chart')).map(c =>
  [c.id, c.querySelectorAll('svg g.role-mark > path, svg g.role-mark > rect, svg g.role-mark > text,'
   + ' svg g.role-mark > line, svg g.role-mark > circle, svg g.role-mark > g').length])"""


def _name(rel: str) -> str:
    return rel.removesuffix(".html").replace("/", "__")


@pytest.mark.slow
@pytest.mark.browser
def test_every_page_fits_1280px_and_every_chart_has_marks(full_site, chromium_path):
    playwright = pytest.importorskip("playwright.sync_api")
    build = full_site["build"]
    pages = sorted(p.relative_to(build).as_posix() for p in build.rglob("*.html") if p.name != "404.html")
    for exp in EXPERIMENTS:
        assert f"results/{exp.slug}.html" in pages
    assert "results/history.html" in pages
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    charts_seen = 0
    with playwright.sync_playwright() as p, _serve(build) as base:
        browser = p.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
        try:
            for rel in pages:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                problems: list[str] = []
                page.on("console", lambda m, acc=problems: acc.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e, acc=problems: acc.append(str(e)))
                page.goto(f"{base}/{rel}")
                expected = page.locator(".vega-chart").count()
                if expected:
                    page.wait_for_function(
                        "n => document.querySelectorAll('.vega-chart svg').length >= n", arg=expected, timeout=20_000
                    )
                marks = page.evaluate(MARKS_PROBE)
                empty = [chart for chart, count in marks if count == 0]
                assert empty == [], f"{rel}: charts without marks: {empty}"
                charts_seen += len(marks)
                page.screenshot(path=str(SCREENSHOTS / f"{_name(rel)}.png"), full_page=True)
                # Measure every table: open each collapsed block, as a reader would.
                page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
                layout = page.evaluate(LAYOUT_PROBE)
                assert layout == [], f"{rel}: {layout}"
                assert problems == [], f"{rel}: console errors {problems}"
                page.close()
        finally:
            browser.close()
    assert charts_seen >= 20
    for rel in ("index.html", "results/accumulated-error.html"):
        assert (SCREENSHOTS / f"{_name(rel)}.png").stat().st_size > 20_000


@pytest.mark.slow
def test_every_plan_experiment_page_opens_with_its_deliverable(full_site):
    for exp in EXPERIMENTS:
        if not exp.plan_deliverable:
            continue
        page = (full_site["build"] / "results" / f"{exp.slug}.html").read_text()
        body = page[page.index("<h1") :]
        first_h2 = re.search(r'<h2 id="([\w-]+)"', body)
        assert first_h2 is not None and first_h2.group(1) == "deliverable", exp.id
    b = (full_site["build"] / "results" / "accumulated-error.html").read_text()
    b_deliverable = b[b.index('id="deliverable"') : b.index('id="verdict"')]
    chains = re.findall(r'id="chart-accumulated-error-deliverable-cdf-([\w]+)"', b_deliverable)
    assert len(chains) == len(set(chains)) >= 4  # one chart per operator chain


@pytest.mark.slow
def test_no_page_prints_raw_json(full_site):
    raw_json = re.compile(r'\{(?:"|&quot;)[\w.]+(?:"|&quot;):')
    for page in full_site["build"].rglob("*.html"):
        text = re.sub(r"<script.*?</script>", "", page.read_text(), flags=re.S)  # chart specs are JSON by design
        assert not raw_json.search(text), f"{page.name}: {raw_json.search(text).group(0)}"


def test_headings_that_share_a_long_prefix_lead_with_their_distinct_part():
    from pipeline.reporting.outcomes import distinct_heading

    names = [
        "fully_masked_rows",
        "fused_not_worse_attention",
        "fused_not_worse_attention_masked",
        "fused_not_worse_softmax",
    ]
    assert [distinct_heading(n, names) for n in names] == [
        "`fully_masked_rows`",
        "attention: `fused_not_worse_attention`",
        "attention_masked: `fused_not_worse_attention_masked`",
        "softmax: `fused_not_worse_softmax`",
    ]


def test_the_devices_page_is_in_the_navigation():
    from pipeline.reporting.pages import site_nav

    assert {"Devices": "results/devices.md"} in site_nav()
