"""The measured-tolerance table on a compiler that C1 and C3 do not apply to: their tables are left out with
the reason, never read as missing data, and a table missing for an experiment that applies is an error."""

import polars as pl
import pytest

from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES
from pipeline.instruments.diagnostics import tolerances
from pipeline.verdicts import NOT_STORED


def test_c1_and_c3_are_left_out_with_the_reason_where_they_do_not_apply():
    left = tolerances._not_applicable_sources("openvino", C1=NOT_STORED, C3=NOT_STORED)
    assert set(left) == {"C1", "C3"}
    assert left["C1"].startswith("not applicable to OpenVINO: ") and "C++ source" in left["C1"]
    assert left["C3"].startswith("not applicable to OpenVINO: ") and "rsqrt" in left["C3"]
    # a stored table is used, whatever the compiler
    assert tolerances._not_applicable_sources("openvino", C1=pl.DataFrame()) == {}


def test_a_missing_table_of_an_experiment_that_applies_is_an_error():
    with pytest.raises(ValueError, match="C1 applies to inductor but stores no table here: materialize C1 first"):
        tolerances._not_applicable_sources("inductor", C1=NOT_STORED)


def test_observations_without_c1_and_c3_come_from_the_other_sources():
    per_set = pl.DataFrame(
        {"path": ["fused", "eager"], "chain": ["softmax"] * 2, "distribution": ["normal"] * 2,
         "dtype": ["float16"] * 2, "abs_max": [1e-3, 2e-3], "ulp_max": [2.0, 3.0]}
    )  # fmt: skip
    c2 = pl.DataFrame({"version": ["fused_a"], "output": ["out16"], "abs_max": [0.5], "ulp_max": [4.0]})
    fuzzed = pl.DataFrame(
        {"class": ["ok"], "op_class": ["elementwise"], "dtype": ["float32"], "reduction_size": [1],
         "fused_abs_err": [1e-7]}
    )  # fmt: skip
    obs = tolerances.observations(per_set, None, c2, None, fuzzed, POOL_SIZES["smoke"], 64)
    assert [o["source"] for o in obs] == ["B:softmax/normal", "C2:fused_a/out16", "fuzz"]
    assert obs[1]["reduction_size"] == 64 and obs[1]["dtype"] == "float16"


def test_an_openvino_run_measures_without_c1_and_c3_and_says_why(tmp_path):
    import dagster as dg
    from test_diagnostics import _upstream  # same folder: pytest puts it on sys.path

    from pipeline.definitions import build_resources
    from pipeline.resources import ExperimentSettings
    from pipeline.storage import read_value, write_value

    upstream, _ = _upstream()
    folder = tmp_path / "smoke" / "compilers" / "openvino"
    for name in ("accumulated_error_per_set", "c2_error_vs_fp64", "fuzz_outcomes"):
        write_value(upstream[name], folder / name)
    settings = ExperimentSettings(profile="smoke", device="cpu", backend="openvino")
    result = dg.materialize(
        [*(dg.AssetSpec(name) for name in upstream), tolerances.measured_tolerances],
        resources=build_resources(settings, base_dir=str(tmp_path)),
        selection=[tolerances.measured_tolerances.key],
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("measured_tolerances")
    assert str(mat.metadata["sources_left_out.C1"].value).startswith("not applicable to OpenVINO: ")
    assert str(mat.metadata["sources_left_out.C3"].value).startswith("not applicable to OpenVINO: ")
    table = read_value(folder / "measured_tolerances")
    assert not any("C1" in s or "C3" in s for s in table["sources"].to_list())
    assert any("C2" in s for s in table["sources"].to_list()) and any("B" in s for s in table["sources"].to_list())
