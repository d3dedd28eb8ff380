"""Diagnostics assets: divergence table of the E model, fuzzer outcomes, measured tolerances."""

import math
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest
import torch
from _smoke_run import RunPart  # tests/ is on sys.path (pytest rootdir import mode)

from pipeline.experiments.reduction_order.spec import SIZES as REDUCTION_SIZES
from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES
from pipeline.instruments.diagnostics import divergence, fuzzing, tolerances
from pipeline.instruments.diagnostics.spec import SIZES
from pipeline.storage import read_value, write_value
from pipeline.verdicts import CONTRADICTED, FINDING, INCONCLUSIVE, SUPPORTED
from pipeline.workloads import WORKLOADS
from precisionkit.tolerance import tolerance, tolerance_from_table


def test_diagnostic_checks_are_findings_except_wrong_results():
    # Crashes, breaks and tolerance coverage point a human at something; a wrong result (a fuzzed graph
    # beyond its tolerance, a divergent layer) judges a claim.
    checks = [fuzzing.fuzzed_graphs_all_ok, tolerances.matrix_covers_measured_error]
    specs = {spec.name: spec.metadata for c in checks for spec in c.check_specs}
    assert specs.keys() == {"fuzzed_graphs_all_ok", "matrix_covers_measured_error"}
    for meta in specs.values():
        assert meta["outcome"] == FINDING and not any(k.startswith("rule.") for k in meta)
    for claim in (divergence.no_layer_diverges, fuzzing.fuzzed_graphs_no_wrong_results):
        (spec,) = claim.check_specs
        assert spec.metadata["outcome"] == "claim" and "rule.decision" in spec.metadata


def test_locator_rule_contradicts_a_divergent_layer_and_names_it():
    table = pl.DataFrame(
        {
            "layer": ["wte#0", "blocks.0.mlp#0", "<root>#0"],
            "excess": [0.0, 0.02, 0.001],
            "noise": [0.0039] * 3,
            "divergent": [False, True, False],
            "fused_error": ["", "", ""],
        }
    )
    verdict, reason, meta = divergence.judge_locator(table)
    assert verdict == CONTRADICTED and "first blocks.0.mlp#0" in reason and meta["divergent_rows"] == 1
    healthy = table.with_columns(pl.lit(False).alias("divergent"))
    assert divergence.judge_locator(healthy)[0] == SUPPORTED
    failed = healthy.with_columns(pl.Series("fused_error", ["", "RuntimeError: x", ""]))
    assert divergence.judge_locator(failed)[0] == INCONCLUSIVE


def test_divergence_and_fuzz_assets_smoke(smoke_on_run_device):
    result = RunPart(
        smoke_on_run_device,
        [
            divergence.divergence_per_layer,
            divergence.no_layer_diverges,
            fuzzing.fuzz_outcomes,
            fuzzing.fuzzed_graphs_all_ok,
            fuzzing.fuzzed_graphs_no_wrong_results,
        ],
    )
    assert result.success
    table = read_value(result.data / "divergence_per_layer")
    assert list(table.columns[:6]) == ["layer_index", "layer", "module_type", "depth", "eager_err", "fused_err"]
    assert table["layer_index"].to_list() == list(range(table.height))
    layers = table["layer"].to_list()
    # Every call of the 1-layer GPT: embeddings, the block's parts, the block, final norm, head, root.
    for needed in (
        "wte#0",
        "wpe#0",
        "blocks.0.attn.c_attn#0",
        "blocks.0.attn#0",
        "blocks.0#0",
        "ln_f#0",
        "lm_head#0",
        "<root>#0",
    ):
        assert needed in layers
    assert layers[-1] == "<root>#0"
    assert table["eager_err"].is_finite().all() and table["fused_err"].is_finite().all()
    # The fp64 reference uses the bf16 weights upcast, so embedding lookups are exact and every
    # layer that computes carries bf16 rounding error.
    emb = table.filter(pl.col("module_type") == "Embedding")
    assert emb.height == 2 and (emb["eager_err"] == 0).all() and (emb["fused_err"] == 0).all()
    assert (table.filter(pl.col("module_type") != "Embedding")["eager_err"] > 0).all()
    assert (table["fused_error"] == "").all()
    meta = result.asset_materializations_for_node("divergence_per_layer")[0].metadata
    assert "fresh seeded initialization" in meta["model_weights"].value

    outcomes = read_value(result.data / "fuzz_outcomes")
    assert outcomes.height == SIZES["smoke"].fuzz_graphs
    assert set(outcomes["class"]) <= {"ok", "mismatch", "graph_break", "compile_error", "crash", "invalid"}
    ok = outcomes.filter(pl.col("class") == "ok")
    # "ok" means: within tolerance, or no more than EAGER_MARGIN x eager's error.
    assert ((ok["fused_tol_ratio"] <= 1) | (ok["fused_tol_ratio"] <= 2 * ok["eager_tol_ratio"])).all()
    # Failing graphs (a finding, if any) come with a reproducer script on disk.
    for path in outcomes.filter(pl.col("class") != "ok")["reproducer"]:
        assert path and Path(path).exists()
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    claim = checks.pop("fuzzed_graphs_no_wrong_results")
    assert claim.metadata["verdict"].value == fuzzing.judge_fuzz(outcomes)[0]
    assert claim.metadata["mismatches"].value == (outcomes["class"] == "mismatch").sum()
    locator = checks.pop("no_layer_diverges")
    assert locator.metadata["verdict"].value == divergence.judge_locator(table)[0]
    assert locator.metadata["divergent_rows"].value == int(table["divergent"].sum())
    assert set(checks) == {"fuzzed_graphs_all_ok"}
    assert (checks["fuzzed_graphs_all_ok"].metadata["findings"].value == 0) == outcomes["class"].is_in(
        ["ok", "mismatch"]
    ).all()
    assert all(e.passed for e in checks.values())  # findings are observations, never failures
    for e in checks.values():  # findings: WARN whatever they find
        assert e.metadata["outcome"].value == FINDING and e.severity == dg.AssetCheckSeverity.WARN


def _fuzz_table(classes):
    n = len(classes)
    return pl.DataFrame(
        {
            "seed": list(range(n)),
            "dtype": ["float16"] * n,
            "ops": ["add,softmax"] * n,
            "shrunk_ops": ["softmax" if c == "mismatch" else None for c in classes],
            "class": classes,
            "fused_tol_ratio": [5.0 if c == "mismatch" else 0.3 for c in classes],
            "eager_tol_ratio": [0.4] * n,
            "reproducer": ["repro.py" if c != "ok" else None for c in classes],
        }
    )


def test_fuzz_rule_contradicts_one_mismatch_and_supports_only_many_clean_graphs():
    verdict, reason, meta = fuzzing.judge_fuzz(_fuzz_table(["ok"] * 50 + ["mismatch", "crash"]))
    assert verdict == CONTRADICTED and meta["mismatches"] == 1 and meta["compared"] == 51
    assert "seed 50 (softmax)" in reason and "5x its tolerance" in reason
    verdict, _, meta = fuzzing.judge_fuzz(_fuzz_table(["ok"] * 46 + ["crash"] * 4))
    assert verdict == SUPPORTED and meta["mismatch_rate_upper_bound"] == pytest.approx(-math.log(0.01) / 46)
    verdict, reason, _ = fuzzing.judge_fuzz(_fuzz_table(["ok"] * 39 + ["graph_break"]))
    assert verdict == INCONCLUSIVE and "only 39 graphs" in reason
    (spec,) = fuzzing.fuzzed_graphs_no_wrong_results.check_specs
    assert spec.metadata["outcome"] == "claim" and spec.metadata["rule.threshold"] == 1.0


def _upstream():
    rng = np.random.default_rng(0)
    softmax_abs = np.linspace(1e-4, 2e-4, 1000)  # p99.9 known in closed form
    per_set = pl.DataFrame(
        {
            "chain": ["softmax"] * 2000,
            "distribution": ["normal"] * 2000,
            "dtype": ["float16"] * 2000,
            "path": ["fused"] * 1000 + ["eager"] * 1000,
            "set_index": list(range(1000)) * 2,
            "abs_max": np.concatenate([softmax_abs, np.full(1000, 5.0)]),  # eager rows must be ignored
            "ulp_max": np.concatenate([np.linspace(0.5, 1.0, 1000), np.full(1000, 99.0)]),
        }
    )
    c1 = pl.DataFrame(
        {"path": ["eager_A", "fused_A", "fused_B"], "abs_max": [9.0, 2.4e-4, 3.9e-4], "ulp_max": [9.0, 0.5, 1.0]}
    )
    c2 = pl.DataFrame(
        {
            "version": ["eager", "fused_default", "fused_default"],
            "output": ["out16", "out16", "acc32"],
            "abs_max": [9.0, 0.06, 1.6e-5],
            "ulp_max": [9.0, 0.5, 107.0],
        }
    )
    c3 = pl.DataFrame({"path": ["A_eager", "A_fused"], "ulp_max": [9.0, 0.4996]})
    fuzzed = pl.DataFrame(
        {
            "class": ["ok", "ok", "mismatch"],
            "op_class": ["layernorm", "layernorm", "layernorm"],
            "dtype": ["float32"] * 3,
            "reduction_size": [64, 64, 64],
            "fused_abs_err": [3e-7, float(rng.uniform(1e-7, 2e-7)), 1.0],
        }
    )
    return {
        "accumulated_error_per_set": per_set,
        "c1_error_vs_fp64": c1,
        "c2_error_vs_fp64": c2,
        "c3_iteration_table": c3,
        "fuzz_outcomes": fuzzed,
    }, softmax_abs


def test_measured_tolerances_from_upstream_tables(smoke_resources, tmp_path):
    pool, c2_length = POOL_SIZES["smoke"], REDUCTION_SIZES["smoke"].length
    upstream, softmax_abs = _upstream()
    for name, df in upstream.items():
        write_value(df, tmp_path / "smoke" / name)
    result = dg.materialize(
        [
            *(dg.AssetSpec(name) for name in upstream),
            tolerances.measured_tolerances,
            tolerances.matrix_covers_measured_error,
        ],
        resources=smoke_resources,
        selection=[tolerances.measured_tolerances.key],
    )
    assert result.success
    table = read_value(tmp_path / "smoke" / "measured_tolerances")
    rows = {(r["op_class"], r["dtype"], r["reduction_size"]): r for r in table.iter_rows(named=True)}

    k = WORKLOADS["softmax"].reduction(pool)
    soft = rows[("softmax", "float16", k)]
    assert soft["n_obs"] == 1000 and soft["atol"] == pytest.approx(np.percentile(softmax_abs, 99.9))
    assert soft["matrix_atol"] == tolerance(torch.float16, "softmax", k).atol
    assert soft["ratio"] == pytest.approx(soft["atol"] / soft["matrix_atol"]) and soft["verdict"] == "matrix >10x loose"
    # C1 and C3 pool into fp16 elementwise; C3 has ULP but no absolute error.
    elem = rows[("elementwise", "float16", 1)]
    assert elem["n_obs"] == 3 and elem["atol"] == pytest.approx(np.percentile([2.4e-4, 3.9e-4], 99.9))
    assert elem["ulp"] == pytest.approx(np.percentile([0.5, 1.0, 0.4996], 99.9))
    # C2: the fp16 sum of c2_length terms, its fp32 accumulator in a group of its own.
    c2_16 = rows[("matmul", "float16", c2_length)]
    expected = tolerance(torch.float16, "matmul", c2_length)
    assert c2_16["atol"] == pytest.approx(0.06) and c2_16["matrix_atol"] == expected.atol
    assert c2_16["matrix_rule"] == expected.source.split(": ")[-1]
    assert c2_16["verdict"] == ("matrix too tight" if expected.atol < 0.06 else "matrix ok")
    assert ("matmul", "float32", c2_length) in rows
    # Fuzzer: only graphs classified ok count (the mismatching one would dominate otherwise).
    fz = rows[("layernorm", "float32", 64)]
    assert fz["n_obs"] == 2 and fz["atol"] < 1e-6

    check = result.get_asset_check_evaluations()[0]
    assert check.passed and (check.metadata["findings"].value == 0) == (table["ratio"].drop_nulls() <= 1).all()
    assert check.metadata["outcome"].value == FINDING and check.severity == dg.AssetCheckSeverity.WARN

    # The measured table plugs into precisionkit.tolerance; without it the matrix answers as before.
    measured = tolerance_from_table(table.drop_nulls("atol"))
    got = tolerance(torch.float16, "softmax", k, measured=measured)
    assert got.atol == pytest.approx(soft["atol"]) and "measured" in got.source
    assert tolerance(torch.float16, "softmax", k) == tolerance(torch.float16, "softmax", k, measured=None)
    with pytest.raises(ValueError, match="lacks"):
        tolerance_from_table([{"op_class": "softmax", "dtype": "float16"}])


def _outcomes(classes):
    return pl.DataFrame(
        {
            "id": [f"typed-{i}" for i in range(len(classes))],
            "class": classes,
            "features": ["grid"] * len(classes),
            "message": [f"{c} message" for c in classes],
        }
    )


def test_a_genuine_difftest_mismatch_contradicts_and_a_clean_run_bounds_the_rate():
    from pipeline.instruments.diagnostics.difftesting import MIN_PROGRAMS_FOR_SUPPORTED, judge_difftest

    verdict, reason, meta = judge_difftest(_outcomes(["ok"] * 47 + ["mismatch"]))
    assert verdict == CONTRADICTED and meta["mismatches"] == 1 and "typed-47" in reason
    # Crashes and compile errors are findings: they neither contradict nor count as compared.
    verdict, reason, meta = judge_difftest(_outcomes(["ok"] * 100 + ["crash", "compile_error", "invalid"]))
    assert verdict == SUPPORTED and meta["compared"] == 100
    assert meta["mismatch_rate_upper_bound"] == pytest.approx(-np.log(0.01) / 100)
    verdict, _, _ = judge_difftest(_outcomes(["ok"] * (MIN_PROGRAMS_FOR_SUPPORTED - 1) + ["crash"] * 20))
    assert verdict == INCONCLUSIVE


def test_the_testers_class_columns_come_in_one_order_whatever_group_by_returns():
    from pipeline.instruments.diagnostics.report import difftest_section

    diff = pl.DataFrame(
        {
            "id": [f"p{i}" for i in range(5)],
            "generator": ["typed", "typed", "norm", "typed", "norm"],
            "class": ["wrong_result", "ok", "ok", "error", "ok"],
            "features": [""] * 5,
            "message": [""] * 5,
        }
    )

    # the counts table (the lines up to the first blank after its header) reads the same however the rows come
    def counts(page: str) -> str:
        start = page.index("| generator |")
        return page[start : page.index("\n\n", start)]

    tables = {counts(difftest_section(diff.sample(fraction=1.0, shuffle=True, seed=s))) for s in range(8)}
    assert len(tables) == 1
    page = difftest_section(diff)
    assert "| generator | ok | error | wrong_result |" in page
    assert "| norm | 2 | 0 | 0 |" in page and "| typed | 1 | 1 | 1 |" in page
