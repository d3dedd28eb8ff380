"""The fusion evidence an experiment declares, and the validity checks generated from it (pipeline.fusion_checks)."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pytest

from pipeline.experiments import EXPERIMENTS, experiment
from pipeline.fusion_checks import ExpectedFusion, fusion_check
from pipeline.verdicts import VALIDITY

EVIDENCE = pl.DataFrame(
    {
        "chain": ["a", "a", "b", "b", "c", "d", "e"],
        "path": ["eager", "fused", "fused", "fused_emulate", "fused", "fused", "fused"],
        "kernel_count": [0, 2, 0, 1, 3, 0, 1],
        "graph_breaks": [0, 0, 0, 1, 0, 0, 0],
        "recompiles": [0, 0, 0, 0, 2, 0, 0],
        "fused_library_calls": ["", "", "", "", "", "sdpa_flash", ""],
        "unavailable": [None, None, None, None, None, None, "this torch cannot compile it"],
    }
)
DECLARED = ExpectedFusion(
    "evidence",
    names=("chain", "path"),
    fused_where=(("path", ("fused", "fused_emulate")),),
    not_run="unavailable",
    library_calls_fuse=True,
)


def test_the_declaration_judges_the_fused_rows_it_names_and_no_other():
    assert DECLARED.fused_rows(EVIDENCE)["chain"].to_list() == ["a", "b", "b", "c", "d"]  # not eager, not e
    assert DECLARED.problems(EVIDENCE) == [
        "b/fused: no generated kernel",
        "b/fused_emulate: 1 graph break(s)",
        "c/fused: 2 recompile(s)",
    ]  # d's one fused library kernel counts as fused
    strict = ExpectedFusion("evidence", names=("chain", "path"))
    assert strict.problems(EVIDENCE)[0] == "a/eager: no generated kernel"  # every row, when none is named
    assert len(strict.problems(EVIDENCE)) == 5  # d too: without library_calls_fuse its library kernel does not count
    assert DECLARED.problems(EVIDENCE.clear()) == []
    with pytest.raises(ValueError, match="evidence has no column unavailable that its fusion declaration names"):
        DECLARED.fused_rows(EVIDENCE.drop("unavailable"))


def test_the_generated_check_fails_at_error_naming_each_unfused_row_and_passes_a_fused_table():
    @dg.asset(name="evidence")
    def broken() -> pl.DataFrame:
        return EVIDENCE

    check = fusion_check("X", DECLARED)
    (spec,) = check.check_specs
    assert (spec.name, spec.asset_key.to_user_string()) == ("evidence_shows_fusion", "evidence")
    assert spec.metadata["outcome"] == VALIDITY and "generated from its declared fusion evidence" in spec.description
    (e,) = dg.materialize([broken, check]).get_asset_check_evaluations()
    assert not e.passed and e.severity == dg.AssetCheckSeverity.ERROR
    meta = {k: v.value for k, v in e.metadata.items()}
    assert (meta["fused_rows"], meta["rows_not_fused"], meta["declared_by"]) == (5, 3, "X")
    assert meta["problems"].startswith("b/fused: no generated kernel; b/fused_emulate: 1 graph break(s)")

    @dg.asset(name="evidence")
    def healthy() -> pl.DataFrame:
        return EVIDENCE.with_columns(kernel_count=pl.lit(1), graph_breaks=pl.lit(0), recompiles=pl.lit(0))

    (ok,) = dg.materialize([healthy, fusion_check("X", DECLARED)]).get_asset_check_evaluations()
    assert ok.passed and ok.metadata["rows_not_fused"].value == 0


def test_each_experiment_with_fusion_evidence_declares_it_and_gets_its_check():
    declared = {e.id: [f.table for f in e.fusion] for e in EXPERIMENTS if e.fusion}
    assert declared == {
        "A": ["determinism_summary"],
        "C2": ["c2_versions"],
        "D": ["data_movement_check_table"],
        "B": ["accumulated_error_fusion_evidence"],
    }
    for exp_id, tables in declared.items():
        names = {s.name for c in experiment(exp_id).checks() for s in c.check_specs}
        assert {f"{t}_shows_fusion" for t in tables} <= names, exp_id
    # the declared tables are assets of the declaring experiment
    for exp_id, tables in declared.items():
        keys = {k.to_user_string() for a in experiment(exp_id).assets() for k in a.keys}
        assert set(tables) <= keys, exp_id
