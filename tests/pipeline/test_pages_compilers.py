"""The site's pages with compilers side by side: a not-applicable experiment reads "not applicable to
<compiler>: <why>" in the site's own vocabulary (neutral, never a pass), from stored records only."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipeline.compilers import not_applicable_experiments, record_not_applicable
from pipeline.experiments import EXPERIMENTS, experiment
from pipeline.reporting.answer import answer_section, backend_name, claim_states
from pipeline.reporting.outcomes import outcome_cells, verdict_words
from pipeline.reporting.render import LABEL_MARK, Report
from pipeline.verdicts import NOT_APPLICABLE


def _openvino_report(tmp_path: Path) -> tuple[Report, str]:
    from pipeline.definitions import defs

    instance = dg.DagsterInstance.ephemeral()
    reasons = not_applicable_experiments("openvino", [experiment("C1")])
    record_not_applicable(instance, EXPERIMENTS, reasons, {"backend": "openvino", "profile": "smoke"})
    report = Report(instance, defs.resolve_asset_graph(), tmp_path / "smoke", tmp_path / "docs", "smoke", "", "cpu")
    return report, reasons["C1"]


def test_a_stored_not_applicable_experiment_reads_its_reason_on_the_site(tmp_path):
    report, reason = _openvino_report(tmp_path)
    assert reason.startswith("not applicable to OpenVINO: ")
    c1 = experiment("C1")
    outcome = report.outcome(c1.group)
    assert outcome is not None and (outcome.validity, outcome.verdict) == (NOT_APPLICABLE, reason)
    assert {c.label for c in report.checks_of(c1.group)} == {NOT_APPLICABLE}
    validity, verdict, findings = outcome_cells(report, c1.group)
    assert validity == LABEL_MARK[NOT_APPLICABLE] == '<span class="badge badge-none">not applicable</span>'
    assert verdict == reason and findings == "—"
    assert verdict_words(report, c1) == f"**Verdict: none**, {reason}."
    # C3 has no record: still "not yet run", never a pass.
    assert report.outcome(experiment("C3").group) is None


def test_the_answer_counts_a_not_applicable_claim_apart_and_names_its_reason(tmp_path):
    report, reason = _openvino_report(tmp_path)
    states = [s for s in claim_states(report) if s.exp.id == "C1"]
    assert states and {(s.state, s.reason) for s in states} == {(NOT_APPLICABLE, reason)}
    text = answer_section(report)  # no KeyError on the new outcome
    assert f"not counted as good: {len(states)} not applicable, " in text
    assert f"- *{reason}*" in text


def test_compilers_are_named_by_their_adapters_title():
    assert [backend_name(b) for b in ("inductor", "openvino", "iree", "aot_eager")] == [
        "Inductor",
        "OpenVINO",
        "IREE",
        "`aot_eager`",
    ]
