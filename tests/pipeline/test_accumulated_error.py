import time

import dagster as dg
import numpy as np
import polars as pl
import pytest
import torch

from pipeline import storage
from pipeline.experiments.accumulated_error import assets as b
from pipeline.experiments.accumulated_error import checks as b_checks
from pipeline.experiments.accumulated_error import rules as b_rules
from pipeline.experiments.accumulated_error import runs as b_runs
from pipeline.experiments.accumulated_error import summary as b_summary
from pipeline.experiments.toolkit import assets as toolkit
from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES
from pipeline.workloads import CHAIN_STAGES, CHAINS, WORKLOADS, set_args
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
B_CHECKS = [*b_checks.chain_checks, b_checks.accumulated_error_run_valid, b_checks.fused_worse_within_rule]
UPSTREAM = [
    a
    for a in [*toolkit.input_pools, *toolkit.fp64_references]
    if any(k.to_user_string().endswith(tuple(CHAINS)) for k in a.keys)
]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One smoke materialization of S's chain pools + every B asset and check (compiles 20 graphs)."""
    from pipeline.definitions import build_resources
    from pipeline.resources import ExperimentSettings

    base = tmp_path_factory.mktemp("b_data")
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(base))
    start = time.perf_counter()
    result = dg.materialize([*UPSTREAM, *B_ASSETS, *B_CHECKS], resources=resources)
    seconds = time.perf_counter() - start
    print(f"\nsmoke materialization of S chains + B: {seconds:.1f} s")
    return result, base / "smoke", seconds


def _read(folder, name):
    return storage.read_value(folder / name)


def test_per_set_table_has_every_chain_distribution_dtype_path_and_set(smoke_run):
    result, folder, _ = smoke_run
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
    _, folder, _ = smoke_run
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
    _, folder, _ = smoke_run
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
    result, folder, _ = smoke_run
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
    # Smoke has 6 sets per row, below the rule's minimum for "supported": no row can be supported.
    assert (summary["fused_paired_sets"] == POOL_SIZES["smoke"].chain_sets).all()
    assert not (summary["fused_verdict"] == "supported").any()
    # Exactly the rows where fused is above eager at all are listed, each with a reproducer on disk.
    listed = summary.filter(
        pl.struct(summary.columns).map_elements(b_summary.is_counterexample, return_dtype=pl.Boolean)
    )
    assert listed.select(b_rules.GROUP_KEYS).sort(pl.all()).equals(cex.select(b_rules.GROUP_KEYS).sort(pl.all()))
    for row in cex.iter_rows(named=True):
        saved = storage.load_tensors(__import__("pathlib").Path(row["reproducer"]))
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
    }
    assert checks["accumulated_error_run_valid"].passed, checks["accumulated_error_run_valid"].metadata
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
    assert checks["fused_worse_within_rule"].passed  # a finding is an observation, not a failure
    findings = checks["fused_worse_within_rule"].metadata["findings"].value
    assert b_row.split()[1:] == ["valid", "inconclusive", str(int(findings > 0))]


def test_distributions_are_normalized_histograms(smoke_run):
    _, folder, _ = smoke_run
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
    ``elements`` = (judged, fused's wrongly rounded, the fp32 single rounding's wrongly rounded) per set."""
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
                    judged_elements=int(judged[i]),
                    wrongly_rounded=int(wrong[i] if path == "fused" else predicted[i]),
                    single_rounding_wrongly_rounded=int(predicted[i]),
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
    rows, gap = b_runs.per_set_rows("softmax", "normal", "float16", 10, outputs, ref)
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


def test_rule_per_element_contradicts_a_small_excess_of_wrongly_rounded_elements():
    """fp16 sets of 2048 judged elements: fused rounds 16 more of them wrongly than the fp32 single
    rounding (0.78%, above the 0.195% margin) while its row-scale error equals eager's: contradicted by
    the per-element test alone. Two more (0.1%) is within the margin: supported."""
    rng = np.random.default_rng(3)
    eager = rng.uniform(0.3, 1.5, 1000)
    judged = np.full(1000, 2048)
    predicted = rng.integers(0, 3, 1000)
    row = _fused_row(
        b_summary.judge(_per_set(eager, eager, elements=(judged, predicted + 16, predicted)), resamples=99)
    )
    assert row["verdict"] == "contradicted" and row["element_contradicts"] and not row["gross_contradicts"]
    assert row["element_excess"] == pytest.approx(16 / 2048) and row["element_worse_sets"] == 1000
    assert row["element_margin"] == pytest.approx(2.0**-9) and row["p99_difference"] == 0.0
    row = _fused_row(b_summary.judge(_per_set(eager, eager, elements=(judged, predicted + 2, predicted)), resamples=99))
    assert row["verdict"] == "supported" and not row["element_contradicts"]
    # bf16's margin is eight times smaller: the same two elements contradict
    row = _fused_row(
        b_summary.judge(
            _per_set(eager, eager, dtype="bfloat16", elements=(judged, predicted + 2, predicted)), resamples=99
        )
    )
    assert row["verdict"] == "contradicted" and row["element_margin"] == pytest.approx(2.0**-12)


def test_rule_gross_sets_contradict_a_fault_in_five_sets_of_a_thousand():
    """Five sets of 1000 garbled to 2000 sULP leave P99 unmoved; the gross-set count contradicts. Four
    are below the binomial threshold: not contradicted, but not supported either."""
    rng = np.random.default_rng(4)
    eager = rng.uniform(0.3, 1.5, 1000)
    fused = eager.copy()
    fused[[3, 100, 400, 700, 999]] = 2000.0
    row = _fused_row(b_summary.judge(_per_set(eager, fused), resamples=999))
    assert abs(row["p99_difference"]) < 0.01 and row["gross_sets"] == 5 and row["gross_sets_needed"] == 5
    assert row["gross_threshold"] == pytest.approx(2 * eager.max() + 1.0)
    assert row["verdict"] == "contradicted" and row["gross_contradicts"]
    fused[999] = eager[999]
    row = _fused_row(b_summary.judge(_per_set(eager, fused), resamples=999))
    assert row["verdict"] == "inconclusive" and row["gross_sets"] == 4 and not row["gross_contradicts"]


def test_element_reference_floors_row_chains_and_flushed_subnormals_count_as_wrong():
    """A row chain (layernorm) judges only elements at or above 1/8 of the row max in fp16; an element
    chain (softmax) judges every finite element, so a flushed subnormal counts as wrongly rounded."""
    ref = torch.tensor([[4.0, 1.0, 0.25, 2.0**-20]], dtype=torch.float64)
    out = ref.half().clone()
    out[0, 2] = torch.nextafter(out[0, 2], torch.tensor(1.0, dtype=torch.float16))  # below the floor
    judged, rounded = b_runs.element_reference("layernorm", "float16", ref, out.dtype)
    assert judged.sum(dim=1).tolist() == [2] and b_runs.wrongly_rounded(out, judged, rounded).tolist() == [0]
    out[0, 3] = 0.0  # the fp16 subnormal 2^-20 flushed to zero
    judged, rounded = b_runs.element_reference("softmax", "float16", ref, out.dtype)
    assert judged.sum(dim=1).tolist() == [4] and b_runs.wrongly_rounded(out, judged, rounded).tolist() == [2]
    assert b_rules.element_floor_factor("layernorm", "bfloat16") == 2.0**-6


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
    checks = [*b_checks.chain_checks, b_checks.accumulated_error_run_valid]
    result = dg.materialize(
        [*UPSTREAM, b.accumulated_error_runs, b.accumulated_error_summary, *checks],
        resources=resources,
        raise_on_error=False,
    )
    evals = {e.check_name: e for e in result.get_asset_check_evaluations()}
    # The run itself is valid (fused with evidence, eager finite): the fault is judged as a claim.
    assert evals["accumulated_error_run_valid"].passed, evals["accumulated_error_run_valid"].metadata
    hit = evals[f"fused_not_worse_than_eager_{expect_chain}"]
    assert not hit.passed and hit.severity == dg.AssetCheckSeverity.ERROR
    assert hit.metadata["verdict"].value == "contradicted"
    summary = storage.read_value(tmp_path / "smoke" / "accumulated_error_summary")
    rows = summary.filter((pl.col("chain") == expect_chain) & (pl.col("fused_verdict") == "contradicted"))
    if expect_chain == "softmax":
        # both distributions whose logits pass 20: the large ones and the offset ones, in each dtype
        assert rows["distribution"].to_list() == ["large_logits", "large_logits", "large_offset", "large_offset"]
        assert (rows["fused_nonfinite_sets"] == POOL_SIZES["smoke"].chain_sets).all()
    else:
        # 0.02 is about 5 fp16 ULPs at the normal data's scale: contradicted in fp16. On wide-range rows (up to
        # 100) and in bf16 it is under one ULP at the data's scale, except on subnormal-range inputs, where it
        # is gross. (Six smoke sets are too few for the per-element test, which sees the rest at 1000 sets.)
        fp16 = rows.filter(pl.col("dtype") == "float16")
        assert set(fp16["distribution"].to_list()) == {"normal", "subnormal_range"}
        bf16 = rows.filter(pl.col("dtype") == "bfloat16")
        assert bf16["distribution"].to_list() == ["subnormal_range"] and bf16["fused_gross_contradicts"].all()


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
    checks = [*b_checks.chain_checks, b_checks.accumulated_error_run_valid]
    result = dg.materialize(
        [*UPSTREAM, b.accumulated_error_runs, b.accumulated_error_summary, *checks], resources=resources
    )
    assert result.success
    evals = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evals["accumulated_error_run_valid"].passed, evals["accumulated_error_run_valid"].metadata
    assert evals["accumulated_error_run_valid"].metadata["paths_not_run"].value == len(CHAINS) * len(b_rules.DTYPES_B)
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
    assert b_runs.magnitude_bias(shrunk, ref).tolist() == [-0.9375, -2.0]
    assert b_runs.magnitude_bias(ref.half(), ref).tolist() == [0.0, 0.0]
    assert b_runs.magnitude_bias((ref * (1 + 2.0**-9)).half(), ref)[1] == 2.0


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
