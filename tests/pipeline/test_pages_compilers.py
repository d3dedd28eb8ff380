"""The site's pages with compilers side by side: a not-applicable experiment reads "not applicable to
<compiler>: <why>" in the site's own vocabulary (neutral, never a pass), from stored records only."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipeline.compilers import not_applicable_experiments, record_not_applicable
from pipeline.experiments import EXPERIMENTS, experiment
from pipeline.pagekit.render import LABEL_MARK, Report
from pipeline.reporting.answer import answer_section, backend_name, claim_states
from pipeline.reporting.outcomes import outcome_cells, verdict_words
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


def _two_compilers(tmp_path: Path) -> Report:
    """Inductor's C1 materialized with every check passed; OpenVINO's C1 stored as not applicable."""
    from pipeline.definitions import defs
    from pipeline.reporting.side_by_side import compiler_reports, compilers_with_results

    instance = dg.DagsterInstance.ephemeral()
    c1 = experiment("C1")
    prov = {"provenance.backend": "inductor", "provenance.profile": "smoke"}
    for a in c1.assets():
        for key in a.keys:
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, metadata=prov))
    for checks_def in c1.checks():
        for key in checks_def.check_keys:
            outcome = (checks_def.get_spec_for_check_key(key).metadata or {}).get("outcome", "validity")
            meta = {**prov, "outcome": outcome, **({"verdict": "supported"} if outcome == "claim" else {})}
            instance.report_runless_asset_event(
                dg.AssetCheckEvaluation(asset_key=key.asset_key, check_name=key.name, passed=True, metadata=meta)
            )
    reasons = not_applicable_experiments("openvino", [c1])
    record_not_applicable(instance, EXPERIMENTS, reasons, {"backend": "openvino", "profile": "smoke"})
    report = Report(instance, defs.resolve_asset_graph(), tmp_path / "smoke", tmp_path / "docs", "smoke", "", "cpu")
    backends = compilers_with_results(defs, instance, "smoke")
    assert backends == ["inductor", "openvino"]
    report.compilers = compiler_reports(report, backends)
    return report


def test_two_compilers_show_side_by_side_in_the_overview_and_on_the_experiment_page(tmp_path):
    from pipeline.reporting.pages import overview
    from pipeline.reporting.side_by_side import compilers_section

    report = _two_compilers(tmp_path)
    c1 = experiment("C1")
    inductor, openvino = report.compilers
    assert (inductor.compiler, openvino.compiler) == ("inductor", "openvino")
    ok, na = inductor.outcome(c1.group), openvino.outcome(c1.group)
    assert ok is not None and (ok.validity, ok.verdict) == ("valid", "supported")
    assert na is not None and na.validity == NOT_APPLICABLE
    reason = na.verdict
    page = overview(report)
    assert "| claim | main document | evidence | Inductor · cpu | OpenVINO · cpu |" in page
    row = next(
        line for line in page.splitlines() if f"[C1: {c1.title}]" in line and "| " + LABEL_MARK["supported"] in line
    )
    assert row.endswith(f"| {LABEL_MARK['supported']} | {reason} |")
    # One sentence per compiler x device in the answer.
    answer = page.split("## Claims and evidence")[0]
    assert "On this CPU (cpu), Inductor's fusion contradicts **0 of 14** of the main document's claims" in answer
    assert "On this CPU (cpu), OpenVINO's fusion has no verdict yet on when it changes bits" in answer
    assert "0 of 27 claims are supported; not counted as good: 2 not applicable, 25 not yet run." in answer
    assert '??? note "Claims not supported with OpenVINO on this CPU (cpu)"' in answer
    section = compilers_section(report, c1)
    assert "| compiler · device | run validity | verdict | findings |" in section
    assert f"| Inductor · cpu | {LABEL_MARK['valid']} | {LABEL_MARK['supported']} | 0 |" in section
    assert f"| OpenVINO · cpu | {LABEL_MARK[NOT_APPLICABLE]} | {reason} | — |" in section


def test_with_one_compiler_the_pages_stay_as_they_are(tmp_path):
    from pipeline.reporting.pages import overview
    from pipeline.reporting.side_by_side import compiler_reports

    report, _ = _openvino_report(tmp_path)
    assert compiler_reports(report, ["openvino"]) == []
    assert "| claim | main document | evidence | run validity | verdict | findings |" in overview(report)


def test_the_devices_page_is_devices_by_compilers(tmp_path):
    from pipeline.reporting.pages import devices_page

    report = _two_compilers(tmp_path)
    page = devices_page([*report.compilers, *report.other_devices])
    assert "| experiment | Inductor · cpu | OpenVINO · cpu |" in page
    assert "Devices named: **Inductor · cpu**, **OpenVINO · cpu**." in page
    c1 = experiment("C1")
    row = next(line for line in page.splitlines() if line.startswith(f"| {c1.id}"))
    assert f"[{LABEL_MARK['supported']}]({c1.slug}.md) {LABEL_MARK['valid']}" in row
    assert "[not applicable to OpenVINO: " in row and row.endswith(f"]({c1.slug}.md) {LABEL_MARK[NOT_APPLICABLE]} |")
    assert "OpenVINO · cpu: " in page and "1 not applicable" in page


def test_the_answer_says_which_fused_rows_a_compiler_ran_below_their_dtype(tmp_path):
    from pipeline.definitions import defs
    from pipeline.reporting.answer import lower_precision

    instance = dg.DagsterInstance.ephemeral()
    a = experiment("A")
    prov = {"provenance.backend": "openvino", "provenance.profile": "smoke"}
    for asset in a.assets():
        for key in asset.keys:
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, metadata=prov))
    (declared,) = a.fusion
    details = "softmax/float32: float32 workload ran in bfloat16; gelu/float32: float32 workload ran in bfloat16"
    finding = {"outcome": "finding", "findings": 2, "rows_in_lower_precision": 2, "details": details}
    instance.report_runless_asset_event(
        dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey(declared.table),
            check_name=declared.precision_check_name,
            passed=True,
            metadata={**prov, **finding},
        )
    )
    report = Report(instance, defs.resolve_asset_graph(), tmp_path / "smoke", tmp_path / "docs", "smoke", "", "cpu")
    text = lower_precision(report)
    assert text == (
        " It ran **2 fused rows** (A) below the workload's dtype (float32 workload ran in bfloat16): those rows'"
        " errors are that precision's, and their verdicts stand as judged."
    )
    assert text in answer_section(report)
    # Without a compiler-reported precision below a row's dtype, the answer says nothing of it.
    empty = Report(dg.DagsterInstance.ephemeral(), defs.resolve_asset_graph(), tmp_path, tmp_path, "smoke", "", "cpu")
    assert lower_precision(empty) == ""


def test_a_value_is_read_from_the_folder_of_the_compiler_that_computed_it(tmp_path):
    """M materialized with OpenVINO only: the report reads its table from OpenVINO's folder, not
    Inductor's (where nothing is), and S's shared pool from the profile's own folder."""
    import polars as pl

    from pipeline.definitions import defs
    from pipeline.storage import write_value

    instance = dg.DagsterInstance.ephemeral()
    table = pl.DataFrame({"model": ["bert"], "verdict": ["supported"]})
    write_value(table, tmp_path / "smoke" / "compilers" / "openvino" / "model_verdicts")
    prov = {"provenance.backend": "openvino", "provenance.profile": "smoke"}
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key="model_verdicts", metadata=prov))
    report = Report(instance, defs.resolve_asset_graph(), tmp_path / "smoke", tmp_path / "docs", "smoke", "", "cpu")
    assert report.table("model_verdicts").equals(table)
    assert report.for_compiler("openvino").table("model_verdicts").equals(table)
    assert report.for_compiler("inductor").table("model_verdicts") is None  # Inductor never ran M here
    selfcheck = pl.DataFrame({"check": ["ulp"], "passed": [True]})
    write_value(selfcheck, tmp_path / "smoke" / "toolkit_selfcheck")  # stored once, for every compiler
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key="toolkit_selfcheck", metadata=prov))
    report.clear_caches()
    assert report.table("toolkit_selfcheck").equals(selfcheck)


def test_a_failed_step_of_one_compilers_run_is_not_lent_to_the_other_compilers_columns(tmp_path):
    """The site built after ``--backends``' last compiler failed E's step: that failure is the last compiler's
    (OpenVINO here); Inductor's column reads its own records (the default three-compiler report's first screen
    said Inductor had no verdict on the tester because IREE's Diagnostics step had failed)."""
    report = _two_compilers(tmp_path)
    group = experiment("C1").group
    report.failed, report.failed_backend = {group: "boom"}, "openvino"
    inductor, openvino = report.for_compiler("inductor"), report.for_compiler("openvino")
    assert inductor.failed == {} and openvino.failed == {group: "boom"}
    assert {s.state for s in claim_states(inductor) if s.exp.id == "C1"} == {"supported"}
    assert {s.state for s in claim_states(openvino) if s.exp.id == "C1"} == {"failed"}


def test_a_value_stored_once_for_every_compiler_is_read_in_each_compilers_column(tmp_path):
    """The planted-bug matrix is stored once (it depends on no fused path) and was made in Inductor's run;
    OpenVINO's Regression reads it too, so its column is complete: valid, not "incomplete". Its own
    baseline comparison is still read from OpenVINO's records only."""
    from pipeline.definitions import defs

    instance = dg.DagsterInstance.ephemeral()
    regression = experiment("Regression")

    def evaluate(asset: str, backend: str, verdict: str) -> None:
        prov = {"provenance.backend": backend, "provenance.profile": "smoke"}
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=asset, metadata=prov))
        for checks_def in regression.checks():
            for key in checks_def.check_keys:
                if key.asset_key.to_user_string() != asset:
                    continue
                outcome = (checks_def.get_spec_for_check_key(key).metadata or {}).get("outcome", "validity")
                meta = {**prov, "outcome": outcome, **({"verdict": verdict} if outcome == "claim" else {})}
                instance.report_runless_asset_event(
                    dg.AssetCheckEvaluation(asset_key=key.asset_key, check_name=key.name, passed=True, metadata=meta)
                )

    evaluate("planted_bug_matrix", "inductor", "supported")
    evaluate("baseline_comparison", "inductor", "supported")
    evaluate("baseline_comparison", "openvino", "supported")
    report = Report(instance, defs.resolve_asset_graph(), tmp_path / "smoke", tmp_path / "docs", "smoke", "", "cpu")
    for backend in ("inductor", "openvino"):
        column = report.for_compiler(backend)
        outcome = column.outcome(regression.group)
        assert outcome is not None and (outcome.validity, outcome.verdict) == ("valid", "supported"), backend
        states = {c.name: c.state for c in column.checks_of(regression.group)}
        assert states["every_planted_bug_caught"] == states["no_moves_against_baseline"] == "passed"
    # A value that depends on the fused path is never lent: IREE, with no comparison of its own, has none.
    iree = report.for_compiler("iree")
    assert {c.name: c.state for c in iree.checks_of(regression.group)}["no_moves_against_baseline"] == "not yet run"
    assert {c.name: c.state for c in iree.checks_of(regression.group)}["every_planted_bug_caught"] == "passed"
