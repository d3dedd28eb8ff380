import dagster as dg
import polars as pl
import pytest
import torch

from pipeline.experiments.rsqrt_iterations import assets as c3_assets
from pipeline.experiments.rsqrt_iterations import checks as c3_checks
from pipeline.experiments.rsqrt_iterations import compute as c3_compute
from pipeline.experiments.rsqrt_iterations import rules as c3_rules
from pipeline.storage import read_value
from pipeline.verdicts import CLAIM, CONTRADICTED, SUPPORTED
from precisionkit import bit_equal

ASSETS = [
    c3_assets.c3_rsqrt_iterations,
    c3_checks.c3_error_nonincreasing_with_iterations,
    c3_checks.c3_div_error_nonincreasing_with_iterations,
]


def test_magic_constant_estimate_and_newton_convergence():
    one = torch.tensor([1.0])
    # 0x5f3759df - (0x3f800000 >> 1) = 0x5f3759df - 0x1fc00000 = 0x3f7759df (about 0.966)
    assert c3_compute.bit_trick_rsqrt(one, 0).view(torch.int32).item() == 0x3F7759DF
    x = torch.linspace(0.01, 100, 1001, dtype=torch.float64)
    ref = x.rsqrt()
    errs = [float(((c3_compute.bit_trick_rsqrt(x, n).double() - ref) / ref).abs().max()) for n in c3_compute.ITERATIONS]
    assert errs[0] < 0.035 and errs[1] < 2e-3 and errs[2] < 5e-6 and errs[3] < 3e-7
    assert errs == sorted(errs, reverse=True)


def test_check_is_a_claim_with_a_deterministic_rule():
    (spec,) = c3_checks.c3_error_nonincreasing_with_iterations.check_specs
    assert spec.metadata["outcome"] == CLAIM
    assert spec.metadata["rule.threshold"] == 0.0 and spec.metadata["rule.confidence"] == "deterministic"
    assert spec.metadata["rule.claim"].startswith("§1.2 (4)") and "Newton" in spec.metadata["rule.derivation"]


def _table(errors: dict[str, list[float]], newton0_equal: float = 0.1) -> pl.DataFrame:
    rows = []
    for compute in ("float32", "float16"):
        for i, n in enumerate(c3_compute.ITERATIONS):
            rows.append(
                {
                    "path": f"B_newton{n}_{compute}",
                    "iterations": n,
                    "compute_dtype": compute,
                    **{m: errors.get(f"{compute}.{m}", [4.0, 3.0, 2.0, 1.0])[i] for m in c3_checks.MONOTONE_METRICS},
                    "vs_A_eager_equal_fraction": newton0_equal if n == 0 else 1.0,
                }
            )
    return pl.DataFrame(rows)


def test_claim_rule_on_synthetic_tables():
    # The rule on any device: any increase with the iteration count contradicts (threshold 0).
    check = c3_checks.c3_error_nonincreasing_with_iterations
    assert check(_table({})).metadata["verdict"].value == SUPPORTED
    assert check(_table({"float16.ulp_max": [3.0, 1.0, 1.0, 1.0]})).metadata["verdict"].value == SUPPORTED  # the floor
    grows = check(_table({"float16.ulp_mean": [3.0, 1.0, 0.5, 0.5000001]}))
    assert grows.metadata["verdict"].value == CONTRADICTED and grows.severity == dg.AssetCheckSeverity.ERROR
    assert "float16 ulp_mean increases" in grows.metadata["reason"].value
    assert check(_table({}, newton0_equal=1.0)).metadata["verdict"].value == CONTRADICTED
    # The div claim applies the same rule to its own table.
    div = c3_checks.c3_div_error_nonincreasing_with_iterations
    assert div(_table({})).metadata["verdict"].value == SUPPORTED
    assert div(_table({"float32.pre_round_rel_max": [1.0, 0.1, 0.2, 0.01]})).metadata["verdict"].value == CONTRADICTED


def _framework(ulps: dict[str, int]) -> pl.DataFrame:
    return pl.DataFrame(
        {"path": list(ulps), "int_ulp_vs_rounded_ref_max": list(ulps.values())},
        schema={"path": pl.String, "int_ulp_vs_rounded_ref_max": pl.Int64},
    )


def test_framework_rule_bounds_torchs_own_rsqrt_and_div_by_one_ulp():
    check = c3_checks.c3_framework_within_one_ulp
    healthy = _framework({"A_eager": 0, "A_fused": 1, "A_fused[approx]": 1, "B_newton0_float32": 69})
    result = check(healthy, healthy)
    assert result.metadata["verdict"].value == SUPPORTED and result.metadata["paths_judged"].value == 6
    # An approximate reciprocal without its Newton step, under a fast-math switch: two ULPs off.
    fast = _framework({"A_eager": 0, "A_fused": 0, "A_fused[fast_math]": 2})
    result = check(healthy, fast)
    assert result.metadata["verdict"].value == CONTRADICTED and result.severity == dg.AssetCheckSeverity.ERROR
    assert "div A_fused[fast_math]: 2 fp16 ULP" in result.metadata["reason"].value
    with pytest.raises(ValueError, match="no framework rows"):
        c3_checks.judge_framework({"rsqrt": _framework({"B_newton0_float32": 1})})


def test_reciprocal_estimate_and_newton_convergence():
    y = torch.linspace(0.01, 100, 1001, dtype=torch.float64)
    errs = [
        float(((c3_compute.bit_trick_reciprocal(y, n).double() * y) - 1).abs().max()) for n in c3_compute.ITERATIONS
    ]
    assert errs == sorted(errs, reverse=True) and errs[0] < 0.13 and errs[3] < 3e-7
    with pytest.raises(ValueError, match="iterations must be >= 0"):
        c3_compute.bit_trick_reciprocal(torch.ones(2), -1)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="iterations must be >= 0"):
        c3_compute.bit_trick_rsqrt(torch.ones(2), -1)
    with pytest.raises(TypeError, match="floating tensor"):
        c3_compute.bit_trick_rsqrt(torch.ones(2, dtype=torch.int32), 1)


def test_smoke_materialization(smoke_resources, tmp_path):
    result = dg.materialize(ASSETS, resources=smoke_resources)
    assert result.success
    table = {r["path"]: r for r in read_value(tmp_path / "smoke" / "c3_iteration_table").iter_rows(named=True)}
    hist = read_value(tmp_path / "smoke" / "c3_ulp_histogram")
    assert hist.filter(hist["comparison"] == "B_newton0_float32 vs A_eager")["count"].sum() == 64 * 64
    assert table["A_fused"]["fused_kernel_count"] == "1"
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    check = checks["c3_error_nonincreasing_with_iterations"]
    div_check = checks["c3_div_error_nonincreasing_with_iterations"]
    assert div_check.metadata["outcome"].value == CLAIM and div_check.metadata["rule.threshold"].value == 0.0
    assert check.metadata["method"].value == c3_rules.METHOD and "fallback" in c3_rules.METHOD
    assert check.metadata["outcome"].value == CLAIM and check.metadata["rule.threshold"].value == 0.0
    # The bit trick with its fp32 Newton steps is plain IEEE arithmetic, so these hold on any device.
    b = [table[f"B_newton{n}_float32"] for n in c3_compute.ITERATIONS]
    pre = [r["pre_round_rel_max"] for r in b]
    assert pre == sorted(pre, reverse=True) and pre[3] < 2e-7
    # The div table has the same form: A eager/fused (+ switches), torch.reciprocal, N = 0..3 per dtype.
    div = {r["path"]: r for r in read_value(tmp_path / "smoke" / "c3_div_table").iter_rows(named=True)}
    assert set(read_value(tmp_path / "smoke" / "c3_div_table").columns) == set(
        read_value(tmp_path / "smoke" / "c3_iteration_table").columns
    )
    assert {"A_eager", "A_fused", "B_torch_reciprocal"} <= set(div)
    dpre = [div[f"B_newton{n}_float32"]["pre_round_rel_max"] for n in c3_compute.ITERATIONS]
    assert dpre == sorted(dpre, reverse=True) and dpre[3] < 1e-6
    div_table = read_value(tmp_path / "smoke" / "c3_div_table")
    assert div_check.metadata["verdict"].value == c3_checks.judge_iterations(div_table, "x / y")[0]
    # The search for a framework switch is recorded, not assumed; its statement is computed.
    knobs = read_value(tmp_path / "smoke" / "c3_framework_knobs")
    assert not knobs["names_an_iteration_count"].any() and "use_fast_math" in knobs["option"].to_list()
    statement = c3_rules.knob_statement(knobs, read_value(tmp_path / "smoke" / "c3_iteration_table"))
    assert "none names an iteration count" in statement
    floor = c3_rules.floor_statement(read_value(tmp_path / "smoke" / "c3_iteration_table"), "rsqrt")
    assert "stops changing from N=" in floor and "N=0:" in floor

    # CPU-specific: torch.rsqrt's own accuracy (path A) and hence the verdict were measured on the
    # CPU backend; another device's rsqrt may round differently.
    if smoke_resources["settings"].torch_device().type != "cpu":
        pytest.skip("CPU-specific: torch.rsqrt correctly rounded and the C3 verdict measured on the CPU backend")
    # torch.rsqrt on CPU is correctly rounded to fp16 in both modes (measured).
    assert (
        table["A_eager"]["correctly_rounded_fraction"] == 1.0 and table["A_fused"]["vs_A_eager_equal_fraction"] == 1.0
    )
    assert [r["int_ulp_vs_rounded_ref_max"] for r in b[:2]] == [69, 3]
    assert b[2]["int_ulp_vs_rounded_ref_max"] <= 1 and b[3]["vs_A_eager_equal_fraction"] == 1.0
    # the verdict is the rule's on this table (a measured CPU fact above, not a pinned verdict)
    iteration_table = read_value(tmp_path / "smoke" / "c3_iteration_table")
    assert check.metadata["verdict"].value == c3_checks.judge_iterations(iteration_table, "torch.rsqrt")[0]
    # CPU: the approximate-math switches run path A once more each; true division is correctly rounded.
    assert {p for p in table if p.startswith("A_fused[")} == {f"A_fused[{k}]" for k in c3_compute.APPROX_KNOBS["cpu"]}
    assert div["A_eager"]["correctly_rounded_fraction"] == 1.0


# --- the plain functions behind the asset, without Dagster ------------------------------------------


def test_newton_paths_cover_both_compute_dtypes_and_every_count():
    x = torch.tensor([0.25, 4.0], dtype=torch.float16)
    paths = c3_compute.newton_rsqrt_paths(x)
    assert [p[0] for p in paths] == [f"B_newton{n}_{t}" for t in ("float32", "float16") for n in c3_compute.ITERATIONS]
    _, n, compute, raw, out = paths[-1]
    assert (n, compute, raw.dtype, out.dtype) == (c3_compute.ITERATIONS[-1], "float16", torch.float16, torch.float16)
    assert bit_equal(out, c3_compute.bit_trick_rsqrt(x, n, torch.float16).to(torch.float16))
    # Enough Newton steps in fp32 give rsqrt(0.25) = 2 and rsqrt(4) = 0.5 exactly after the fp16 rounding.
    assert paths[len(c3_compute.ITERATIONS) - 1][4].tolist() == [2.0, 0.5]

    y = torch.tensor([2.0, 8.0], dtype=torch.float16)
    div = c3_compute.reciprocal_div_paths(x, y)
    assert div[0][0] == "B_torch_reciprocal" and div[0][4].tolist() == [0.125, 0.5]
    assert [p[0] for p in div[1:]] == [p[0] for p in paths]
    assert bit_equal(div[1][3], x.float() * c3_compute.bit_trick_reciprocal(y, c3_compute.ITERATIONS[0], torch.float32))


def test_table_metadata_keys_follow_the_paths():
    table = pl.DataFrame(
        {
            "path": ["A_eager", "B_newton0_float32", "B_newton1_float32"],
            "iterations": [None, 0, 1],
            "compute_dtype": ["framework", "float32", "float32"],
            "ulp_max": [1.0, 3.0, 1.0],
            "ulp_mean": [0.25, 1.0, 0.25],
            "rel_max": [1e-4, 1e-3, 1e-4],
            "pre_round_rel_max": [None, 2e-3, 1e-6],
            "pre_round_ulp16_max": [None, 2.0, 0.01],
            "correctly_rounded_fraction": [0.75, 0.5, 0.75],
            "vs_A_eager_equal_fraction": [1.0, 0.5, 1.0],
        }
    )
    knobs = pl.DataFrame(
        {"option": ["emulate_precision_casts"], "value": ["False"], "names_an_iteration_count": [False]}
    )
    meta = c3_assets.div_metadata(table, 42, knobs)
    assert meta["A_eager.ulp_max"] == 1.0 and meta["B_newton0_float32.ulp_max"] == 3.0 and meta["seed_y"] == 42
    assert meta["notes"].value.startswith(
        "div, float32 arithmetic: pre-rounding max relative error N=0: 0.002, N=1: 1e-06; the fp16 result's max/mean "
        "ULP error stops changing from N=1 (max 1, mean 0.25 ULP; framework path A: max 1, mean 0.25), where 100.00% "
        "of elements equal path A's."
    )
    meta = c3_assets.iteration_metadata(table, {"kernel_count": 1, "kernel_names": ("k",)}, 0.12345, knobs)
    assert "A_eager.pre_round_rel_max" not in meta and meta["B_newton1_float32.pre_round_rel_max"] == 1e-6
    assert meta["fused_first_call_seconds"] == 0.123 and meta["fused.kernel_count"] == 1
    assert "fused.kernel_names" not in meta  # only numbers and strings go into metadata
