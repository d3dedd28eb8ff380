"""Baseline promotion and the comparison against it (synthetic stored tables: no compiles)."""

import json
from datetime import UTC, datetime

import dagster as dg
import numpy as np
import polars as pl
import pytest

from pipeline import storage
from pipeline.cli import main as cli_main
from pipeline.experiment import BaselineTable, Experiment
from pipeline.instruments.regression import baseline, comparators, curves_compare, matrix_runs
from pipeline.instruments.regression import drift as regression


def _b_table(shift: float = 0.0, jitter_sets: int = 0, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for chain in ("softmax", "layernorm"):
        for dtype in ("float16", "bfloat16"):
            for path in ("eager", "fused"):
                vals = rng.gamma(2.0, 1.5, size=200).round()
                vals[:jitter_sets] += 1  # a few sets move by one ULP: within the distribution's noise
                vals = vals + shift
                for i, v in enumerate(vals):
                    rows.append(
                        {
                            "chain": chain,
                            "distribution": "normal",
                            "dtype": dtype,
                            "path": path,
                            "set_index": i,
                            "ulp_max": float(v),
                        }
                    )
    return pl.DataFrame(rows)


def _d_table(broken: bool = False) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "subgraph": ["transpose_concat", "rotate_half"],
            "dtype": ["float16", "float16"],
            "shape": ["2x8x16", "2x8x16"],
            "layout": ["contiguous", "contiguous"],
            "bit_equal": [True, not broken],
            "ulp_max": [0, 3 if broken else 0],
        }
    )


def _e_table(fused_final: float = 2.50) -> pl.DataFrame:
    steps = [5, 10, 15, 20]
    curves = {
        "bfloat16_eager": [3.0, 2.8, 2.6, 2.50],
        "bfloat16_eager_order_B": [3.02, 2.79, 2.62, 2.52],
        "bfloat16_fused": [3.0, 2.8, 2.6, fused_final],
    }
    return pl.DataFrame(
        [{"run": r, "step": s, "eval_loss": v} for r, vals in curves.items() for s, v in zip(steps, vals, strict=False)]
    )


def _store(root, profile="smoke", **tables):
    for name, value in tables.items():
        storage.write_value(value, root / profile / name)


def _stored(root, b=None, d=None, e=None):
    _store(
        root,
        accumulated_error_per_set=b if b is not None else _b_table(),
        accumulated_error_summary=pl.DataFrame({"chain": ["softmax"], "fused_not_worse": [True]}),
        data_movement_check_table=d if d is not None else _d_table(),
        training_curves=e if e is not None else _e_table(),
    )


def _compare(root, prov=None):
    return baseline.compare(root, "smoke", lambda exp: prov or {"torch_version": "2.13", "seed": 1})


def test_promote_refuses_partial_then_versions_without_overwriting(tmp_path):
    _stored(tmp_path)
    with pytest.raises(baseline.BaselineError, match=r"not materialized.*A: determinism_summary"):
        baseline.promote(tmp_path, "smoke")
    first = baseline.promote(tmp_path, "smoke", allow_partial=True, environment={"seed": 1, "torch_version": "2.13"})
    assert set(first.promoted) == {"B", "D", "E"} and "A" in first.skipped
    second = baseline.promote(tmp_path, "smoke", allow_partial=True, environment={"seed": 1})
    assert second.version != first.version and second.previous == first.version
    assert baseline.list_versions(tmp_path, "smoke") == sorted([first.version, second.version])
    assert baseline.current_version(tmp_path, "smoke").name == second.version
    manifest = baseline.load_manifest(first.folder)  # the first version is still intact
    assert manifest["experiments"]["A"]["status"] == "not materialized"
    assert manifest["experiments"]["D"]["tables"]["data_movement_check_table"]["sha256"]
    assert (first.folder / "data_movement_check_table.parquet").exists()


def test_no_baseline_says_so(tmp_path):
    _stored(tmp_path)
    result = _compare(tmp_path)
    assert result.baseline_version is None and "no baseline promoted" in result.reason
    assert result.table["status"].to_list() == ["no baseline"]


def test_unchanged_data_moves_nothing_and_absent_experiments_are_rows(tmp_path):
    _stored(tmp_path)
    baseline.promote(tmp_path, "smoke", allow_partial=True, environment={"seed": 1, "torch_version": "2.13"})
    table = _compare(tmp_path).table
    assert table.filter(pl.col("moved") == "yes").height == 0
    presence = {r["experiment"]: r["status"] for r in table.filter(pl.col("kind") == "presence").iter_rows(named=True)}
    assert presence == {e: "not in baseline, not materialized" for e in ("A", "C1", "C2", "C3", "M")}
    b = table.filter(pl.col("experiment") == "B")
    assert b.filter(pl.col("kind") == "statistic").height == 2 * 2 * 2 * 4  # chains x dtypes x paths x stats
    assert (b.filter(pl.col("kind") == "statistic")["tolerance"] > 0).all()  # measured, not zero


def test_moves_are_detected_with_severity_and_provenance(tmp_path):
    _stored(tmp_path)
    baseline.promote(tmp_path, "smoke", allow_partial=True, environment={"seed": 1, "torch_version": "2.13"})
    # B: a 1-ULP bump on a few sets stays within the bootstrap noise of the statistics, but with the same
    # seed those sets are compared exactly and moved the worse way; D breaks; E's fused loss jumps.
    _stored(tmp_path, b=_b_table(jitter_sets=3), d=_d_table(broken=True), e=_e_table(fused_final=2.70))
    result = _compare(tmp_path, {"torch_version": "2.14", "seed": 1})
    t = result.table
    moved = t.filter(pl.col("moved") == "yes")
    d = moved.filter((pl.col("experiment") == "D") & (pl.col("kind") != "provenance"))
    assert set(d["item"]) == {
        "data_movement_check_table/rotate_half/float16/2x8x16/contiguous/bit_equal",
        "data_movement_check_table/rotate_half/float16/2x8x16/contiguous/ulp_max",
    }
    assert set(d["severity"]) == {"ERROR"}
    e = moved.filter((pl.col("experiment") == "E") & pl.col("item").str.contains("final_eval_loss"))
    assert e["item"].to_list() == ["bfloat16_fused/final_eval_loss@20"] and e["severity"][0] == "ERROR"
    assert e["delta"][0] == pytest.approx(0.2) and e["tolerance"][0] == pytest.approx(0.02)
    b_stats = moved.filter((pl.col("experiment") == "B") & (pl.col("kind") == "statistic"))
    assert b_stats.height == 0  # within noise
    b_paired = moved.filter((pl.col("experiment") == "B") & (pl.col("kind") == "paired"))
    assert b_paired.height == 8 and set(b_paired["severity"]) == {"ERROR"}
    assert result.provenance_changed["D"] == {"torch_version": ("2.13", "2.14")}
    prov = moved.filter(pl.col("kind") == "provenance")
    assert set(prov["experiment"]) == {"B", "D", "E"} and set(prov["severity"]) == {"INFO"}


def test_distribution_shift_beyond_noise_moves_b(tmp_path):
    _stored(tmp_path)
    baseline.promote(tmp_path, "smoke", allow_partial=True, environment={"seed": 1})
    _stored(tmp_path, b=_b_table(shift=2.0))
    b = _compare(tmp_path, {"seed": 1}).table.filter((pl.col("experiment") == "B") & (pl.col("kind") == "statistic"))
    means = b.filter(pl.col("item").str.ends_with("ulp_max_mean"))
    assert (means["moved"] == "yes").all() and set(means["severity"]) == {"ERROR"}


def test_experiment_missing_now_is_reported(tmp_path):
    _stored(tmp_path)
    baseline.promote(tmp_path, "smoke", allow_partial=True, environment={"seed": 1})
    (tmp_path / "smoke" / "data_movement_check_table.parquet").unlink()
    t = _compare(tmp_path).table
    row = t.filter(pl.col("experiment") == "D").row(0, named=True)
    assert row["status"].startswith("not materialized") and row["severity"] == "WARN"


def test_bootstrap_tolerance_is_zero_without_spread_and_grows_with_it():
    mean = comparators.STATS["mean"]
    assert comparators.bootstrap_tolerance(np.full(50, 3.0), mean, 0) == 0.0
    narrow = comparators.bootstrap_tolerance(np.random.default_rng(0).normal(10, 1, 500), mean, 0)
    wide = comparators.bootstrap_tolerance(np.random.default_rng(0).normal(10, 5, 500), mean, 0)
    assert 0 < narrow < wide


BASELINE_CHECKS = (
    "no_moves_against_baseline",
    "baseline_items_comparable",
    "baseline_moves_within_rule",
    "baseline_provenance_changed",
    "baseline_covers_every_experiment",
)


def _materialize_comparison(tmp_path, smoke_resources):
    return dg.materialize(
        [regression.baseline_comparison, *(getattr(regression, c) for c in BASELINE_CHECKS)], resources=smoke_resources
    )


def _check(result, name):
    return next(e for e in result.get_asset_check_evaluations() if e.check_name == name)


def test_baseline_checks_declare_their_outcome_kind():
    kinds = matrix_runs.declared_outcomes([getattr(regression, c) for c in BASELINE_CHECKS])
    assert kinds == {
        f"baseline_comparison:{c}": k
        for c, k in zip(BASELINE_CHECKS, ("claim", "validity", "finding", "finding", "finding"), strict=False)
    }
    spec = next(iter(regression.no_moves_against_baseline.check_specs))
    assert spec.metadata["rule.claim"].startswith("numerics unchanged")


def test_comparison_asset_and_checks(tmp_path, smoke_resources):
    _stored(tmp_path)
    # No baseline: the claim is inconclusive (WARN) with the reason, it does not pass.
    check = _check(_materialize_comparison(tmp_path, smoke_resources), "no_moves_against_baseline")
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["verdict"].value == "inconclusive"
    assert "no baseline promoted" in check.metadata["reason"].value
    # Promote through the CLI, compare unchanged data: supported, valid, no findings but the coverage gaps.
    assert cli_main(["promote-baseline", "--profile", "smoke", "--data-dir", str(tmp_path)]) == 2  # partial refused
    assert (
        cli_main(
            [
                "promote-baseline",
                "--profile",
                "smoke",
                "--data-dir",
                str(tmp_path),
                "--allow-partial",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    result = _materialize_comparison(tmp_path, smoke_resources)
    claim = _check(result, "no_moves_against_baseline")
    assert claim.passed and claim.metadata["verdict"].value == "supported"
    assert _check(result, "baseline_items_comparable").passed and _check(result, "baseline_moves_within_rule").passed
    gaps = _check(result, "baseline_covers_every_experiment")
    assert gaps.passed and gaps.metadata["findings"].value > 0
    assert "A: not in baseline, not materialized" in gaps.metadata["gaps"].value
    # Break D: contradicted at ERROR, and the metadata names the moved item.
    _stored(tmp_path, d=_d_table(broken=True))
    result = _materialize_comparison(tmp_path, smoke_resources)
    check = _check(result, "no_moves_against_baseline")
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["verdict"].value == "contradicted"
    assert "rotate_half" in check.metadata["what_moved"].value
    assert _check(result, "baseline_items_comparable").passed  # a drift is not an invalid comparison
    table = storage.read_value(tmp_path / "smoke" / "baseline_comparison")
    assert table.columns[:5] == ["experiment", "item", "kind", "baseline_value", "current_value"]


def _comparison_table(rows):
    base = {
        "experiment": "D",
        "item": "x",
        "kind": "bit_exact",
        "baseline_value": "0",
        "current_value": "0",
        "delta": None,
        "tolerance": 0.0,
        "tolerance_source": "bit-exact",
        "moved": "no",
        "severity": "none",
        "status": "compared",
    }
    return pl.DataFrame([{**base, **r} for r in rows], schema=baseline.COLUMNS)


def _meta(result, key):
    value = result.metadata[key]
    return getattr(value, "value", value)


def test_missing_item_is_invalid_and_improvements_and_provenance_are_findings():
    table = _comparison_table(
        [
            {"item": "ok"},
            {"item": "gone", "current_value": None, "moved": "yes", "severity": "ERROR", "status": "not in current"},
            {"item": "better", "baseline_value": "3", "current_value": "1", "moved": "yes", "severity": "WARN"},
            {
                "item": "provenance.torch_version",
                "kind": "provenance",
                "baseline_value": "2.13",
                "current_value": "2.14",
                "moved": "yes",
                "severity": "INFO",
            },
            {
                "item": "provenance.git_commit",
                "kind": "provenance",
                "baseline_value": "abc",
                "current_value": "def",
                "moved": "yes",
                "severity": "INFO",
            },
        ]
    )
    valid = regression.baseline_items_comparable(table)
    assert (
        not valid.passed
        and valid.severity == dg.AssetCheckSeverity.ERROR
        and "D gone: not in current" in _meta(valid, "problems")
    )
    claim = regression.no_moves_against_baseline(table)  # a missing item is validity, not a drift
    assert claim.passed and _meta(claim, "verdict") == "supported"
    moves = regression.baseline_moves_within_rule(table)
    assert moves.passed and _meta(moves, "findings") == 1
    prov = regression.baseline_provenance_changed(table)
    assert prov.passed and _meta(prov, "findings") == 2
    assert "torch_version: 2.13 -> 2.14" in _meta(prov, "details")
    drift = _comparison_table(
        [{"item": "worse", "baseline_value": "0", "current_value": "3", "moved": "yes", "severity": "ERROR"}]
    )
    result = regression.no_moves_against_baseline(drift)
    assert (
        not result.passed
        and result.severity == dg.AssetCheckSeverity.ERROR
        and _meta(result, "verdict") == "contradicted"
    )


def test_promote_job_runs(tmp_path, smoke_resources):
    _stored(tmp_path)
    result = regression.promote_baseline_job.execute_in_process(
        resources=smoke_resources,
        run_config={"ops": {"promote_baseline_op": {"config": {"allow_partial": True, "note": "t"}}}},
    )
    assert result.success
    folder = baseline.current_version(tmp_path, "smoke")
    assert json.loads((folder / "manifest.json").read_text())["note"] == "t"


def test_new_baseline_version_never_reuses_a_folder(tmp_path):
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert baseline._new_version(tmp_path, now) == "20260102T030405Z"
    (tmp_path / "20260102T030405Z").mkdir()
    (tmp_path / "20260102T030405Z-2").mkdir()
    assert baseline._new_version(tmp_path, now) == "20260102T030405Z-3"


def test_promoted_tables_take_the_first_recorded_provenance_else_the_environment(tmp_path):
    _store(tmp_path, data_movement_check_table=_d_table(), training_curves=_e_table())
    staging = tmp_path / "staging"
    staging.mkdir()
    assets = ("data_movement_check_table", "training_curves")
    recorded = {"training_curves": ({"torch_version": "2.13"}, "run r1")}
    entry = baseline._promote_tables(tmp_path / "smoke", staging, assets, recorded.get, {"torch_version": "env"})
    assert entry["provenance"] == {"torch_version": "2.13"} and entry["provenance_source"] == "run r1"
    assert sorted(p.name for p in staging.iterdir()) == ["data_movement_check_table.parquet", "training_curves.parquet"]
    stored = tmp_path / "smoke" / "training_curves.parquet"
    assert entry["tables"]["training_curves"]["bytes"] == stored.stat().st_size
    fallback = baseline._promote_tables(tmp_path / "smoke", tmp_path, assets[:1], None, {"torch_version": "env"})
    assert fallback["provenance"] == {"torch_version": "env"}
    assert fallback["provenance_source"].startswith("promoting environment")
    with pytest.raises(baseline.BaselineError, match="c2_versions has no stored file under"):
        baseline._promote_tables(tmp_path / "smoke", staging, ("c2_versions",), None, None)


def test_each_experiment_compares_its_own_tables(tmp_path):
    _store(tmp_path, "base", data_movement_check_table=_d_table())
    _store(tmp_path, "cur", data_movement_check_table=_d_table(broken=True))
    rows = baseline._compare_experiment("D", tmp_path / "base", tmp_path / "cur", same_inputs=True)
    assert [(r["item"], r["moved"], r["severity"]) for r in rows] == [
        ("data_movement_check_table/rotate_half/float16/2x8x16/contiguous/bit_equal", "yes", "ERROR"),
        ("data_movement_check_table/rotate_half/float16/2x8x16/contiguous/ulp_max", "yes", "ERROR"),
        ("data_movement_check_table/transpose_concat/float16/2x8x16/contiguous/bit_equal", "no", "none"),
        ("data_movement_check_table/transpose_concat/float16/2x8x16/contiguous/ulp_max", "no", "none"),
    ]
    with pytest.raises(baseline.BaselineError, match="unknown experiment 'Z'"):
        baseline._compare_experiment("Z", tmp_path / "base", tmp_path / "cur", same_inputs=True)


def _throwaway(*tables: BaselineTable) -> Experiment:
    """An experiment no code of the baseline names: only its declaration says what is compared."""
    return Experiment(id="Z", title="throwaway", group="z", slug="z", sections=(), load=lambda: (), baseline=tables)


def test_a_declared_columns_table_is_compared_from_its_declaration_alone():
    exp = _throwaway(
        BaselineTable(
            "z_table",
            keys=("case",),
            columns={"err": "lower", "ok_fraction": "higher", "flag": "any", "code_sha256": "code"},
        ),
        BaselineTable("z_kept", method="kept"),
    )
    base = pl.DataFrame(
        {"case": ["a", "b"], "err": [1.0, 2.0], "ok_fraction": [0.5, 0.9], "flag": [1, 1], "code_sha256": ["x", "y"]}
    )
    cur = pl.DataFrame(
        {"case": ["a", "c"], "err": [0.5, 2.0], "ok_fraction": [0.4, 0.9], "flag": [2, 1], "code_sha256": ["z", "y"]}
    )
    kept = pl.DataFrame({"anything": [1]})
    rows = comparators.compare_tables(exp, {"z_table": base, "z_kept": kept}, {"z_table": cur, "z_kept": None}, True)
    got = {r["item"]: (r["kind"], r["moved"], r["severity"], r["status"]) for r in rows}
    assert [r["item"] for r in rows][:4] == [
        "z_table/a/err",
        "z_table/a/ok_fraction",
        "z_table/a/flag",
        "z_table/b/err",
    ]
    assert got["z_table/a/err"] == ("bit_exact", "yes", "WARN", "compared")  # an error went down: better
    assert got["z_table/a/ok_fraction"] == ("bit_exact", "yes", "ERROR", "compared")  # a fraction went down
    assert got["z_table/a/flag"] == ("bit_exact", "yes", "ERROR", "compared")  # any change is worse
    assert got["z_table/a/code_sha256"] == ("code", "yes", "WARN", "compared")  # code columns come last, WARN
    assert got["z_table/b/err"][2:] == ("ERROR", "not in current")
    assert got["z_table/c/err"][2:] == ("WARN", "not in baseline")
    assert [r["kind"] for r in rows] == ["bit_exact"] * 9 + ["code"] * 3  # the kept table adds nothing
    assert {r["experiment"] for r in rows} == {"Z"}


def test_a_declared_experiment_is_compared_from_stored_files(tmp_path):
    """``_compare_experiment`` takes a record as well as an id: prepare and label apply, and the
    distribution and curve methods work on any experiment that declares them."""
    exp = _throwaway(
        BaselineTable(
            "z_runs",
            keys=("case",),
            columns={"n": "lower"},
            prepare=lambda df: df.group_by("case").agg(pl.len().alias("n")),
            label="z_runs/counts",
        ),
        BaselineTable("z_sets", method="distribution", keys=("chain", "dtype", "path"), columns={"ulp_max": "lower"}),
        BaselineTable("z_curves", method="curves"),
    )
    runs = pl.DataFrame({"case": ["a", "a", "b"]})
    _store(tmp_path, "base", z_runs=runs, z_sets=_b_table(), z_curves=_e_table())
    _store(tmp_path, "cur", z_runs=runs.head(2), z_sets=_b_table(shift=2.0), z_curves=_e_table(fused_final=2.7))
    rows = baseline._compare_experiment(exp, tmp_path / "base", tmp_path / "cur", same_inputs=True)
    moved = {r["item"]: r["severity"] for r in rows if r["moved"] == "yes"}
    assert {r["experiment"] for r in rows} == {"Z"}
    assert "z_runs/counts/b/n" in moved  # the label names the prepared table's items
    assert moved["softmax/float16/eager/ulp_max_mean"] == "ERROR"
    # Same seed: every set's error grew, a regression of the computation itself.
    assert moved["softmax/float16/eager/sets_with_changed_ulp_max"] == "ERROR"
    assert moved["bfloat16_fused/final_eval_loss@20"] == "ERROR"
    (curve,) = [r for r in rows if r["item"] == "bfloat16_fused/final_eval_loss@20"]
    assert curve["tolerance_source"].startswith("Z's data-order noise band")


def test_every_declared_baseline_method_has_a_comparator():
    from pipeline.experiments import EXPERIMENTS

    declared = {t.method for e in EXPERIMENTS for t in e.baseline}
    assert declared <= set(comparators.COMPARATORS)
    assert set(comparators.COMPARATORS) == {"columns", "tensors", "distribution", "curves", "kept"}


def test_the_curve_tolerance_is_the_spread_of_every_data_order_replicate():
    """Four replicates: the band is max - min over all of them (widest within +-1 point), not one
    pair's difference; replicates on other steps are left out."""
    band = curves_compare.noise_band([[3.0, 2.8, 2.6], [3.02, 2.79, 2.6], [2.97, 2.85, 2.6], [3.0, 2.8, None]])
    assert band == pytest.approx([0.06, 0.06, 0.06])
    assert curves_compare.noise_band([[1.0, 2.0]]) == [None, None]
    steps = [5, 10, 15]
    curves = {
        "bfloat16_eager": [3.0, 2.8, 2.6],
        "bfloat16_eager_order_B": [3.01, 2.8, 2.6],
        "bfloat16_eager_order_C": [2.9, 2.8, 2.61],
        "bfloat16_eager_order_D": [3.0, 2.8, 2.64],
        "bfloat16_fused": [3.5, 3.5, 3.5],
    }
    df = pl.DataFrame(
        [{"run": r, "step": s, "eval_loss": v} for r, vals in curves.items() for s, v in zip(steps, vals, strict=True)]
    )
    band, replicates = curves_compare._band_of(df)
    assert replicates == 4 and band == pytest.approx({5: 0.11, 10: 0.11, 15: 0.04})
    # one pair alone (the old rule) would have said 0.01 at step 5
    assert curves_compare._band_of(df.filter(pl.col("run").is_in(["bfloat16_eager", "bfloat16_eager_order_B"])))[
        0
    ] == pytest.approx({5: 0.01, 10: 0.01, 15: 0.0})


def test_same_seed_sets_are_compared_exactly_and_a_worse_move_is_an_error():
    b = np.array([1.0, 2.0, 3.0, np.nan])
    (one_worse,) = comparators._same_sets("B", "g", "ulp_max", "lower", b, np.array([1.0, 2.5, 3.0, np.nan]))
    assert one_worse["severity"] == "ERROR" and one_worse["moved"] == "yes"
    assert "1 of 4 sets moved the worse way" in one_worse["tolerance_source"]
    (better,) = comparators._same_sets("B", "g", "ulp_max", "lower", b, np.array([0.5, 2.0, 3.0, np.nan]))
    assert better["severity"] == "WARN" and better["moved"] == "yes"
    (same,) = comparators._same_sets("B", "g", "ulp_max", "lower", b, b.copy())
    assert same["moved"] == "no"


def _groups(shift: float, seed: int, groups: int = 16) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        [
            {"g": f"g{k}", "i": i, "v": float(v) + shift}
            for k in range(groups)
            for i, v in enumerate(rng.gamma(2.0, 1.5, size=200).round())
        ]
    )


def test_different_inputs_err_only_when_groups_move_the_worse_way_together():
    """Different seeds: a group's statistic beyond its bootstrap tolerance is WARN (no multiplicity
    control over groups); the groups paired by key carry the ERROR, by an exact sign test with Holm."""
    from pipeline.experiment import BaselineTable

    table = BaselineTable("t", method="distribution", keys=("g",), columns={"v": "lower"}, order=("i",))
    shifted = comparators.compare_distribution("B", table, _groups(0.0, 1), _groups(2.0, 2), same_inputs=False)
    stats = [r for r in shifted if r["kind"] == "statistic" and r["moved"] == "yes"]
    assert stats and {r["severity"] for r in stats} == {"WARN"}
    paired = {r["item"]: r for r in shifted if r["kind"] == "paired"}
    assert (
        paired["t/groups_worse_v_mean"]["severity"] == "ERROR"
        and paired["t/groups_worse_v_mean"]["current_value"] == "16"
    )
    redrawn = comparators.compare_distribution("B", table, _groups(0.0, 1), _groups(0.0, 3), same_inputs=False)
    assert not [r for r in redrawn if r["severity"] == "ERROR"]
    assert {r["item"] for r in redrawn if r["kind"] == "paired"} == {f"t/groups_worse_v_{s}" for s in comparators.STATS}


def _e_curves(fused_drift: float = 0.0, device: str = "cpu") -> pl.DataFrame:
    """E-like curves: three eager data orders whose final eval losses spread by 0.08 nats, and fused on
    order A with ``fused_drift`` nats added to its losses, growing linearly to the last step."""
    steps = [0, 5, 10, 15, 20]
    eager = [5.5, 3.0, 2.8, 2.6, 2.50]
    runs = (  # run, data seed, added loss at step s
        ("bfloat16_eager", 10, lambda s: 0.0),
        ("bfloat16_eager_order_B", 11, lambda s: 0.05 if s else 0.0),
        ("bfloat16_eager_order_C", 12, lambda s: -0.03 if s else 0.0),
        ("bfloat16_fused", 10, lambda s: fused_drift * s / steps[-1]),
    )
    rows = []
    for run, data_seed, added in runs:
        for s, v in zip(steps, eager, strict=True):
            loss = v + added(s)
            rows.append(
                {
                    "run": run,
                    "device": device,
                    "data_seed": data_seed,
                    "init_seed": 1,
                    "init_ulp_nudge": False,
                    "threads": 1,
                    "step": s,
                    "eval_loss": loss,
                    "train_loss": loss + 0.1 if s else None,
                    "grad_norm": 0.5 if s else None,
                }
            )
    return pl.DataFrame(rows)


def test_same_inputs_on_cpu_compare_e_curves_bit_for_bit():
    """A deterministic +0.03 nats drift of fused's loss is well inside the data-order band (0.08 nats), so the
    band alone lets it through; with the same seed on a CPU every eval point must be bit-identical: ERROR."""
    table = BaselineTable("training_curves", method="curves")
    drifted = curves_compare.compare_curves("E", table, _e_curves(), _e_curves(fused_drift=0.03), same_inputs=True)
    moved = {r["item"]: r for r in drifted if r["moved"] == "yes"}
    assert set(moved) == {"bfloat16_fused/eval_loss/bit_exact", "bfloat16_fused/train_loss/bit_exact"}
    loss = moved["bfloat16_fused/eval_loss/bit_exact"]
    assert loss["severity"] == "ERROR" and loss["delta"] == pytest.approx(0.03) and loss["tolerance"] == 0.0
    assert "4 of 5 points differ, largest at step 20" in loss["tolerance_source"]
    (band,) = [r for r in drifted if r["item"] == "bfloat16_fused/final_eval_loss@20"]
    assert band["moved"] == "no" and band["tolerance"] == pytest.approx(0.08)  # what the band alone says
    # unchanged curves: every run compared bit for bit, nothing moved
    same = curves_compare.compare_curves("E", table, _e_curves(), _e_curves(), same_inputs=True)
    exact = [r for r in same if r["item"].endswith("/bit_exact")]
    assert len(exact) == 4 * 3 and not [r for r in same if r["moved"] == "yes"]
    # a last-bit change is a change too
    tiny = _e_curves().with_columns(
        pl.when((pl.col("run") == "bfloat16_eager") & (pl.col("step") == 10))
        .then(pl.col("grad_norm") + 2**-40)
        .otherwise(pl.col("grad_norm"))
        .alias("grad_norm")
    )
    (nudged,) = [r for r in curves_compare.compare_curves("E", table, _e_curves(), tiny, True) if r["moved"] == "yes"]
    assert nudged["item"] == "bfloat16_eager/grad_norm/bit_exact" and nudged["severity"] == "ERROR"


def test_e_curves_fall_back_to_the_band_when_bit_for_bit_is_not_owed():
    table = BaselineTable("training_curves", method="curves")
    cases = {
        "different inputs": (_e_curves(), _e_curves(fused_drift=0.03), False),
        "ran on cuda:0": (_e_curves(device="cuda:0"), _e_curves(fused_drift=0.03, device="cuda:0"), True),
        "record no device": (_e_curves().drop("device"), _e_curves(fused_drift=0.03).drop("device"), True),
        "seeds differ": (_e_curves(), _e_curves(fused_drift=0.03).with_columns(pl.col("data_seed") + 100), True),
        # a CPU's thread count moves bits: another count, or a baseline from before runs recorded it
        "computed on 1 thread(s) in the baseline and 2 now": (
            _e_curves(),
            _e_curves(fused_drift=0.03).with_columns(pl.lit(2).alias("threads")),
            True,
        ),
        "the baseline curves do not record the threads": (
            _e_curves().drop("threads"),
            _e_curves(fused_drift=0.03),
            True,
        ),
    }
    for why, (base, cur, same_inputs) in cases.items():
        rows = curves_compare.compare_curves("E", table, base, cur, same_inputs)
        assert not [r for r in rows if r["item"].endswith("/bit_exact")], why
        (band,) = [r for r in rows if r["item"] == "bfloat16_fused/final_eval_loss@20"]
        assert band["moved"] == "no" and why in band["tolerance_source"], why
    assert curves_compare.curves_exact_reason(_e_curves(), _e_curves(), True) is None
