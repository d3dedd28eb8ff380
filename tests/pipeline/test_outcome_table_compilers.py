"""The outcome table a report prints after one compiler's run reads that compiler's results: a later run of
another compiler (or one with --only) must not lend it its own (the default report's OpenVINO table, printed
again after IREE's run, showed IREE's C2 and M)."""

import dagster as dg

from pipeline.cli.staleness import latest_evaluations

CHECK = dg.AssetCheckKey(dg.AssetKey("model_verdicts"), "model_runs_valid")  # on the fused path
SHARED = dg.AssetCheckKey(dg.AssetKey("fp64_reference_softmax"), "references_are_float64_and_finite")  # no fused path


def _evaluate(instance, key, backend, passed):
    meta = {"provenance.backend": backend, "provenance.profile": "smoke", "outcome": "validity"}
    instance.report_runless_asset_event(
        dg.AssetCheckEvaluation(asset_key=key.asset_key, check_name=key.name, passed=passed, metadata=meta)
    )


def test_each_compilers_table_reads_its_own_latest_result():
    from pipeline.definitions import defs

    instance = dg.DagsterInstance.ephemeral()
    _evaluate(instance, CHECK, "openvino", False)
    _evaluate(instance, CHECK, "iree", True)  # newer
    by_key = {
        backend: {(e.asset_key, e.check_name): e.passed for e in latest_evaluations(defs, instance, backend)}
        for backend in ("openvino", "iree", None)
    }
    assert by_key["openvino"][(CHECK.asset_key, CHECK.name)] is False
    assert by_key["iree"][(CHECK.asset_key, CHECK.name)] is True
    assert by_key[None][(CHECK.asset_key, CHECK.name)] is True  # no compiler named: the newest of any
    assert (CHECK.asset_key, CHECK.name) not in {
        (e.asset_key, e.check_name) for e in latest_evaluations(defs, instance, "inductor")
    }


def test_a_result_that_no_compiler_computes_counts_for_every_compiler():
    from pipeline.definitions import defs

    instance = dg.DagsterInstance.ephemeral()
    _evaluate(instance, SHARED, "inductor", True)  # S's fp64 reference, materialized once under Inductor
    for backend in ("inductor", "openvino"):
        found = {(e.asset_key, e.check_name) for e in latest_evaluations(defs, instance, backend)}
        assert (SHARED.asset_key, SHARED.name) in found


def test_a_run_with_only_leaves_out_the_upstream_experiments_that_do_not_apply():
    """``report --only Diagnostics --backend openvino``: C1 and C3 (upstream of the measured tolerances) are left
    out of the run, so the tolerance table reads nothing stored for them instead of being skipped by Dagster
    behind their empty guard; only the experiments the run names get a not-applicable record."""
    from pipeline.cli.run_report import not_applicable_skipped
    from pipeline.experiments import experiment

    instance = dg.DagsterInstance.ephemeral()
    settings = {"profile": "smoke", "device": "cpu", "backend": "openvino", "backend_options": "{}"}
    said: list[str] = []
    skipped = not_applicable_skipped(instance, settings, ["Diagnostics"], said.append)
    c1_c3 = {k for e in ("C1", "C3") for a in experiment(e).assets() for k in a.keys}
    assert dg.AssetKey("c1_error_vs_fp64") in c1_c3 and c1_c3 <= skipped
    assert said == []  # Diagnostics applies to OpenVINO: nothing to record or say
    said.clear()
    assert not_applicable_skipped(instance, settings, ["C1"], said.append) >= c1_c3
    assert [line.split(":")[0] for line in said] == ["C1"]
