"""Every page formats what its experiment's checks and assets stored: each page is rendered from the
session's smoke run of every experiment (tests/conftest.py), then again with every function of the
experiment's judging modules patched to raise, and must read the same, with the stored verdicts.
E's and B's pages, whose judging is the heaviest, are also checked for the figures they show."""

import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import dagster as dg
import polars as pl
import pytest
from _smoke_run import RunPart  # tests/ is on sys.path (pytest rootdir import mode)
from _stored_only import page_without_judges

from pipeline.experiments import experiment
from pipeline.experiments.accumulated_error import assets as b_assets
from pipeline.experiments.accumulated_error import checks as b_checks
from pipeline.experiments.accumulated_error import library_bounds as b_library_bounds
from pipeline.experiments.accumulated_error import report as b_report
from pipeline.experiments.accumulated_error import rules as b_rules
from pipeline.experiments.accumulated_error import summary as b_summary
from pipeline.experiments.training import curves as e_curves
from pipeline.experiments.training import error_rates as e_error_rates
from pipeline.experiments.training import judge as e_judge
from pipeline.experiments.training import rules as e_rules
from pipeline.experiments.training.spec import SIZES as E_SIZES
from pipeline.pagekit.render import LABEL_MARK, Report
from pipeline.storage import read_value
from pipeline.verdicts import CLAIM, combine
from precisionkit import decide

#: What judges each experiment's data: its rule's code and the statistics it calls. B's bound
#: constants (:mod:`.accumulated_error.bounds`) are left out: the page states the rule's failure
#: rate, a figure of the rule and not of the data.
JUDGES: dict[str, list[ModuleType]] = {
    "E": [e_judge, e_error_rates, e_curves, decide],
    "B": [b_rules, b_summary, b_checks, b_library_bounds, b_assets, decide],
}


#: Functions each page called, or could call, to judge while rendering: patched with the rest.
JUDGE_NAMES = {
    "E": {
        "judge_training",
        "judge_frame",
        "rule_error_rates",
        "simulate_rule",
        "paired_margin_test",
        "measured_error_rates",
        "declared_error_rates",
    },
    "B": {
        "verdict_table",
        "element_bounds_table",
        "summary_table",
        "absolute_bound",
        "chain_verdicts",
        "cannot_judge_table",
    },
}


@pytest.fixture(scope="module")
def stored(smoke_everything):
    """The shared smoke run with E's and B's steps all succeeded, and definitions of every experiment
    it ran on its resources (the asset graph the site's report reads with)."""
    from pipeline.experiments import EXPERIMENTS

    ran = [exp for exp in EXPERIMENTS if exp.id != "Regression"]
    RunPart(smoke_everything, [d for exp in (experiment("E"), experiment("B")) for d in [*exp.assets(), *exp.checks()]])
    defs = dg.Definitions(
        assets=[a for exp in ran for a in exp.assets()],
        asset_checks=[c for exp in ran for c in exp.checks()],
        resources=smoke_everything["resources"],
    )
    return SimpleNamespace(
        instance=smoke_everything["instance"], data=smoke_everything["data"], defs=defs, smoke=smoke_everything
    )


def _page_with_judges_raising(stored, docs: Path, monkeypatch, exp_id: str) -> tuple[str, Report]:
    """``exp_id``'s page rendered with its judges raising, after checking it reads as it does without;
    it shows the experiment's claim verdict cell and each claim's stored reason. Returns the page and a
    report on the same run to read the stored values from."""
    exp = experiment(exp_id)
    before, after, patched = page_without_judges(
        monkeypatch, stored.instance, stored.defs, stored.data, docs / "patched", exp, JUDGES[exp_id]
    )
    assert JUDGE_NAMES[exp_id] <= {name.rsplit(".", 1)[1] for name in patched}
    assert after == before
    report = Report(stored.instance, stored.defs.resolve_asset_graph(), stored.data, docs / "read", "smoke", "", "cpu")
    outcome = report.outcome(exp.group)
    assert outcome is not None
    assert f"| {LABEL_MARK.get(outcome.verdict, outcome.verdict)} |" in after
    claims = [c for c in report.checks_of(exp.group) if c.outcome == CLAIM and c.state != "not yet run"]
    assert claims
    for c in claims:
        assert f"- `{c.name}`: " in after and str(c.metadata["reason"]) in after
    return after, report


def _asset_and_check_modules(exp_id: str) -> list[ModuleType]:
    """The modules an experiment's assets and checks live in (what its record loads), its judging
    module where it has one, and the statistics they call."""
    exp = experiment(exp_id)
    extra = [sys.modules[name] for name in (f"{exp.load.__module__}.judge",) if name in sys.modules]
    return [*exp.load_modules(), *extra, decide]


#: Every experiment the session's smoke run materializes, but E and B (their own tests below).
OTHERS = ("S", "A", "C1", "C2", "C3", "D", "M", "Diagnostics")


@pytest.mark.parametrize("exp_id", OTHERS)
def test_every_page_reads_the_same_with_its_asset_and_check_code_raising(stored, tmp_path, monkeypatch, exp_id):
    exp = experiment(exp_id)
    RunPart(stored.smoke, [*exp.assets(), *exp.checks()])
    before, after, patched = page_without_judges(
        monkeypatch,
        stored.instance,
        stored.defs,
        stored.data,
        tmp_path / "patched",
        exp,
        _asset_and_check_modules(exp_id),
    )
    assert len(patched) >= 3  # the asset and check code was there to patch
    assert after == before
    report = Report(
        stored.instance, stored.defs.resolve_asset_graph(), stored.data, tmp_path / "read", "smoke", "", "cpu"
    )
    for c in report.checks_of(exp.group):
        if c.outcome == CLAIM and c.state != "not yet run":
            assert f"- `{c.name}`: " in after and str(c.metadata["reason"]) in after


def test_e_page_shows_the_claims_stored_tests_and_error_rates(stored, tmp_path, monkeypatch):
    """E's page: the claim's stored tests and simulated error rates, and its verdict in the rule table."""
    page, report = _page_with_judges_raising(stored, tmp_path, monkeypatch, "E")
    (claim,) = [c for c in report.checks_of(experiment("E").group) if c.name == "fused_learns_like_eager"]
    meta = claim.metadata
    orders, points = len(e_rules.REPLICATE_ORDERS), E_SIZES["smoke"].steps // 5
    assert f"## Paired tests ({orders} data orders, {points} judged eval points)" in page
    assert meta["tests"] in page
    # the rule's stored power table (power.json) and the one measured at this run's noise, both by the shared renderer
    assert '??? info "Measured power of this rule (500 replications per cell,' in page
    assert "| 5 | sd 0.25 margin, normal | shift 1.5 margins (0.015 nats) | 1.5 | 216/500 (43.2%) | 284 | 0 |" in page
    assert "??? info \"Power measured at this run's own conditions (" in page
    assert f"| result | {claim.label}: {meta['reason']} |" in page


def test_b_page_shows_the_summarys_stored_verdicts_per_row_and_per_chain(stored, tmp_path, monkeypatch):
    """B's page: the verdict and bound tables and each chain's verdict, as the summary stored them."""
    page, report = _page_with_judges_raising(stored, tmp_path, monkeypatch, "B")
    (record,) = [a for a in report.assets_of(experiment("B").group) if a.key == "accumulated_error_summary"]
    assert str(record.metadata["verdicts"]) in page and str(record.metadata["element_bounds"]) in page
    # each chain's verdict cell is the one stored, and that is its rows' verdicts combined
    summary = read_value(stored.data / "accumulated_error_summary")
    expected = {
        chain: combine(rows["fused_verdict"].to_list())
        for (chain,), rows in summary.group_by("chain", maintain_order=True)
    }
    assert json.loads(record.metadata["chain_verdicts"]) == expected
    lines = page.splitlines()
    for chain, verdict in expected.items():
        assert any(line.startswith(f"| {chain} |") and line.endswith(f"| {verdict} |") for line in lines)
    assert not hasattr(b_report, "combine") and not hasattr(b_report, "verdict_table")


def test_b_per_chain_verdicts_combine_each_chains_rows():
    wide = pl.DataFrame(
        {
            "chain": ["a", "a", "b", "b", "c"],
            "fused_verdict": ["supported", "contradicted", "supported", "inconclusive", "supported"],
        }
    )
    assert b_assets.chain_verdicts(wide) == {"a": "contradicted", "b": "inconclusive", "c": "supported"}


def test_b_deliverable_names_a_summary_stored_without_per_chain_verdicts():
    summary = pl.DataFrame(
        {
            "chain": ["gelu", "gelu"],
            "sets": [8, 8],
            "fused_verdict": ["supported", "inconclusive"],
            **{
                c: [0.5, 0.25]
                for c in (
                    "eager_sulp_max_p99",
                    "fused_sulp_max_p99",
                    "eager_sulp_max_max",
                    "fused_sulp_max_max",
                    "fused_p99_difference",
                )
            },
        }
    )
    record = SimpleNamespace(key="accumulated_error_summary", metadata={})
    page = SimpleNamespace(
        table=lambda name: summary if name == "accumulated_error_summary" else None,
        assets_of=lambda group: [record],
    )
    text = b_report.deliverable(page, experiment("B"))  # type: ignore[arg-type]
    assert f"| {b_report.NOT_STORED} 1 inconclusive, 1 supported |" in text  # counted, not combined
    record.metadata = {"chain_verdicts": json.dumps({"gelu": "contradicted"})}
    assert "| contradicted |" in b_report.deliverable(page, experiment("B"))  # type: ignore[arg-type]
