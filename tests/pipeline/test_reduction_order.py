import dagster as dg
import polars as pl
import pytest
import torch
from _smoke_run import RunPart  # tests/ is on sys.path (pytest rootdir import mode)

from pipeline.experiments import experiment
from pipeline.experiments.reduction_order import accuracy as c2_accuracy
from pipeline.experiments.reduction_order import assets as c2_assets
from pipeline.experiments.reduction_order import bounds as c2_bounds
from pipeline.experiments.reduction_order import checks as c2_checks
from pipeline.experiments.reduction_order import compute as c2_compute
from pipeline.experiments.reduction_order import versions as c2_version_defs
from pipeline.experiments.reduction_order.spec import SIZES
from pipeline.storage import read_value
from pipeline.verdicts import CLAIM, CONTRADICTED, FINDING, INCONCLUSIVE, SUPPORTED, VALIDITY
from precisionkit import bit_equal

CHECKS = [
    c2_checks.c2_run_valid,
    c2_checks.c2_versions_self_deterministic,
    c2_checks.c2_versions_within_fp64_band,
    c2_checks.c2_fp16_partials_within_bound,
    c2_checks.c2_fp16_partials_less_accurate,
    c2_checks.c2_tilings_differ,
    c2_checks.c2_probabilistic_margin,
    c2_checks.c2_fp16_differences_as_predicted,
    c2_checks.c2_fused_not_less_accurate_than_eager,
    *experiment("C2").generated_checks(),
]
ASSETS = [c2_assets.c2_reduction_order, *CHECKS]
KINDS = {
    "c2_run_valid": VALIDITY,
    "c2_versions_shows_fusion": VALIDITY,
    "c2_versions_computes_in_workload_dtype": FINDING,
    "c2_versions_self_deterministic": CLAIM,
    "c2_versions_within_fp64_band": CLAIM,
    "c2_fp16_partials_within_bound": CLAIM,
    "c2_fp16_partials_less_accurate": FINDING,
    "c2_tilings_differ": FINDING,
    "c2_probabilistic_margin": FINDING,
    "c2_fp16_differences_as_predicted": CLAIM,
    "c2_fused_not_less_accurate_than_eager": CLAIM,
}


def test_tiled_sum_follows_the_tiles():
    x = c2_version_defs.make_rows(2, 4096, seed=5)
    out16, acc32 = c2_version_defs.tiled_sum(1024, "fp32")(x)
    expected = torch.stack([x[:, i : i + 1024].sum(-1, dtype=torch.float32) for i in range(0, 4096, 1024)], -1).sum(-1)
    assert bit_equal(acc32, expected) and bit_equal(out16, expected.to(torch.float16))
    out16, acc32 = c2_version_defs.tiled_sum(512, "fp16")(x)
    partials = torch.stack([x[:, i : i + 512].sum(-1) for i in range(0, 4096, 512)], -1)
    assert partials.dtype == torch.float16
    assert bit_equal(out16, partials.sum(-1)) and bit_equal(acc32, partials.sum(-1, dtype=torch.float32))


def test_bad_tiling_requests_are_rejected():
    with pytest.raises(ValueError, match="not a multiple of tile 512"):
        c2_version_defs.tiled_sum(512, "fp32")(torch.zeros(1, 1000, dtype=torch.float16))
    with pytest.raises(ValueError, match="partials must be one of"):
        c2_version_defs.tiled_sum(512, "bf16")


def test_every_check_declares_its_outcome_kind():
    for check in CHECKS:
        (spec,) = check.check_specs
        assert spec.metadata["outcome"] == KINDS[spec.name], spec.name
        if spec.name in ("c2_versions_within_fp64_band", "c2_fp16_partials_within_bound"):
            # Deterministic bound, plus the probabilistic one with its family-wise confidence.
            assert spec.metadata["rule.confidence"] == c2_bounds.PROB_CONFIDENCE
        elif spec.name in ("c2_fp16_differences_as_predicted", "c2_fused_not_less_accurate_than_eager"):
            assert spec.metadata["rule.confidence"] == 0.99  # a statistical test: Holm at 0.01
        elif KINDS[spec.name] == CLAIM:
            assert spec.metadata["rule.confidence"] == "deterministic"
    seed = c2_checks.c2_versions_within_fp64_band.check_specs
    (spec,) = seed
    assert spec.metadata["rule.threshold"] == 1.0 and "margin" in spec.metadata["rule.metric"]


def test_bound_spec_per_family():
    assert c2_bounds.bound_spec("compiler", None) == {
        "order": "any",
        "tile": None,
        "accumulate_dtype": torch.float32,
        "partial_dtype": None,
    }
    # Framework-tiled versions accumulate in fp32 in an order the framework picks: the any-order bound.
    assert c2_bounds.bound_spec("framework_tiled", None) == c2_bounds.bound_spec("compiler", None)
    assert "framework_tiled" in c2_version_defs.SEED_FAMILIES
    assert c2_bounds.bound_spec("tiled_fp16_partials", 512)["partial_dtype"] == torch.float16
    assert c2_bounds.bound_spec("tiled_fp32_partials", 2048)["tile"] == 2048
    with pytest.raises(ValueError, match="no summation model"):
        c2_bounds.bound_spec("tiled_bf16_partials", 512)


def _bounds(margins: dict[str, list[float]], prob_scale: float = 0.5) -> pl.DataFrame:
    """Rows with the given deterministic margins; the probabilistic bound is ``prob_scale`` x the deterministic one."""
    rows = [
        {
            "version": v,
            "family": "tiled_fp16_partials" if "fp16" in v else "compiler",
            "output": "out16",
            "row": i,
            "abs_ref": 1.0,
            "abs_sum": 2.0,
            "error": m * 0.4,
            "bound": 0.4,
            "margin": m,
            "bound_prob": 0.4 * prob_scale,
            "margin_prob": m / prob_scale,
            "lambda": 6.5,
        }
        for v, ms in margins.items()
        for i, m in enumerate(ms)
    ]
    return pl.DataFrame(rows)


def test_bound_rule_arithmetic():
    ok = _bounds({"eager": [0.1, 1.0], "tile512_fp16_partials": [2.0]}, prob_scale=1.0)
    verdict, reason, meta = c2_checks.judge_bounds(ok, c2_version_defs.SEED_FAMILIES)
    assert verdict == SUPPORTED and meta["rows_judged"] == 2 and meta["margin_max"] == 1.0  # margin 1 is within
    verdict, reason, meta = c2_checks.judge_bounds(ok, (c2_version_defs.FP16_PARTIALS_FAMILY,))
    assert verdict == CONTRADICTED and meta["rows_above_bound"] == 1 and "tile512_fp16_partials/out16 row 0" in reason
    # Within the deterministic bound but above the probabilistic one (the "random error range"): contradicted.
    verdict, reason, meta = c2_checks.judge_bounds(
        _bounds({"eager": [0.1, 0.6]}, prob_scale=0.5), c2_version_defs.SEED_FAMILIES
    )
    assert verdict == CONTRADICTED and meta["rows_above_bound"] == 0 and meta["rows_above_probabilistic_bound"] == 1
    assert "probabilistic bound (lambda 6.5" in reason and "margin 1.2" in reason
    assert (
        c2_checks.judge_bounds(_bounds({"eager": [0.1, 0.4]}, prob_scale=0.5), c2_version_defs.SEED_FAMILIES)[0]
        == SUPPORTED
    )
    nan = _bounds({"eager": [0.1, float("nan")]})
    assert (
        c2_checks.judge_bounds(nan, c2_version_defs.SEED_FAMILIES)[0] == CONTRADICTED
    )  # a non-finite result is never within
    assert c2_checks.judge_bounds(nan, ("tiled_fp32_partials",))[0] == INCONCLUSIVE


def test_smoke_materialization(smoke_on_run_device):
    result = RunPart(smoke_on_run_device, ASSETS)
    assert result.success
    table = read_value(result.data / "c2_versions")
    versions = {r["version"]: r for r in table.iter_rows(named=True)}
    assert versions["eager"]["runs"] == 5 and set(versions) >= {"eager", "fused_default", "tile512_fp16_partials"}
    for v in versions.values():  # the flag is the rule's arithmetic on the counted bit patterns
        assert v["self_deterministic"] == (v["unique_out16"] == 1 and v["unique_acc32"] == 1)

    # Framework-tiled versions (the device's tiling settings) are listed apart from the hand-written tilings.
    device = result.resources["settings"].torch_device().type
    tilings = c2_version_defs.reduction_variants("inductor", device)[1]  # Inductor's answer to reduction_tilings
    fw = {v for v, r in versions.items() if r["family"] == "framework_tiled"}
    assert fw and fw <= {f"framework_tiled_{k}" for k in tilings}
    assert {versions[v]["tiling_source"] for v in fw} == {"framework (tiling configuration)"}
    assert {r["tiling_source"] for r in versions.values() if r["tile"]} == {"hand-written"}
    assert all(versions[v]["mode"] == "fused" and versions[v]["kernel_count"] for v in fw)

    stored = read_value(result.data / "c2_version_outputs")
    assert stored["rows"].shape == (16, 4096)
    # the cost C2 declares (reduction_order/cost.py) where no tiling was rejected: one compile per fused version, and
    # the tensors stored to the byte
    if len(fw) == len(tilings):
        assert len([r for r in versions.values() if r["mode"] == "fused"]) == c2_version_defs.planned_compiles(device)
        planned = c2_version_defs.stored_tensor_bytes("smoke", device)
        assert sum(t.numel() * t.element_size() for t in stored.values()) == planned

    matrix = read_value(result.data / "c2_ulp_matrix")
    assert {"version_a", "version_b", "output", "scope", "ulp_max"} <= set(matrix.columns)

    # Per row, version and output: error, derived bound, margin.
    bounds = read_value(result.data / "c2_row_bounds")
    assert {
        "version",
        "family",
        "output",
        "row",
        "ref",
        "abs_sum",
        "partial_abs_sum",
        "error",
        "bound",
        "bound_kind",
        "margin",
        "bound_prob",
        "margin_prob",
        "chain",
        "bound_formula",
    } <= set(bounds.columns)
    assert bounds.height == 16 * len(versions) * 2
    assert set(bounds["bound_kind"]) == {"deterministic"}
    assert bounds["margin"].to_list() == pytest.approx((bounds["error"] / bounds["bound"]).to_list())
    chains = {(r["family"], r["version"]): r["chain"] for r in bounds.iter_rows(named=True)}
    assert (
        chains[("compiler", "eager")] == "4095" and chains[("tiled_fp32_partials", "tile512_fp32_partials")] == "511+7"
    )
    fp16p = bounds.filter(pl.col("family") == "tiled_fp16_partials")
    assert (
        fp16p["partial_abs_sum"].is_not_null().all()
        and bounds.filter(pl.col("family") == "compiler")["partial_abs_sum"].is_null().all()
    )

    errors = read_value(result.data / "c2_error_vs_fp64")
    assert {
        "bound_kind",
        "bound_formula",
        "chain",
        "margin_max",
        "worst_margin_row",
        "worst_bound",
        "within_band_fraction",
        "margin_prob_max",
        "abs_max",
        "ulp_max",
    } <= set(errors.columns)
    for r in errors.iter_rows(named=True):
        per_row = bounds.filter((pl.col("version") == r["version"]) & (pl.col("output") == r["output"]))
        assert r["margin_max"] == pytest.approx(per_row["margin"].max())
        assert r["within_band_fraction"] == pytest.approx((per_row["margin"] <= 1).mean())

    evals = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(evals) == set(KINDS)
    meta = {name: {k: getattr(v, "value", v) for k, v in e.metadata.items()} for name, e in evals.items()}
    for name, kind in KINDS.items():
        assert meta[name]["outcome"] == kind
    # Claim checks: the verdict follows the rule's arithmetic, and the rule travels with the result.
    seed = meta["c2_versions_within_fp64_band"]
    assert seed["rule.threshold"] == 1.0 and seed["rule.confidence"] == c2_bounds.PROB_CONFIDENCE
    assert {"rule.claim", "rule.metric", "rule.decision", "rule.unit", "rule.sample_size", "rule.derivation"} <= set(
        seed
    )
    seed_rows = bounds.filter(pl.col("family").is_in(list(c2_version_defs.SEED_FAMILIES)))
    assert seed["rows_judged"] == seed_rows.height
    within = (seed_rows["margin"] <= 1).all() and (seed_rows["margin_prob"] <= 1).all()
    assert seed["verdict"] == (SUPPORTED if within else CONTRADICTED)
    assert seed_rows["lambda"].n_unique() == 1 and seed_rows["lambda"][0] == pytest.approx(
        c2_bounds.family_lambda(
            bounds.height, SIZES["smoke"].length + SIZES["smoke"].length // min(c2_version_defs.TILES)
        )
    )
    assert evals["c2_versions_within_fp64_band"].passed == (seed["verdict"] == SUPPORTED)
    fp16 = meta["c2_fp16_partials_within_bound"]
    assert fp16["verdict"] == (
        SUPPORTED if ((fp16p["margin"] <= 1) & (fp16p["margin_prob"] <= 1)).all() else CONTRADICTED
    )
    rate = meta["c2_fp16_differences_as_predicted"]
    assert rate["verdict"] == c2_checks.judge_fp16_rate(read_value(result.data / "c2_ulp_matrix"))[0]
    # The framework's fused versions against eager, paired row by row: the verdict is the rule's on the stored rows,
    # and the smoke profile has enough rows for the test to reject a version worse on every row.
    accuracy = meta["c2_fused_not_less_accurate_than_eager"]
    assert accuracy["verdict"] == c2_accuracy.judge_accuracy_vs_eager(bounds)[0]
    assert accuracy["rows_paired"] == 16 >= accuracy["rows_needed"]
    assert accuracy["versions_judged"] == sum(
        r["family"] in c2_version_defs.COMPILER_FAMILIES and v != "eager" for v, r in versions.items()
    )
    det = meta["c2_versions_self_deterministic"]
    assert det["verdict"] == (SUPPORTED if table["self_deterministic"].all() else CONTRADICTED)
    assert det["rule.threshold"] == 0.0
    assert meta["c2_run_valid"]["validity"] == "valid"
    # Findings are WARN at most, whatever they report.
    for name in ("c2_fp16_partials_less_accurate", "c2_tilings_differ", "c2_probabilistic_margin"):
        assert evals[name].passed or evals[name].severity == dg.AssetCheckSeverity.WARN
    # With fp32 partials the fp16 result is the rounded fp32 accumulator, so an fp16 difference
    # between tilings implies an accumulator difference (an identity, on any device).
    tilings = meta["c2_tilings_differ"]
    assert tilings["fp32.out16_differ_rows"] <= tilings["fp32.acc32_differ_rows"]
    assert evals["c2_tilings_differ"].passed and (evals["c2_tilings_differ"].metadata["findings"].value == 0) == (
        tilings["fp32.out16_differ_rows"] > 0 and tilings["fp16.out16_differ_rows"] > 0
    )

    # CPU-specific observations of this torch build's Inductor, not rules (the smoke profile runs on
    # the CPU): split_reductions does not change the CPU kernel, while one thread or scalar
    # (simdlen=0) code changes the loop and with it the fp32 accumulator; fp16-stored partials change
    # the fp16 sum across tilings. Another device or torch build may legitimately differ.
    if result.resources["settings"].torch_device().type == "cpu":
        assert versions["fused_split_reductions=False"]["same_code_as_fused_default"]
        assert not versions["fused_cpp.threads=1"]["same_code_as_fused_default"]
        # CPU: the tiling each framework version got, read back from its generated kernel.
        assert fw == {f"framework_tiled_{k}" for k in c2_version_defs.reduction_variants("inductor", "cpu")[1]}
        assert versions["framework_tiled_t2_simd256"]["framework_tiling"].startswith(
            "4096 elements in 2 thread ranges, vector steps of 16 lanes"
        )
        assert "1 thread, a scalar loop" in versions["framework_tiled_t1_simd0"]["framework_tiling"]
        assert not versions["fused_cpp.simdlen=0"]["same_code_as_fused_default"]
        assert not bit_equal(stored["fused_cpp.simdlen=0/acc32"], stored["fused_default/acc32"])
        assert tilings["fp16.out16_differ_rows"] > 0 and tilings["fp32.acc32_differ_rows"] > 0
        # Measured on this CPU: every fused version rounds an fp32 accumulator once, as eager does, and ties with
        # eager on every smoke row; the derived bound is many fp16 ULPs wide where eager's error is below half one.
        assert accuracy["verdict"] == SUPPORTED and accuracy["worse_rows_max"] == 0
        assert accuracy["eager_max_ulp"] <= 0.5 < 4 < accuracy["bound_ulp_median"]


# --- the plain functions behind the asset, without Dagster ------------------------------------------


#: (version, family, tile) of the eager versions the plain-function tests run.
_NAMES = [
    ("eager", "compiler", None),
    ("tile512_fp32_partials", "tiled_fp32_partials", 512),
    ("tile512_fp16_partials", "tiled_fp16_partials", 512),
]


def _eager_versions():
    return [
        c2_version_defs.Version("eager", "compiler", None, "", c2_version_defs.plain_sum),
        c2_version_defs.Version(
            "tile512_fp32_partials", "tiled_fp32_partials", 512, "", c2_version_defs.tiled_sum(512, "fp32")
        ),
        c2_version_defs.Version(
            "tile512_fp16_partials", "tiled_fp16_partials", 512, "", c2_version_defs.tiled_sum(512, "fp16")
        ),
    ]


def test_run_c2_builds_every_table_from_eager_versions():
    lines = []
    result = c2_compute.run_c2(_eager_versions(), 2048, 2, 3, 11, torch.device("cpu"), lines.append)
    rows = c2_version_defs.make_rows(3, 2048, 11)
    assert bit_equal(result.stored["rows"], rows)
    assert list(result.stored) == ["rows"] + [f"{v}/{o}" for v, _, _ in _NAMES for o in ("out16", "acc32")]
    # Every stored result is the version run on each row; eager's accumulator is the fp32 sum.
    assert bit_equal(result.stored["eager/acc32"], rows.sum(-1, dtype=torch.float32))
    assert bit_equal(result.stored["eager/out16"], rows.sum(-1))
    assert result.skipped == [] and lines[-1].startswith("summation versions (3 runs + 2 pool rows each) 3/3 (100%)")

    versions = result.versions
    assert versions["version"].to_list() == [v for v, _, _ in _NAMES]
    assert versions["mode"].to_list() == ["eager"] * 3 and versions["runs"].to_list() == [3] * 3
    assert versions["self_deterministic"].all() and versions["nonfinite_outputs"].to_list() == [0, 0, 0]
    assert versions["tiling_source"].to_list() == ["framework (eager ATen kernel)", "hand-written", "hand-written"]
    assert versions["framework_tiling"][1] == "hand-written: 512-element tiles, then the sum of the partials"
    assert versions["fp64_value"][0] == rows[0].double().sum().item()
    assert versions["kernel_count"].to_list() == [None] * 3

    # 3 pairs x 2 outputs x 2 scopes; the seed-input scope has one row, the pool two.
    matrix = result.ulp_matrix
    assert matrix.height == 12 and matrix.filter(pl.col("scope") == "pool")["rows"].unique().to_list() == [2]
    # 3 rows x 3 versions x 2 outputs, each with the chain of its own summation order.
    bounds = result.row_bounds
    assert bounds.height == 18
    chains = dict(bounds.select("version", "chain").unique().iter_rows())
    assert chains == {"eager": "2047", "tile512_fp32_partials": "511+3", "tile512_fp16_partials": "511+3"}
    errors = result.error_vs_fp64
    assert errors.height == 6 and errors["rows"].to_list() == [3] * 6
    for r in errors.iter_rows(named=True):
        mine = bounds.filter((pl.col("version") == r["version"]) & (pl.col("output") == r["output"]))
        assert r["margin_max"] == mine["margin"].max() and r["worst_margin_row"] == mine["margin"].arg_max()


def test_c2_shape_and_run_count_are_checked_before_running():
    with pytest.raises(ValueError, match="c2_runs must be >= 2"):
        c2_compute.run_c2(_eager_versions(), 2048, 0, 1, 1, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"c2_length 1536 is not a multiple of tiles \[1024, 2048\]"):
        c2_compute.check_c2_shape(1536, 5)


def test_versions_table_compares_code_with_the_fused_default():
    def run(version, sha):
        return c2_compute.VersionRun({"version": version, "code_sha256": sha}, torch.zeros(1), torch.zeros(1))

    table = c2_compute.versions_table(
        [run("eager", None), run("fused_default", "a"), run("knob1", "a"), run("knob2", "b")]
    )
    assert table["same_code_as_fused_default"].to_list() == [None, True, True, False]


def test_knob_summary_says_what_each_knob_changed():
    versions = pl.DataFrame(
        {
            "version": ["eager", "fused_default", "fused_k1", "framework_tiled_t1", "tile512_fp32_partials"],
            "family": ["compiler", "compiler", "compiler", "framework_tiled", "tiled_fp32_partials"],
            "mode": ["eager", "fused", "fused", "fused", "eager"],
            "options": ["", "", "k1=0", "t=1", ""],
            "same_code_as_fused_default": [None, True, True, False, None],
        }
    )
    one, two = torch.tensor([1.0]), torch.tensor([2.0])
    stored = {"fused_default/acc32": one, "fused_k1/acc32": one.clone(), "framework_tiled_t1/acc32": two}
    assert c2_compute.knob_summary(versions, stored) == [
        "k1=0: code unchanged, fp32 accumulator unchanged vs fused_default",
        "t=1: code changed, fp32 accumulator changed vs fused_default",
    ]


# --- long reductions ------------------------------------------------------------------------------


def test_long_bounds_are_probabilistic_where_gamma_is_undefined():
    from pipeline.experiments.reduction_order.long import long_bounds
    from pipeline.experiments.reduction_order.summation_bounds import gamma_tilde

    abs_sum = torch.tensor([2.0**23], dtype=torch.float64)
    det, prob = long_bounds(abs_sum, 2**24 + 1, lam=6.0)  # (n - 1) u32 = 1: gamma undefined
    assert det.item() == float("inf")
    assert prob.item() == pytest.approx(2.0**23 * gamma_tilde(2**24, 2.0**-24, 6.0))
    det_short, prob_short = long_bounds(abs_sum, 1025, lam=6.0)
    assert det_short.item() == pytest.approx(2.0**23 * 1024 * 2.0**-24 / (1 - 1024 * 2.0**-24))
    assert prob_short.item() <= det_short.item()


def _bf16_running_sum(x: torch.Tensor) -> torch.Tensor:
    """A long-reduction fault: 64 fp32 partials stored and added at bf16 precision."""
    parts = x.reshape(x.shape[0], 64, -1).sum(-1).to(torch.bfloat16)
    acc = parts[:, 0]
    for i in range(1, 64):
        acc = acc + parts[:, i]  # bf16 + bf16 rounds to bf16
    return acc.float()


def test_long_reductions_rule_passes_a_running_fp32_sum_and_contradicts_bf16_partials():
    from pipeline.experiments.reduction_order.long import LongVersion, run_long

    def running_fp32(x: torch.Tensor) -> torch.Tensor:  # no cascade: one accumulator per row
        return x.cumsum(-1)[:, -1]

    n = 2**20
    versions = [
        LongVersion("eager", "all", "", lambda x: x.sum(-1)),
        LongVersion("running_fp32", "one", "", running_fp32),
        LongVersion("bf16_partials", "all", "", _bf16_running_sum),
    ]
    table = run_long(
        versions, 1, n, lambda dist: {"uniform_symmetric": 1, "uniform_nonnegative": 2}[dist], torch.device("cpu")
    )
    assert table.height == 2 * 3 and set(table["distribution"]) == {"uniform_symmetric", "uniform_nonnegative"}
    assert table["bound"].is_finite().all()  # (n - 1) u32 = 1/16 at 2^20 terms: defined, and loose
    by = {(r["distribution"], r["version"]): r for r in table.iter_rows(named=True)}
    assert by[("uniform_nonnegative", "running_fp32")]["margin_prob"] < 1
    assert by[("uniform_nonnegative", "bf16_partials")]["margin_prob"] > 1
    assert by[("uniform_symmetric", "eager")]["bit_equal_eager"]
    verdict, reason, meta = c2_checks.judge_bounds(table.filter(pl.col("version") != "bf16_partials"), ("compiler",))
    assert verdict == SUPPORTED and meta["rows_judged"] == 4
    verdict, reason, _ = c2_checks.judge_bounds(table, ("compiler",))
    assert verdict == CONTRADICTED and "bf16_partials" in reason and "probabilistic" in reason


def test_order_rule_needs_some_pair_to_differ_in_the_fp32_accumulator():
    def matrix(acc32_differ: int) -> pl.DataFrame:
        rows = []
        for a, b in (
            ("eager", "fused_default"),
            ("eager", "tile512_fp32_partials"),
            ("fused_default", "tile512_fp32_partials"),
        ):
            for output, differ in (("out16", 0), ("acc32", acc32_differ if b == "tile512_fp32_partials" else 0)):
                for scope in ("seed_input", "pool"):
                    rows.append(
                        {
                            "version_a": a,
                            "version_b": b,
                            "output": output,
                            "scope": scope,
                            "differ_rows": differ,
                            "ulp_max": 3 * differ,
                        }
                    )
        return pl.DataFrame(rows)

    versions = ["eager", "fused_default", "tile512_fp32_partials"]
    verdict, reason, meta = c2_checks.judge_order(matrix(2), versions)
    assert verdict == SUPPORTED and meta["pairs"] == 3 and meta["pairs_differing"] == 2
    # fp16 results identical everywhere is no evidence against the thesis; identical accumulators are.
    verdict, reason, meta = c2_checks.judge_order(matrix(0), versions)
    assert verdict == CONTRADICTED and "no order effect" in reason
    assert c2_checks.judge_order(matrix(2), ["eager"])[0] == INCONCLUSIVE


def test_fp16_rate_rule_compares_differing_rows_with_the_accumulators_prediction():
    def matrix(observed, expected):
        return pl.DataFrame(
            {
                "version_a": ["eager", "eager", "eager"],
                "version_b": ["fused_default", "fused_default", "tile512_fp16_partials"],
                "output": ["out16", "out16", "out16"],
                "scope": ["seed_input", "pool", "pool"],
                "differ_rows": [0, observed, 40],
                "expected_differ_rows": [0.0, expected, None],  # the fp16-partials version is not judged
            }
        )

    verdict, reason, meta = c2_checks.judge_fp16_rate(matrix(11, 9.6))
    assert verdict == SUPPORTED and meta["pairs"] == 1 and meta["observed_total"] == 11
    verdict, reason, meta = c2_checks.judge_fp16_rate(matrix(40, 9.6))  # the final rounding adds differences
    assert verdict == CONTRADICTED and "40 rows vs 9.60 expected" in reason
    assert c2_checks.judge_fp16_rate(matrix(0, 9.6))[0] == CONTRADICTED  # results not from the accumulators
    assert c2_checks.judge_fp16_rate(matrix(1, 1.2))[0] == INCONCLUSIVE  # too few expected to test


def test_expected_fp16_differences_follow_the_accumulator_gap():
    acc = torch.tensor([1.0, 2.0, 1000.0])
    # one fp16 ULP apart at 1, a quarter ULP at 2, nothing at 1000
    assert c2_compute.expected_fp16_differences(acc, acc + torch.tensor([2.0**-10, 2.0**-11, 0.0])) == 1.25
    assert c2_compute.rounds_accumulator_once(acc.half(), acc)
    assert not c2_compute.rounds_accumulator_once(torch.tensor([1.0, 2.0, 999.0]).half(), acc)


def _order_matrix(differing_pairs: set[tuple[str, str]]) -> pl.DataFrame:
    names = ["eager", "fused_default", "framework_tiled_t1_simd0", "tile512_fp32_partials"]
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            differ = 3 if (a, b) in differing_pairs else 0
            rows.append(
                {
                    "version_a": a,
                    "version_b": b,
                    "output": "acc32",
                    "scope": "pool",
                    "differ_rows": differ,
                    "ulp_max": differ,
                }
            )
    return pl.DataFrame(rows)


def test_order_thesis_counts_only_the_framework_s_own_versions():
    versions = pl.DataFrame(
        {
            "version": ["eager", "fused_default", "framework_tiled_t1_simd0", "tile512_fp32_partials"],
            "family": ["compiler", "compiler", "framework_tiled", "tiled_fp32_partials"],
        }
    )
    check = c2_checks.c2_order_changes_accumulator
    # Only pairs with the hand-written tiling differ: the framework never changed the order, so the thesis fails.
    hand_only = check(_order_matrix({("eager", "tile512_fp32_partials")}), versions)
    assert hand_only.metadata["verdict"].value == CONTRADICTED and hand_only.severity == dg.AssetCheckSeverity.ERROR
    assert hand_only.metadata["pairs"].value == 3 and hand_only.metadata["versions_judged"].value == 3
    assert hand_only.metadata["pairs_with_a_hand_written_tiling_differing"].value == 1
    # A framework tiling setting that changes the accumulator supports it.
    framework = check(_order_matrix({("fused_default", "framework_tiled_t1_simd0")}), versions)
    assert framework.metadata["verdict"].value == SUPPORTED and framework.metadata["pairs_differing"].value == 1
    (spec,) = check.check_specs
    assert "hand-written" in spec.metadata["rule.metric"] and spec.metadata["rule.threshold"] == 0.0


def _paired_bounds(errors: dict[str, list[float]]) -> pl.DataFrame:
    """c2_row_bounds rows (fp16 output) with the given per-row errors; the fp64 sums are 40 (fp16 ULP 2^-5)."""
    return pl.DataFrame(
        [
            {
                "version": v,
                "family": "tiled_fp16_partials" if v.startswith("tile") else "compiler",
                "output": "out16",
                "row": i,
                "ref": 40.0,
                "error": e,
                "bound": 0.5,
            }
            for v, es in errors.items()
            for i, e in enumerate(es)
        ]
    )


def test_accuracy_rule_arithmetic():
    assert c2_accuracy.min_paired_rows(10) == 10 and c2_accuracy.min_paired_rows(2) == 8
    # The minimum-rows rule is derived in the rule's own text, from the sign test's smallest p-value and Holm.
    assert "2^-n" in c2_accuracy.ACCURACY_RULE.derivation and "log2(m / 0.01)" in c2_accuracy.ACCURACY_RULE.derivation
    half = 2.0**-6  # half an fp16 ULP at 40
    n = 16
    eager = [half * 0.5] * n
    healthy = list(eager)
    healthy[3], healthy[7] = half * 0.6, half * 0.4  # two rows each side of a rounding midpoint: one worse, one better
    fp16_partials = [e + 2 * half for e in eager]  # an extra fp16 rounding on every row
    table = _paired_bounds(
        {"eager": eager, "fused_default": healthy, "fused_bad": fp16_partials, "tile512_fp16_partials": fp16_partials}
    )
    verdict, reason, meta = c2_accuracy.judge_accuracy_vs_eager(table)
    assert verdict == CONTRADICTED and meta["versions_judged"] == 2 and meta["versions_rejected"] == 1
    assert "fused_bad: worse on 16 of 16 rows, better on 0" in reason
    assert meta["fused_bad.p_holm"] == pytest.approx(2 * 2.0**-16)  # the sign test's 2^-16, Holm over two versions
    assert (
        meta["fused_default.p_holm"] == pytest.approx(0.75) and not meta["fused_default.rejected"]
    )  # 1 worse, 1 better
    assert meta["bound_ulp_median"] == pytest.approx(16.0) and meta["eager_median_ulp"] == pytest.approx(0.25)
    # Without the faulty version: supported (the hand-written fp16 tiling is not a framework version).
    verdict, reason, meta = c2_accuracy.judge_accuracy_vs_eager(table.filter(pl.col("version") != "fused_bad"))
    assert verdict == SUPPORTED and meta["versions_judged"] == 1 and meta["worse_rows_max"] == 1
    # A non-finite result (error NaN) is farther than any finite one.
    nan = _paired_bounds({"eager": eager[:8], "fused_default": [float("nan")] * 8})
    assert c2_accuracy.judge_accuracy_vs_eager(nan)[0] == CONTRADICTED
    # Too few rows to reject even a version worse on every row: inconclusive, not supported.
    short = _paired_bounds({"eager": eager[:6], "fused_default": eager[:6]})
    verdict, reason, _ = c2_accuracy.judge_accuracy_vs_eager(short)
    assert verdict == INCONCLUSIVE and "needs 7" in reason


def _fp16_running_partials(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fault of planted_fp16_accumulation, written out: 64 fp32 chunk sums stored in fp16 and added in fp16."""
    parts = x.reshape(x.shape[0], 64, -1).sum(-1, dtype=torch.float32).half()
    acc = parts[:, 0]
    for i in range(1, 64):
        acc = acc + parts[:, i]  # fp16 + fp16 rounds to fp16
    return acc, acc.float()


def test_accuracy_claim_contradicts_planted_fp16_partials_that_the_bound_passes(smoke_resources):
    from pipeline.instruments.regression.planted_bugs import register_planted_backends
    from precisionkit import fused

    register_planted_backends()
    settings = smoke_resources["settings"]
    device = settings.torch_device()
    plain, opts = c2_version_defs.plain_sum, settings.options()
    V = c2_version_defs.Version
    versions = [
        V("eager", "compiler", None, "", plain),
        V("fused_default", "compiler", None, "", fused(plain, settings.backend, opts)),
        V("fp16_partials", "compiler", None, "", _fp16_running_partials),
        V("planted_fp16_accumulation", "compiler", None, "", fused(plain, "planted_fp16_accumulation", opts)),
    ]
    result = c2_compute.run_c2(versions, 4096, 15, 2, 3, device)
    verdict, _, meta = c2_accuracy.judge_accuracy_vs_eager(result.row_bounds)
    assert verdict == CONTRADICTED and meta["versions_rejected"] == 2
    # Healthy: the fused default ties with eager on all 16 rows; both fp16-partials versions are worse on most rows.
    assert meta["fused_default.worse_rows"] == 0 and not meta["fused_default.rejected"]
    for bad in ("fp16_partials", "planted_fp16_accumulation"):
        assert meta[f"{bad}.worse_rows"] >= 12 and meta[f"{bad}.better_rows"] == 0 and meta[f"{bad}.rejected"]
    # The derived bound, by contrast, lets the fp16 partials through on the deterministic margin.
    bad_rows = result.row_bounds.filter(pl.col("version").is_in(["fp16_partials", "planted_fp16_accumulation"]))
    assert (bad_rows["margin"] < 1).all()
