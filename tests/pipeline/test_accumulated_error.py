import time

import dagster as dg
import numpy as np
import polars as pl
import pytest
import torch

from pipeline import storage
from pipeline.assets import accumulated_error as b
from pipeline.assets import toolkit
from pipeline.profiles import PROFILES
from pipeline.workloads import CHAINS, WORKLOADS, set_args
from precisionkit import error_stats, fused
from precisionkit.batched import error_stats_per_set

B_ASSETS = [
    b.accumulated_error_runs,
    b.accumulated_error_summary,
    b.accumulated_error_counterexamples,
    b.fusion_switch_list,
    b.accumulated_error_distributions,
]
UPSTREAM = [a for a in [*toolkit.input_pools, *toolkit.fp64_references] if any(
    k.to_user_string().endswith(tuple(CHAINS)) for k in a.keys)]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One smoke materialization of S's chain pools + every B asset and check (compiles 20 graphs)."""
    from pipeline.definitions import build_resources
    from pipeline.resources import ExperimentSettings

    base = tmp_path_factory.mktemp("b_data")
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(base))
    start = time.perf_counter()
    result = dg.materialize([*UPSTREAM, *B_ASSETS, *b.chain_checks], resources=resources)
    seconds = time.perf_counter() - start
    print(f"\nsmoke materialization of S chains + B: {seconds:.1f} s")
    return result, base / "smoke", seconds


def _read(folder, name):
    return storage.read_value(folder / name)


def test_per_set_table_has_every_chain_distribution_dtype_path_and_set(smoke_run):
    result, folder, _ = smoke_run
    assert result.success
    per_set = _read(folder, "accumulated_error_per_set")
    n = PROFILES["smoke"].chain_sets
    expected = sum(len(WORKLOADS[c].distributions) for c in CHAINS) * len(b.DTYPES_B) * len(b.PATHS) * n
    assert per_set.height == expected
    counts = per_set.group_by("chain", "distribution", "dtype", "path").agg(pl.col("set_index").sort())
    assert all(v == list(range(n)) for v in counts["set_index"].to_list())
    for col in ("abs_max", "rel_max", "ulp_p50", "ulp_p99", "ulp_max"):
        assert per_set[col].is_finite().all(), col
    # Percentiles are ordered within every set.
    assert (per_set["ulp_p50"] <= per_set["ulp_p99"]).all() and (per_set["ulp_p99"] <= per_set["ulp_max"]).all()
    # Eager compared with itself is bit-identical by construction: the vs-eager column must show it.
    assert (per_set.filter(pl.col("path") == "eager")["max_ulp_vs_eager"] == 0).all()


def test_fused_paths_compiled_once_with_evidence(smoke_run):
    _, folder, _ = smoke_run
    ev = _read(folder, "accumulated_error_fusion_evidence")
    fused_rows = ev.filter(pl.col("path") != "eager")
    assert fused_rows.height == len(CHAINS) * len(b.DTYPES_B) * 2
    assert (fused_rows["recompiles"] == 0).all()
    assert (fused_rows["graph_breaks"] == 0).all()
    assert (fused_rows["kernel_count"] >= 1).all()
    assert fused_rows["code_sha256"].str.len_chars().eq(64).all()
    assert (ev["sets_per_second"] > 0).all()


def test_per_set_stats_equal_error_stats_for_a_sample_set(smoke_run):
    """The per-set row for one set equals precisionkit.error_stats of a fresh eager + fused run."""
    _, folder, _ = smoke_run
    per_set = _read(folder, "accumulated_error_per_set")
    pool = _read(folder, "input_pool_softmax")
    refs = _read(folder, "fp64_reference_softmax")
    w = WORKLOADS["softmax"]
    subset = {a: pool[f"large_logits/float16/{a}"] for a in w.arg_names}
    ref = refs["large_logits/float16"]
    idx = 3
    args = set_args(subset, w, idx)
    fn = fused(w.fn)  # same graph as the asset's: served from Inductor's cache
    for path, out in (("eager", w.fn(*args)), ("fused", fn(*args))):
        want = error_stats(out, ref[idx])
        row = per_set.filter(
            (pl.col("chain") == "softmax") & (pl.col("distribution") == "large_logits") & (pl.col("dtype") == "float16")
            & (pl.col("path") == path) & (pl.col("set_index") == idx)
        ).row(0, named=True)
        for key in ("abs_max", "rel_max", "ulp_p50", "ulp_p99", "ulp_max"):
            assert row[key] == want[key], (path, key, row[key], want[key])
    # And the batched function agrees with error_stats on a whole stacked distribution.
    outs = torch.stack([w.fn(*set_args(subset, w, i)) for i in range(ref.shape[0])])
    batched = error_stats_per_set(outs, ref)
    for i in range(ref.shape[0]):
        assert batched["ulp_max"][i] == error_stats(outs[i], ref[i])["ulp_max"]


def test_summary_counterexamples_switch_list_and_checks_agree(smoke_run):
    result, folder, _ = smoke_run
    summary = _read(folder, "accumulated_error_summary")
    cex = _read(folder, "accumulated_error_counterexamples")
    switch = _read(folder, "fusion_switch_list")
    n_groups = sum(len(WORKLOADS[c].distributions) for c in CHAINS) * len(b.DTYPES_B)
    assert summary.height == n_groups
    for label in ("fused", "emulate"):
        total = summary[f"{label}_better_fraction"] + summary[f"{label}_equal_fraction"] + summary[f"{label}_worse_fraction"]
        assert np.allclose(total.to_numpy(), 1.0)
    assert (summary["fused_recompiles"] == 0).all() and (summary["emulate_recompiles"] == 0).all()
    # Exactly the summary rows whose verdict fails are listed, each with a reproducer on disk.
    worse = summary.filter(~pl.col("fused_not_worse")).select("chain", "distribution", "dtype").sort(pl.all())
    assert worse.equals(cex.select("chain", "distribution", "dtype").sort(pl.all()))
    for row in cex.iter_rows(named=True):
        saved = storage.load_tensors(__import__("pathlib").Path(row["reproducer"]))
        arg0 = WORKLOADS[row["chain"]].arg_names[0]
        assert saved[f"input/{arg0}"].dtype == getattr(torch, row["dtype"])
        assert int(saved["set_index"][0]) == row["worst_set_index"]
        assert row["explanation"] and row["suspect_op"] in row["fused_ops"] + "matmul"
    assert switch["counterexamples"] == cex.height
    if cex.height == 0:
        assert switch["keep_out_of_fusion"] == {} and "nothing" in switch["note"]
    else:
        assert set(switch["keep_out_of_fusion"]) == set(cex["dtype"].to_list())
    # One check per chain; a chain with listed counterexamples is a WARN finding, others pass.
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {f"fused_not_worse_than_eager_{c}" for c in CHAINS}
    for chain in CHAINS:
        ev = checks[f"fused_not_worse_than_eager_{chain}"]
        listed = chain in set(cex["chain"].to_list())
        assert ev.passed == (not listed), ev.metadata
        if listed:
            assert ev.severity == dg.AssetCheckSeverity.WARN and "explanations" in ev.metadata


def test_distributions_are_normalized_histograms(smoke_run):
    _, folder, _ = smoke_run
    hist = _read(folder, "accumulated_error_distributions")
    keys = ["chain", "distribution", "dtype", "path", "metric"]
    sums = hist.group_by(keys).agg(pl.col("count").sum(), pl.col("fraction").sum(), pl.col("cdf").max())
    assert (sums["count"] == PROFILES["smoke"].chain_sets).all()
    assert np.allclose(sums["fraction"].to_numpy(), 1.0) and np.allclose(sums["cdf"].to_numpy(), 1.0)
    assert (hist["bin_lo"] <= hist["bin_hi"]).all()


def test_check_fails_with_error_when_a_worse_chain_is_not_listed():
    """The check is not a formality: a chain worse than eager but missing from the list is an ERROR."""
    rows = []
    for path, ulp in (("eager", 1.0), ("fused", 2.0), ("fused_emulate", 1.0)):
        for i in range(3):
            rows.append({"chain": "softmax", "distribution": "normal", "dtype": "float16", "path": path, "set_index": i,
                         "abs_max": ulp, "rel_max": ulp, "ulp_p50": ulp, "ulp_p99": ulp, "ulp_max": ulp,
                         "max_ulp_vs_eager": 0 if path == "eager" else 1})
    per_set = pl.DataFrame(rows)
    empty = pl.DataFrame(schema={"chain": pl.String, "distribution": pl.String, "dtype": pl.String,
                                 "explanation": pl.String, "reproducer": pl.String})
    check = next(c for c in b.chain_checks if "softmax" in str(list(c.check_keys)[0]))
    ctx = dg.build_asset_check_context()
    res = check(ctx, pl.DataFrame(), per_set, empty)
    assert not res.passed and res.severity == dg.AssetCheckSeverity.ERROR
    assert "worse but not listed" in res.metadata["problem"].value
