import math

import dagster as dg
import numpy as np
import polars as pl
import pytest
import torch

from pipeline import files, storage
from pipeline.experiments import experiment
from pipeline.experiments.accumulated_error import assets as b
from pipeline.experiments.accumulated_error import chain_runs as b_runs
from pipeline.experiments.accumulated_error import checks as b_checks
from pipeline.experiments.accumulated_error import per_set as b_per_set
from pipeline.experiments.accumulated_error import rules as b_rules
from pipeline.experiments.accumulated_error import summary as b_summary
from pipeline.experiments.accumulated_error.stages import CHAIN_STAGES
from pipeline.experiments.toolkit import assets as toolkit
from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES
from pipeline.tables import markdown_table
from pipeline.workloads import CHAINS, WORKLOADS, set_args
from precisionkit import error_stats, fused
from precisionkit.batched import error_stats_per_set

B_ASSETS = [
    b.accumulated_error_runs,
    b.accumulated_error_summary,
    b.accumulated_error_counterexamples,
    b.fusion_ablation,
    b.fusion_switch_list,
    b.accumulated_error_distributions,
]
B_CHECKS = [
    *b_checks.chain_checks,
    b_checks.accumulated_error_run_valid,
    b_checks.fused_worse_within_rule,
    b_checks.fully_masked_rows_answer_defined,
    *experiment("B").generated_checks(),
]
UPSTREAM = [
    a
    for a in [*toolkit.input_pools, *toolkit.fp64_references]
    if any(k.to_user_string().endswith(tuple(CHAINS)) for k in a.keys)
]


@pytest.fixture(scope="module")
def smoke_run(smoke_everything):
    """S's chain pools and every B asset and check at smoke size on the cpu (32 compiles: test_compile_counts), read from the
    session's smoke run of every experiment (tests/conftest.py) as B's own materialization: its result and
    its data folder."""
    from _smoke_run import RunPart

    part = RunPart(smoke_everything, [*UPSTREAM, *B_ASSETS, *B_CHECKS])
    return part, part.data


def _read(folder, name):
    return storage.read_value(folder / name)


def test_per_set_table_has_every_chain_distribution_dtype_path_and_set(smoke_run):
    result, folder = smoke_run
    assert result.success
    per_set = _read(folder, "accumulated_error_per_set")
    n = POOL_SIZES["smoke"].chain_sets
    expected = sum(len(WORKLOADS[c].distributions) for c in CHAINS) * len(b_rules.DTYPES_B) * len(b_rules.PATHS) * n
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
    _, folder = smoke_run
    ev = _read(folder, "accumulated_error_fusion_evidence")
    fused_rows = ev.filter(pl.col("path") != "eager")
    assert fused_rows.height == len(CHAINS) * len(b_rules.DTYPES_B) * 2
    assert (fused_rows["recompiles"] == 0).all()
    assert (fused_rows["graph_breaks"] == 0).all()
    # Fused means generated kernels, or one fused attention kernel a pattern rewrite put in.
    assert ((fused_rows["kernel_count"] >= 1) | (fused_rows["fused_library_calls"] != "")).all()
    rewritten = fused_rows.filter(pl.col("fused_library_calls") != "")["chain"].unique().to_list()
    # The attention chain in the form models write it is rewritten (both dtypes, both fused paths);
    # the seed's attention (a multiply by the scale, no mask, no permutes) is not.
    assert "attention_masked" in rewritten and "attention" not in rewritten
    assert (
        fused_rows.filter(pl.col("chain") == "attention_masked")["fused_library_calls"]
        .str.contains("scaled_dot_product")
        .all()
    )
    assert fused_rows["code_sha256"].str.len_chars().eq(64).all()
    assert (ev["sets_per_second"] > 0).all()


def test_per_set_stats_equal_error_stats_for_a_sample_set(smoke_run):
    """The per-set row for one set equals precisionkit.error_stats of a fresh eager + fused run."""
    _, folder = smoke_run
    per_set = _read(folder, "accumulated_error_per_set")
    pool = _read(folder, "input_pool_softmax")
    refs = _read(folder, "fp64_reference_softmax")
    w = WORKLOADS["softmax"]
    subset = {a: pool[f"large_logits/float16/{a}"] for a in w.arg_names}
    ref = refs["large_logits/float16"].load()  # stored lazily; this test wants every set at once
    idx = 3
    args = set_args(subset, w, idx)
    fn = fused(w.fn)  # same graph as the asset's: served from Inductor's cache
    for path, out in (("eager", w.fn(*args)), ("fused", fn(*args))):
        want = error_stats(out, ref[idx])
        row = per_set.filter(
            (pl.col("chain") == "softmax")
            & (pl.col("distribution") == "large_logits")
            & (pl.col("dtype") == "float16")
            & (pl.col("path") == path)
            & (pl.col("set_index") == idx)
        ).row(0, named=True)
        for key in ("abs_max", "rel_max", "ulp_p50", "ulp_p99", "ulp_max"):
            assert row[key] == want[key], (path, key, row[key], want[key])
    # And the batched function agrees with error_stats on a whole stacked distribution.
    outs = torch.stack([w.fn(*set_args(subset, w, i)) for i in range(ref.shape[0])])
    batched = error_stats_per_set(outs, ref)
    for i in range(ref.shape[0]):
        assert batched["ulp_max"][i] == error_stats(outs[i], ref[i])["ulp_max"]


def test_summary_counterexamples_ablation_switch_list_and_checks_agree(smoke_run):
    result, folder = smoke_run
    summary = _read(folder, "accumulated_error_summary")
    cex = _read(folder, "accumulated_error_counterexamples")
    ablation = _read(folder, "fusion_ablation")
    switch = _read(folder, "fusion_switch_list")
    n_groups = sum(len(WORKLOADS[c].distributions) for c in CHAINS) * len(b_rules.DTYPES_B)
    assert summary.height == n_groups
    for label in ("fused", "emulate"):
        total = (
            summary[f"{label}_better_fraction"]
            + summary[f"{label}_equal_fraction"]
            + summary[f"{label}_worse_fraction"]
        )
        assert np.allclose(total.to_numpy(), 1.0)
    assert (summary["fused_recompiles"] == 0).all() and (summary["emulate_recompiles"] == 0).all()
    # Smoke has 16 sets per row, below the rule's minimum for "supported": no row can be supported.
    assert (summary["fused_paired_sets"] == POOL_SIZES["smoke"].chain_sets).all()
    assert not (summary["fused_verdict"] == "supported").any()
    # Exactly the rows where fused is above eager at all are listed, each with a reproducer on disk.
    listed = summary.filter(
        pl.struct(summary.columns).map_elements(b_summary.is_counterexample, return_dtype=pl.Boolean)
    )
    assert listed.select(b_rules.GROUP_KEYS).sort(pl.all()).equals(cex.select(b_rules.GROUP_KEYS).sort(pl.all()))
    for row in cex.iter_rows(named=True):
        saved = files.load_tensors(__import__("pathlib").Path(row["reproducer"]))
        arg0 = WORKLOADS[row["chain"]].arg_names[0]
        assert saved[f"input/{arg0}"].dtype == getattr(torch, row["dtype"])
        assert int(saved["set_index"][0]) == row["worst_set_index"]
        assert row["explanation"] and row["verdict"] in ("supported", "contradicted", "inconclusive")
    # Every counterexample is ablated op by op; at most one op per counterexample is named responsible.
    for row in cex.iter_rows(named=True):
        ops = CHAIN_STAGES[row["chain"]][0]
        got = ablation.filter(
            (pl.col("chain") == row["chain"])
            & (pl.col("distribution") == row["distribution"])
            & (pl.col("dtype") == row["dtype"])
        )
        assert got["op"].to_list() == list(ops)
        assert got["responsible"].sum() <= 1
    assert switch["counterexamples"] == cex.height
    if cex.height == 0:
        assert switch["keep_out_of_fusion"] == {} and "nothing" in switch["note"]
    # Every B check declares its outcome kind; the claim checks carry the rule's parameters.
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {f"fused_not_worse_than_eager_{c}" for c in CHAINS} | {
        "accumulated_error_run_valid",
        "fused_worse_within_rule",
        "fully_masked_rows_answer_defined",
        "accumulated_error_fusion_evidence_shows_fusion",
        "accumulated_error_fusion_evidence_computes_in_workload_dtype",
    }
    # Inductor reports no execution precision, so no fused row is judged below its workload's dtype.
    precision = checks["accumulated_error_fusion_evidence_computes_in_workload_dtype"]
    assert precision.metadata["outcome"].value == "finding" and precision.metadata["findings"].value == 0
    assert precision.metadata["rows_with_precisions"].value == 0
    # Every fully masked row (every set of fully_masked, both dtypes, both fused paths) answers as fp64 does.
    masked = checks["fully_masked_rows_answer_defined"]
    heads, seq, _ = POOL_SIZES["smoke"].attention
    assert masked.passed and masked.metadata["verdict"].value == "supported"
    assert masked.metadata["fully_masked_rows"].value == 2 * 2 * POOL_SIZES["smoke"].chain_sets * heads * seq
    # The library chains are judged against their absolute bound, and the healthy compiled path stays inside it.
    library = summary.filter(pl.col("chain").is_in(["matmul_add_layernorm", "attention", "attention_masked"]))
    assert (library["fused_element_test"] == "absolute").all() and (library["fused_misrounded_elements"] == 0).all()
    assert (library["fused_bound_use_max"] < 1).all() and (library["fused_bound_half_ulps_median"] > 1).all()
    assert checks["accumulated_error_run_valid"].passed, checks["accumulated_error_run_valid"].metadata
    fusion = checks["accumulated_error_fusion_evidence_shows_fusion"]
    assert fusion.passed and fusion.metadata["fused_rows"].value == 2 * len(CHAINS) * len(b_rules.DTYPES_B)
    for chain in CHAINS:
        ev = checks[f"fused_not_worse_than_eager_{chain}"]
        assert ev.metadata["outcome"].value == "claim"
        assert ev.metadata["rule.threshold"].value == b_rules.MATERIALITY_SULP
        assert ev.metadata["rule.confidence"].value == b_rules.CONFIDENCE
        # The healthy backend never contradicts the claim; at smoke size it cannot support it either.
        assert ev.metadata["verdict"].value == "inconclusive"
        assert not ev.passed and ev.severity == dg.AssetCheckSeverity.WARN
    # The CLI's closing table reads the same three outcomes.
    from pipeline.cli import outcome_table
    from pipeline.definitions import defs

    table = outcome_table(defs, result.get_asset_check_evaluations(), []).splitlines()
    b_row = next(line for line in table if line.startswith("B "))
    # The page prints the verdict table the summary stored, not one it derives again.
    stored = next(iter(result.asset_materializations_for_node("accumulated_error_summary"))).metadata
    assert stored["verdicts"].value == markdown_table(b_rules.verdict_table(summary))
    assert "attention_masked" in stored["element_bounds"].value
    assert checks["fused_worse_within_rule"].passed  # a finding is an observation, not a failure
    findings = checks["fused_worse_within_rule"].metadata["findings"].value
    assert b_row.split()[1:] == ["valid", "inconclusive", str(int(findings > 0))]


def test_distributions_are_normalized_histograms(smoke_run):
    _, folder = smoke_run
    hist = _read(folder, "accumulated_error_distributions")
    keys = ["chain", "distribution", "dtype", "path", "metric"]
    sums = hist.group_by(keys).agg(pl.col("count").sum(), pl.col("fraction").sum(), pl.col("cdf").max())
    assert (sums["count"] == POOL_SIZES["smoke"].chain_sets).all()
    assert np.allclose(sums["fraction"].to_numpy(), 1.0) and np.allclose(sums["cdf"].to_numpy(), 1.0)
    assert (hist["bin_lo"] <= hist["bin_hi"]).all()


# --- the rule, on synthetic per-set tables ---------------------------------------------------


def _per_set(
    eager, fused, *, nonfinite=None, chain="softmax", dist="normal", dtype="float16", bias=None, elements=None
):
    """Per-set rows of one chain; ``bias`` = (eager's, fused's) per-set magnitude biases (0 when None);
    ``elements`` = (decisive, fused's misrounded, the fp32 single rounding's misrounded) per set (softmax's
    two reductions per row of one row each)."""
    eager_bias, fused_bias = bias if bias is not None else (np.zeros(len(eager)), np.zeros(len(eager)))
    rows = []
    for path, values, set_bias in (
        ("eager", eager, eager_bias),
        ("fused", fused, fused_bias),
        ("fused_emulate", eager, eager_bias),
    ):
        for i, v in enumerate(values):
            rows.append(
                {
                    "chain": chain,
                    "distribution": dist,
                    "dtype": dtype,
                    "path": path,
                    "set_index": i,
                    "sulp_max": float(v),
                    "sulp_bias": float(set_bias[i]),
                    "nonfinite_vs_eager": int(nonfinite[i]) if (nonfinite is not None and path == "fused") else 0,
                }
            )
            if elements is not None:
                judged, wrong, predicted = elements
                rows[-1].update(
                    decisive_elements=int(judged[i]),
                    decisive_misrounded=int(wrong[i] if path == "fused" else predicted[i]),
                    bound_reductions=2,
                    single_rounding_misrounded=int(predicted[i]),
                )
    return pl.DataFrame(rows)


def test_per_set_rows_judge_each_path_against_fp64_without_dagster():
    """Two sets of four fp16 values: fused one ULP above eager in set 0 and non-finite in set 1
    where eager is finite. Rows come path by path, numbered from the batch's first set."""
    ref = torch.tensor([[1.0, 2.0, 0.5, 4.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    eager = ref.half()
    fused_out = eager.clone()
    fused_out[0, 1] = torch.nextafter(eager[0, 1], torch.tensor(8.0, dtype=torch.float16))
    fused_out[1, 2] = float("inf")
    outputs = {"eager": eager, "fused": fused_out, "fused_emulate": eager.clone()}
    rows, gap = b_per_set.per_set_rows("softmax", "normal", "float16", 10, outputs, ref)
    assert [(r["path"], r["set_index"]) for r in rows] == [(p, i) for p in b_rules.PATHS for i in (10, 11)]
    eager0, eager1, fused0, fused1 = rows[0], rows[1], rows[2], rows[3]
    assert eager0["ulp_max"] == 0.0 and eager0["exact_fraction"] == 1.0 and eager0["max_ulp_vs_eager"] == 0
    assert fused0["ulp_max"] == 1.0 and fused0["max_ulp_vs_eager"] == 1 and fused0["abs_max"] == pytest.approx(2.0**-9)
    assert fused1["nonfinite_vs_eager"] == 1 and fused1["nonfinite_vs_ref"] == 1 and eager1["nonfinite_vs_eager"] == 0
    assert gap[0] == pytest.approx(fused0["sulp_max"] - eager0["sulp_max"]) and gap[0] > 0
    assert gap[1] == np.inf  # non-finite where eager is finite: always the worst set
    assert all(r["n_compared"] == 4 for r in rows if r["path"] != "fused" or r["set_index"] == 10)


def test_rule_contradicts_a_material_shift_and_supports_noise():
    rng = np.random.default_rng(0)
    eager = rng.uniform(0.3, 1.5, 1000)
    # Fused 2 sULP worse on every set: contradicted with a tight interval around +2.
    worse = b_summary.judge(_per_set(eager, eager + 2.0), resamples=999)
    row = worse.filter(pl.col("path") == "fused").row(0, named=True)
    assert row["verdict"] == "contradicted" and row["p99_difference"] == pytest.approx(2.0)
    assert row["ci_lower"] > 1.0 and row["p_holm"] < 0.01 and row["materially_worse_sets"] == 1000
    # Fused within half a sULP of eager, in both directions: supported (the upper bound is below 1).
    noise = eager + rng.uniform(-0.5, 0.5, 1000)
    row = b_summary.judge(_per_set(eager, noise), resamples=999).filter(pl.col("path") == "fused").row(0, named=True)
    assert row["verdict"] == "supported" and row["ci_upper"] <= 1.0
    # Identical paths: supported, difference exactly 0.
    row = b_summary.judge(_per_set(eager, eager), resamples=999).filter(pl.col("path") == "fused").row(0, named=True)
    assert row["verdict"] == "supported" and row["p99_difference"] == 0.0


def test_rule_below_materiality_is_not_contradicted_and_few_sets_are_not_supported():
    eager = np.linspace(0.2, 1.0, 1000)
    # 0.9 sULP worse everywhere: real, but not material.
    row = (
        b_summary.judge(_per_set(eager, eager + 0.9), resamples=999)
        .filter(pl.col("path") == "fused")
        .row(0, named=True)
    )
    assert row["verdict"] == "supported" and row["ci_upper"] <= 1.0
    # Six identical sets: nothing wrong, but too few sets to support a P99 claim.
    row = (
        b_summary.judge(_per_set(eager[:6], eager[:6]), resamples=999)
        .filter(pl.col("path") == "fused")
        .row(0, named=True)
    )
    assert row["verdict"] == "inconclusive" and row["paired_sets"] == 6


def test_rule_any_nonfinite_output_where_eager_is_finite_contradicts():
    eager = np.full(200, 0.5)
    flags = np.zeros(200, dtype=int)
    flags[17] = 3
    row = (
        b_summary.judge(_per_set(eager, eager, nonfinite=flags), resamples=999)
        .filter(pl.col("path") == "fused")
        .row(0, named=True)
    )
    assert row["verdict"] == "contradicted" and row["nonfinite_sets"] == 1 and row["nonfinite_elements"] == 3


def test_rule_holm_adjusts_over_every_row():
    """A borderline row that would be rejected alone is not rejected among many healthy rows."""
    rng = np.random.default_rng(1)
    frames = []
    for k in range(30):
        e = rng.uniform(0.3, 1.5, 300)
        f = e + (1.25 if k == 0 else 0.0) + rng.normal(0, 0.6, 300)
        frames.append(_per_set(e, f, dist=f"d{k}"))
    judged = b_summary.judge(pl.concat(frames), resamples=999).filter(pl.col("path") == "fused")
    alone = b_summary.judge(frames[0], resamples=999).filter(pl.col("path") == "fused").row(0, named=True)
    row0 = judged.filter(pl.col("distribution") == "d0").row(0, named=True)
    assert row0["p_value"] == alone["p_value"]
    # one family over 30 rows x 2 judged paths x 3 tests (tail, bias, per element)
    assert row0["p_holm"] >= alone["p_holm"] and row0["p_holm"] <= min(1.0, 180 * alone["p_value"])


def _fused_row(table):
    return table.filter(pl.col("path") == "fused").row(0, named=True)


def test_rule_per_element_contradicts_misrounded_decisive_elements_without_a_margin():
    """Sets of 2048 decisive elements: fused misrounds one decisive element in two sets of 1000 while its
    row-scale error equals eager's. The bound fails a set with probability 2 x 3.05e-8, so two such sets
    have a binomial p of about 1.9e-9: contradicted by the per-element test alone. One set (p about 6e-5,
    above Holm's threshold over B's table) is not contradicted, but not supported either."""
    rng = np.random.default_rng(3)
    eager = rng.uniform(0.3, 1.5, 1000)
    decisive = np.full(1000, 2048)
    healthy = np.zeros(1000, dtype=int)
    fused = healthy.copy()
    fused[[10, 500]] = 1
    row = _fused_row(
        b_summary.judge(_per_set(eager, eager, elements=(decisive, fused, healthy)), resamples=99, family=216)
    )
    assert row["verdict"] == "contradicted" and row["element_contradicts"] and not row["gross_contradicts"]
    assert row["misrounded_sets"] == 2 and row["misrounded_elements"] == 2 and row["decisive_elements"] == 2048000
    assert row["set_failure_rate"] == pytest.approx(2 * 2 * math.exp(-18)) and row["p99_difference"] == 0.0
    fused[500] = 0
    row = _fused_row(
        b_summary.judge(_per_set(eager, eager, elements=(decisive, fused, healthy)), resamples=99, family=216)
    )
    assert row["verdict"] == "inconclusive" and not row["element_contradicts"] and row["misrounded_sets"] == 1
    # no misrounded decisive element: supported
    row = _fused_row(b_summary.judge(_per_set(eager, eager, elements=(decisive, healthy, healthy)), resamples=99))
    assert row["verdict"] == "supported" and row["misrounded_sets"] == 0 and row["element_p_value"] == 1.0


def test_rule_per_element_is_not_applied_where_the_fp32_computation_breaks_its_own_bound():
    """The fp32 single rounding misrounding a decisive element means the bound does not hold on this
    machine: the row is not judged per element, however many elements fused misrounds."""
    rng = np.random.default_rng(5)
    eager = rng.uniform(0.3, 1.5, 1000)
    decisive = np.full(1000, 2048)
    predicted = np.zeros(1000, dtype=int)
    predicted[7] = 1
    row = _fused_row(
        b_summary.judge(_per_set(eager, eager, elements=(decisive, np.full(1000, 3), predicted)), resamples=99)
    )
    assert row["bound_violated"] and row["element_p_value"] == 1.0 and not row["element_contradicts"]
    assert "bound does not hold on this machine" in b_summary.reason(row) and row["verdict"] == "inconclusive"
    assert row["single_rounding_misrounded_sets"] == 1


def test_rule_one_gross_set_in_a_thousand_contradicts():
    """One set of 1000 garbled to 2000 sULP leaves P99 unmoved; the gross-set test contradicts. The
    headroom column shows how far fused's worst set is from eager's."""
    rng = np.random.default_rng(4)
    eager = rng.uniform(0.3, 1.5, 1000)
    fused = eager.copy()
    fused[400] = 2000.0
    row = _fused_row(b_summary.judge(_per_set(eager, fused), resamples=999))
    assert abs(row["p99_difference"]) < 0.01 and row["gross_sets"] == 1 and row["gross_sets_needed"] == 1
    assert row["gross_threshold"] == pytest.approx(2 * eager.max() + 1.0)
    assert row["worst_over_eager_worst"] == pytest.approx(2000.0 - eager.max())
    assert row["verdict"] == "contradicted" and row["gross_contradicts"]
    fused[400] = 2 * eager.max() + 0.5  # beyond eager's worst, within the gross threshold
    row = _fused_row(b_summary.judge(_per_set(eager, fused), resamples=999))
    assert row["gross_sets"] == 0 and not row["gross_contradicts"]


def test_decisive_elements_are_those_no_fp32_computation_within_the_bound_rounds_otherwise():
    """fp16 spacing at 1 is 2^-10: 1 + 2^-12 is decisive under a bound of 2^-13 (every value within it
    rounds to 1) and not under 2^-11 (1 + 2^-11 is the midpoint); a flushed subnormal counts as misrounded."""
    ref = torch.tensor([[1.0 + 2.0**-12, 1.0 + 2.0**-12, 2.0**-20, float("nan")]], dtype=torch.float64)
    bound = torch.tensor([[2.0**-13, 2.0**-11, 2.0**-30, 0.0]], dtype=torch.float64)
    judged, rounded = b_per_set.element_reference(ref, bound, torch.float16)
    assert judged.tolist() == [[True, False, True, False]]
    out = ref.half().clone()
    assert b_per_set.misrounded(out, judged, rounded).tolist() == [0]
    out[0, 2] = 0.0  # the fp16 subnormal 2^-20 flushed to zero
    out[0, 1] = 1.0 + 2.0**-10  # not decisive: not counted
    assert b_per_set.misrounded(out, judged, rounded).tolist() == [1]
    # no bound (a library chain): nothing is decisive
    judged, _ = b_per_set.element_reference(ref, None, torch.float16)
    assert not judged.any()


def test_rmsnorm_elements_whose_cast_may_round_either_way_are_not_decisive():
    """B's rmsnorm_long row, seed 0, set 325 (1 x 16,384 bf16): the row's scale puts many normalized values
    h on bf16 midpoints to within fp32's error (h64 = 0.2104492156 against the midpoint 0.21044921875, which
    h32 hits exactly). RMSNorm that honours the chain's cast, eager's reading, rounds h32 and misrounded 45
    decisive elements when decisiveness read the cast at h64; both readings are the program, so those
    elements are not decisive, and what stays decisive is still most of the row."""
    from pipeline.experiments.accumulated_error import faults
    from pipeline.experiments.accumulated_error.bounds import element_bound

    wl = WORKLOADS["rmsnorm_long"]
    drawn = wl.sample(POOL_SIZES["default"], "normal", 1, 0 * 1_000_003 + 325, torch.bfloat16)
    x, w = (drawn[a][0].to(torch.bfloat16) for a in wl.arg_names)
    ref = wl.fn(x.double(), w.double())
    judged, rounded = b_per_set.element_reference(
        ref.reshape(1, -1), element_bound("rmsnorm_long", (x, w)).reshape(1, -1), torch.bfloat16
    )
    honoured = next(f for f in faults.HEALTHY_VARIANTS if f.name == "rmsnorm_cast_honoured").make(wl)((x, w), 325)
    eager, single = wl.fn(x, w), faults.single_rounding(wl.fn)(x, w)
    assert b_per_set.misrounded(honoured.reshape(1, -1), judged, rounded).tolist() == [0]
    assert b_per_set.misrounded(eager.reshape(1, -1), judged, rounded).tolist() == [0]
    assert b_per_set.misrounded(single.reshape(1, -1), judged, rounded).tolist() == [0]
    assert 9000 < int(judged.sum()) < 9800  # 9800 decisive before; every one of the 45 is among those dropped
    assert int((honoured.double().reshape(1, -1) != rounded).sum()) >= 45


def test_layernorm_bound_grows_with_cancellation_and_covers_a_sequential_fp32_sum():
    """The layer norm bound of a row with a large common offset is about the offset-to-spread ratio times
    larger than without it; a plain sequential fp32 layer norm of 16,384 near-cancelling fp16 values, the
    order one thread takes, stays within it on every element."""
    from pipeline.experiments.accumulated_error.bounds import element_bound

    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(1, 16384, generator=gen, dtype=torch.float64)
    w, b = torch.ones(16384, dtype=torch.float64), torch.zeros(16384, dtype=torch.float64)
    centred = element_bound("layernorm_long", (noise.half(), w, b))
    offset = element_bound("layernorm_long", ((64.0 + noise).half(), w, b))
    assert centred is not None and offset is not None
    assert 30 < float(offset.median() / centred.median()) < 130
    x = (64.0 + noise).half().to(torch.float32)[0]
    mean = np.cumsum(x.numpy(), dtype=np.float32)[-1] / np.float32(x.numel())  # one add at a time, in fp32
    d = x - float(mean)
    var = np.cumsum((d * d).numpy(), dtype=np.float32)[-1] / np.float32(x.numel())
    y32 = d * torch.rsqrt(torch.tensor(float(var), dtype=torch.float32) + 1e-5)
    y64 = torch.nn.functional.layer_norm(x.to(torch.float64)[None], (16384,))[0]
    assert bool(((y32.to(torch.float64) - y64).abs() <= offset[0]).all())


# --- realistic faults outside the planted list: each must end in a contradicted claim (ERROR) -----


def _perturb_elementwise(gm, example_inputs):
    """A fused elementwise kernel whose gelu is off by up to 0.02 (about 5 fp16 ULPs at O(4) values)."""
    from torch._inductor.compile_fx import compile_fx

    compiled = compile_fx(gm, example_inputs)
    has_gelu = any("gelu" in str(n.target) for n in gm.graph.nodes)

    def run(*args):
        outs = compiled(*args)
        if not has_gelu:
            return outs
        damaged = []
        for o in outs:
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                wave = torch.cos(torch.arange(o.numel(), device=o.device, dtype=torch.float32) * 0.37).reshape(o.shape)
                o = (o.float() + 0.02 * wave).to(o.dtype)
            damaged.append(o)
        return type(outs)(damaged) if isinstance(outs, (list, tuple)) else damaged

    return run


def _nan_on_large_logits(gm, example_inputs):
    """A fused softmax that returns NaN for one element in six when the logits exceed 20 (an exp overflow)."""
    from torch._inductor.compile_fx import compile_fx

    compiled = compile_fx(gm, example_inputs)
    has_softmax = any("softmax" in str(n.target) for n in gm.graph.nodes)

    def run(*args):
        outs = compiled(*args)
        big = any(isinstance(a, torch.Tensor) and a.is_floating_point() and a.abs().max() > 20 for a in args)
        if not (has_softmax and big):
            return outs
        damaged = []
        for o in outs:
            if isinstance(o, torch.Tensor) and o.is_floating_point():
                mask = (torch.arange(o.numel(), device=o.device) % 6 == 0).reshape(o.shape)
                o = o.masked_fill(mask, float("nan"))
            damaged.append(o)
        return type(outs)(damaged) if isinstance(outs, (list, tuple)) else damaged

    return run


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "fault", "expect_chain"),
    [
        ("test_perturb_elementwise", _perturb_elementwise, "mul_add_gelu_mul"),
        ("test_nan_on_large_logits", _nan_on_large_logits, "softmax"),
    ],
)
def test_realistic_faults_contradict_the_claim_at_error(tmp_path, backend, fault, expect_chain):
    from torch._dynamo import list_backends, register_backend

    from pipeline.definitions import build_resources
    from pipeline.resources import ExperimentSettings

    if backend not in list_backends(exclude_tags=()):
        register_backend(name=backend)(fault)
    resources = build_resources(
        ExperimentSettings(profile="smoke", device="cpu", backend=backend), base_dir=str(tmp_path)
    )
    checks = [*b_checks.chain_checks, b_checks.accumulated_error_run_valid, *experiment("B").generated_checks()]
    result = dg.materialize(
        [*UPSTREAM, b.accumulated_error_runs, b.accumulated_error_summary, *checks],
        resources=resources,
        raise_on_error=False,
    )
    evals = {e.check_name: e for e in result.get_asset_check_evaluations()}
    # The run itself is valid (fused with evidence, eager finite): the fault is judged as a claim.
    assert evals["accumulated_error_run_valid"].passed, evals["accumulated_error_run_valid"].metadata
    assert evals["accumulated_error_fusion_evidence_shows_fusion"].passed
    hit = evals[f"fused_not_worse_than_eager_{expect_chain}"]
    assert not hit.passed and hit.severity == dg.AssetCheckSeverity.ERROR
    assert hit.metadata["verdict"].value == "contradicted"
    # A planted backend is a compiler of its own: its values are stored in its own folder.
    summary = storage.read_value(tmp_path / "smoke" / "compilers" / backend / "accumulated_error_summary")
    rows = summary.filter((pl.col("chain") == expect_chain) & (pl.col("fused_verdict") == "contradicted"))
    if expect_chain == "softmax":
        # both distributions whose logits pass 20: the large ones and the offset ones, in each dtype
        assert rows["distribution"].to_list() == ["large_logits", "large_logits", "large_offset", "large_offset"]
        assert (rows["fused_nonfinite_sets"] == POOL_SIZES["smoke"].chain_sets).all()
    else:
        # 0.02 is about 5 fp16 ULPs at the normal data's scale: contradicted in fp16. On wide-range rows (up to
        # 100) it is under one ULP at the data's scale, but it misrounds the small decisive elements, which the
        # per-element test sees in every set. In bf16 it is under one ULP at the data's scale, except on
        # subnormal-range inputs, where it is gross; the per-element test sees it on the others.
        fp16 = rows.filter(pl.col("dtype") == "float16")
        assert set(fp16["distribution"].to_list()) == {"normal", "subnormal_range", "wide_range"}
        assert fp16.filter(pl.col("distribution") == "wide_range")["fused_element_contradicts"].all()
        bf16 = rows.filter(pl.col("dtype") == "bfloat16")
        assert set(bf16["distribution"].to_list()) == {"normal", "subnormal_range", "wide_range"}
        assert bf16.filter(pl.col("distribution") == "subnormal_range")["fused_gross_contradicts"].all()
        assert bf16.filter(pl.col("distribution") != "subnormal_range")["fused_element_contradicts"].all()


@pytest.mark.slow
def test_a_fused_path_this_torch_cannot_compile_is_inconclusive_with_its_reason(tmp_path, monkeypatch):
    """torch 2.7 cannot compile emulate_precision_casts for the CPU (a code generator signature it
    lacks). Simulated with an option no torch knows: B's runs go on without that path, the run stays
    valid, each chain's claim is inconclusive naming the reason, and nothing crashes."""
    from pipeline.definitions import build_resources
    from pipeline.resources import ExperimentSettings

    real = b_runs._path_options

    def options(settings, path):
        out = real(settings, path)
        return {**out, "pk_no_such_option": True} if path == "fused_emulate" else out

    monkeypatch.setattr(b_runs, "_path_options", options)
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(tmp_path))
    checks = [*b_checks.chain_checks, b_checks.accumulated_error_run_valid, *experiment("B").generated_checks()]
    result = dg.materialize(
        [*UPSTREAM, b.accumulated_error_runs, b.accumulated_error_summary, *checks], resources=resources
    )
    assert result.success
    evals = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evals["accumulated_error_run_valid"].passed, evals["accumulated_error_run_valid"].metadata
    assert evals["accumulated_error_run_valid"].metadata["paths_not_run"].value == len(CHAINS) * len(b_rules.DTYPES_B)
    # the paths not run are not judged for fusion: the compiled ones are, and fused
    fusion = evals["accumulated_error_fusion_evidence_shows_fusion"]
    assert fusion.passed and fusion.metadata["fused_rows"].value == len(CHAINS) * len(b_rules.DTYPES_B)
    for chain in CHAINS:
        claim = evals[f"fused_not_worse_than_eager_{chain}"]
        assert claim.metadata["verdict"].value == "inconclusive"
        assert "not run, so not judged" in claim.metadata["reason"].value
        assert "cannot compile with emulate_precision_casts" in claim.metadata["reason"].value
    per_set = storage.read_value(tmp_path / "smoke" / "accumulated_error_per_set")
    assert set(per_set["path"].unique()) == {"eager", "fused"}
    summary = storage.read_value(tmp_path / "smoke" / "accumulated_error_summary")
    assert summary["emulate_verdict"].unique().to_list() == ["inconclusive"]
    assert summary["emulate_unavailable"].str.contains("pk_no_such_option").all()
    assert summary["fused_verdict"].null_count() == 0


def test_supported_needs_the_smallest_sample_whose_max_bounds_the_p99():
    assert b_rules.MIN_SETS_FOR_SUPPORTED == b_rules.min_sets_for_tail_bound(0.99, 0.99) == 459
    assert 0.99**459 <= 0.01 < 0.99**458  # 458 sets: their max misses the P99 more than 1% of the time
    assert b_rules.min_sets_for_tail_bound(0.9, 0.95) == 29


def test_large_logits_overflow_a_softmax_without_its_max_subtraction():
    # Logits peaking near 100: exp overflows fp32 on most default rows, so a fused softmax that drops the
    # max subtraction cannot pass for a healthy one (at the old scale of 12 no row overflowed).
    x = WORKLOADS["softmax"].sample(POOL_SIZES["default"], "large_logits", 20, seed=1)["x"]
    overflow = torch.isinf(torch.exp(x.float())).any(-1).double().mean()
    assert float(overflow) > 0.5
    assert torch.isfinite(torch.softmax(x.float(), -1)).all()


def test_magnitude_bias_is_the_mean_signed_error_toward_larger_magnitude_in_sulp():
    ref = torch.tensor([[2.0, -1.0, 0.5, -0.25], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    # Every element smaller in magnitude by 2^-9 of itself, exactly representable in fp16.
    shrunk = (ref * (1 - 2.0**-9)).half()
    # Row 0: errors -(2, 1, 0.5, 0.25) * 2^-9 in units of fp16's spacing at 2.0 (2^-9): mean -0.9375.
    # Row 1: -2^-9 each in units of the spacing at 1.0 (2^-10): -2.
    assert b_per_set.magnitude_bias(shrunk, ref).tolist() == [-0.9375, -2.0]
    assert b_per_set.magnitude_bias(ref.half(), ref).tolist() == [0.0, 0.0]
    assert b_per_set.magnitude_bias((ref * (1 + 2.0**-9)).half(), ref)[1] == 2.0


def test_rule_contradicts_a_material_magnitude_bias_the_p99_rule_lets_through():
    rng = np.random.default_rng(2)
    eager = rng.uniform(0.3, 1.5, 1000)
    eager_bias = rng.normal(0, 0.02, 1000)
    # Outputs shrunk by a fifth of a sULP on average (a wrong epsilon or variance divisor): the P99 of the
    # max error barely moves, the bias test rejects and the shift is material.
    shrunk = eager_bias - 0.2 + rng.normal(0, 0.02, 1000)
    row = (
        b_summary.judge(_per_set(eager, eager + rng.uniform(-0.3, 0.3, 1000), bias=(eager_bias, shrunk)), resamples=999)
        .filter(pl.col("path") == "fused")
        .row(0, named=True)
    )
    assert row["ci_upper"] <= 1.0  # the P99 rule alone would support it
    assert row["verdict"] == "contradicted" and row["bias_contradicts"]
    # |fused bias| exceeds |eager bias| by about 0.2 - E|eager bias| (0.016 for N(0, 0.02))
    assert row["bias_difference"] == pytest.approx(0.184, abs=0.01) and row["bias_p_holm"] < 1e-6
    assert "magnitude bias" in b_summary.reason({**row, "p_holm": row["p_holm"]})
    # Unbiased noise of the same size: supported. A consistent but immaterial 0.05 sULP: not contradicted.
    for fused_bias in (eager_bias + rng.normal(0, 0.02, 1000), eager_bias + 0.05):
        row = (
            b_summary.judge(_per_set(eager, eager, bias=(eager_bias, fused_bias)), resamples=999)
            .filter(pl.col("path") == "fused")
            .row(0, named=True)
        )
        assert row["verdict"] == "supported" and not row["bias_contradicts"]
    # Eager biased, fused not (eager's 16-bit scores next to a -1e4 mask): fused is not held to eager's bias.
    row = (
        b_summary.judge(_per_set(eager, eager, bias=(eager_bias - 3.0, eager_bias)), resamples=999)
        .filter(pl.col("path") == "fused")
        .row(0, named=True)
    )
    assert row["verdict"] == "supported" and row["bias_difference"] < -2.9 and not row["bias_contradicts"]


def test_sign_test_is_exact_past_a_thousand_pairs():
    from precisionkit.decide import sign_test

    r = sign_test(np.ones(1500), np.zeros(1500))
    # 2^-1500 underflows to 0.0; a float 2.0**n raised OverflowError here
    assert r.positive == 1500 and r.p_value < 1e-300
    balanced = sign_test(np.r_[np.ones(750), -np.ones(750)], np.zeros(1500))
    assert 0.5 < balanced.p_value < 0.52


def test_fully_masked_rows_exist_at_smoke_and_default_sizes_and_their_answer_is_finite():
    from pipeline.experiments.accumulated_error.library_bounds import fully_masked_rows, row_classes

    wl = WORKLOADS["attention_masked"]
    for profile in ("smoke", "default"):
        heads, seq, _ = POOL_SIZES[profile].attention
        for dist, expected in (("fully_masked", True), ("normal", False)):
            drawn = wl.sample(POOL_SIZES[profile], dist, 1, 3)
            args = tuple(drawn[a][0].to(torch.bfloat16) for a in wl.arg_names)
            rows = fully_masked_rows("attention_masked", args)
            assert rows is not None and rows.shape == (heads * seq,) and bool(rows.all()) is expected
    # the chain as written adds -1e4 to every score of the row, which softmax ignores: eager and fp64 answer
    # with a finite, non-zero average (class 0), where a kernel that skips the row answers zeros or NaN
    ref = wl.fn(*(a.to(torch.float64) for a in args))
    assert (row_classes(wl.fn(*args), heads * seq) == 0).all() and (row_classes(ref, heads * seq) == 0).all()
    odd = torch.ones(3, 4)
    odd[1] = 0.0
    odd[2, 1] = float("nan")
    assert row_classes(odd, 3).tolist() == [0, 1, 2]
    assert fully_masked_rows("attention", args[:3]) is None


def test_masked_row_check_contradicts_zeros_and_supports_the_defined_answer():
    def summary(wrong: int) -> pl.DataFrame:
        return pl.DataFrame(
            [
                {
                    "chain": "attention_masked",
                    "distribution": "fully_masked",
                    "dtype": "bfloat16",
                    "fused_masked_rows": 64,
                    "fused_masked_wrong_rows": wrong,
                    "emulate_masked_rows": 64,
                    "emulate_masked_wrong_rows": 0,
                }
            ]
        )

    bad = b_checks.fully_masked_rows_answer_defined(summary(64))
    assert not bad.passed and bad.metadata["verdict"].value == "contradicted"
    assert "64 of 64 fully masked rows" in bad.metadata["reason"].value
    good = b_checks.fully_masked_rows_answer_defined(summary(0))
    assert good.passed and good.metadata["fully_masked_rows"].value == 128


def test_library_bound_covers_each_legitimate_boundary_and_not_two_ulps_of_the_row():
    """matmul -> add -> layernorm: the library's bf16 output then the fp32 layer norm stays inside the
    absolute bound; moving an element by 2 ULPs of the row's largest value leaves it."""
    from pipeline.experiments.accumulated_error.library_bounds import absolute_bound
    from precisionkit.bounds import gamma

    wl = WORKLOADS["matmul_add_layernorm"]
    drawn = wl.sample(POOL_SIZES["default"], "normal", 1, 11)
    x, w, b = (drawn[a][0].to(torch.bfloat16) for a in wl.arg_names)
    ref = wl.fn(x.double(), w.double(), b.double())
    bound = absolute_bound("matmul_add_layernorm", (x, w, b))
    assert bound is not None and bound.shape == ref.shape
    y = (x.float() @ w.float() + b.float()).to(torch.bfloat16).float()
    library = torch.nn.functional.layer_norm(y, y.shape[-1:]).to(torch.bfloat16).double()
    assert ((library - ref).abs() <= bound).all()
    assert ((wl.fn(x, w, b).double() - ref).abs() <= bound).all()  # eager takes the same boundary
    step = 2 * torch.finfo(torch.bfloat16).eps * 2.0 ** torch.floor(torch.log2(ref.abs().amax(-1, keepdim=True)))
    assert ((library + step - ref).abs() > bound).any()
    assert gamma(128, torch.float32) == pytest.approx(128 * 2.0**-24, rel=1e-5)


def test_b_page_prints_the_verdict_and_bound_tables_the_summary_stored():
    from types import SimpleNamespace

    from pipeline.experiments import experiment
    from pipeline.experiments.accumulated_error import report as b_report

    stored = {"verdicts": "| v |\n|---|\n| 1 |\n", "element_bounds": "| w |\n|---|\n| 2 |\n"}
    record = SimpleNamespace(key="accumulated_error_summary", metadata=stored)
    page = SimpleNamespace(assets_of=lambda group: [record])
    exp = experiment("B")
    assert b_report._stored(page, exp, "verdicts") == stored["verdicts"]  # type: ignore[arg-type]
    section = b_report._library_bounds(page, exp)  # type: ignore[arg-type]
    assert section.endswith(stored["element_bounds"]) and "gamma_K sum_k |a_ik||b_kj|" in section
    # the page module derives no verdict: it has no verdict_table to call
    assert not hasattr(b_report, "verdict_table") and not hasattr(b_report, "element_bounds_table")
    record.metadata = {}
    assert "rematerialize B" in b_report._stored(page, exp, "verdicts")  # type: ignore[arg-type]


def test_a_fused_path_the_compiler_did_not_fuse_is_inconclusive_and_no_counterexample():
    """OpenVINO runs every bfloat16 chain in torch (its backend has no bfloat16 input type): the fused path is
    not run, its evidence row says why, the row's verdict is inconclusive, and it is no counterexample."""
    why = "not fused by OpenVINO: ran 1 partition(s) in torch after OpenVINO failed to compile or execute them"
    rng = np.random.default_rng(0)
    eager = rng.uniform(0.1, 1.0, 8)
    per_set = (
        _per_set(eager, eager)
        .filter(pl.col("path") == "eager")  # only eager ran
        .with_columns(
            *[pl.col("sulp_max").alias(m) for m in b_summary.METRICS if m != "sulp_max"],
            pl.lit(0).alias("max_ulp_vs_eager"),
            pl.lit(0).alias("nonfinite_vs_ref"),
        )
    )
    evidence = pl.DataFrame(
        [
            {"chain": "softmax", "dtype": "float16", "path": "eager", "sets": 8, "sets_per_second": 1.0},
            {"chain": "softmax", "dtype": "float16", "path": "fused", "sets": 0, "unavailable": why},
            {"chain": "softmax", "dtype": "float16", "path": "fused_emulate", "sets": 0, "unavailable": why},
        ],
        schema_overrides={"unavailable": pl.String},
    )
    for column, dtype in b_runs.EVIDENCE_SCHEMA.items():
        if column not in evidence.columns:
            evidence = evidence.with_columns(pl.lit(None, dtype=dtype).alias(column))
    (row,) = b_summary.summary_table(per_set, evidence).iter_rows(named=True)
    assert (row["fused_verdict"], row["emulate_verdict"]) == ("inconclusive", "inconclusive")
    assert row["fused_unavailable"] == why and not b_summary.is_counterexample(row)
