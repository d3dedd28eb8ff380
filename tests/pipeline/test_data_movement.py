import dagster as dg
import polars as pl
import pytest
import torch

from pipeline import storage
from pipeline.assets import data_movement, toolkit
from pipeline.movement import CATALOGUE, COUNTEREXAMPLES, LAYOUTS, PURE, get_graph, make_input
from pipeline.profiles import PROFILES


def test_catalogue_shapes_and_eager_semantics():
    x = make_input((2, 5, 6), torch.float32, "contiguous", 1, specials=False)
    y = make_input((2, 5, 6), torch.float32, "contiguous", 2, specials=False)
    assert CATALOGUE["transpose_concat"].fn(x, y).shape == (2, 6, 10)
    assert CATALOGUE["split_transpose_concat"].fn(x, y).shape == (2, 12, 5)
    q, k = CATALOGUE["rope_rotate_half"].fn(x, y)
    assert torch.equal(q[..., :3], -x[..., 3:]) and torch.equal(q[..., 3:], x[..., :3])
    a, b = CATALOGUE["full_two_concats"].fn(x, y)
    assert a.shape == b.shape == (2, 5, 14) and bool((a[..., 6:] == -1.5).all())
    # Counterexamples really hide arithmetic; pure graphs do not.
    assert set(COUNTEREXAMPLES) and all(CATALOGUE[n].has_implicit_computation for n in COUNTEREXAMPLES)
    assert not any(CATALOGUE[n].has_implicit_computation for n in PURE)
    with pytest.raises(ValueError, match="unknown movement subgraph 'gather'"):
        get_graph("gather")


def test_inputs_are_seeded_strided_and_carry_special_values():
    a = make_input((1, 7, 24), torch.bfloat16, "transposed_view", 5, specials=True)
    b = make_input((1, 7, 24), torch.bfloat16, "transposed_view", 5, specials=True)
    assert a.shape == (1, 7, 24) and not a.is_contiguous()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    assert bool(torch.isnan(a).any()) and bool(torch.isinf(a).any())
    assert bool(((a == 0) & torch.signbit(a)).any())  # -0.0 present
    with pytest.raises(ValueError, match="unknown layout 'blocked'"):
        make_input((1, 2, 3), torch.float16, "blocked", 0, specials=False)
    with pytest.raises(ValueError, match=r"\[batch, seq, hidden\]"):
        make_input((4, 4), torch.float16, "contiguous", 0, specials=False)


def test_s_is_upstream_in_the_asset_graph():
    assert dg.AssetKey("toolkit_selfcheck") in data_movement.data_movement_check_table.dependency_keys


def test_plan_compile_count_stays_bounded():
    shapes = PROFILES["default"].movement_shapes
    combos = data_movement.plan(shapes)
    assert len(combos) == len(PURE) * 3 * len(shapes) * len(LAYOUTS) + len(COUNTEREXAMPLES) * 3
    assert len(combos) <= 100
    with pytest.raises(ValueError, match="no movement_shapes"):
        data_movement.plan(())


def test_smoke_check_table(smoke_resources, tmp_path):
    result = dg.materialize(
        [toolkit.toolkit_selfcheck, data_movement.data_movement_check_table,
         data_movement.pure_movement_rows_bit_exact, data_movement.every_movement_combination_fused],
        resources=smoke_resources,
    )
    assert result.success
    table = storage.read_value(tmp_path / "smoke" / "data_movement_check_table")
    for col in ("subgraph", "dtype", "shape", "layout", "has_implicit_computation", "bit_equal", "ulp_max", "kernel_count", "notes"):
        assert col in table.columns
    assert table.height == len(data_movement.plan(PROFILES["smoke"].movement_shapes))
    assert set(table["dtype"]) == set(data_movement.MOVEMENT_DTYPES)
    assert (table["kernel_count"] >= 1).all() and (table["recompiles"] == 0).all()

    pure = table.filter(~pl.col("has_implicit_computation"))
    # Pure data movement never changes a value: every element equal (NaN==NaN), 0 ULP.
    assert (pure["ulp_max"] == 0).all()
    # Bit for bit, except NaN encodings, which the notes must explain.
    not_exact = pure.filter(~pl.col("bit_equal"))
    assert (not_exact["mismatched_elements"] == not_exact["nan_encoding_mismatches"]).all()
    assert all("NaN" in n for n in not_exact["notes"])

    implicit = table.filter(pl.col("has_implicit_computation"))
    assert implicit.height == len(COUNTEREXAMPLES) * 3
    assert all(n for n in implicit["notes"])
    # The scalar-scale chain double-rounds in eager but not in the fused kernel for fp16.
    scaled = implicit.filter((pl.col("subgraph") == "scaled_add_concat") & (pl.col("dtype") == "float16")).row(0, named=True)
    assert not scaled["bit_equal"] and scaled["ulp_max"] > 0

    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert checks["every_movement_combination_fused"].passed
    bit = checks["pure_movement_rows_bit_exact"]
    assert bit.passed == (not_exact.height == 0)
    if not bit.passed:  # NaN-encoding-only differences are a WARN finding, not an error
        assert bit.severity == dg.AssetCheckSeverity.WARN
        assert bit.metadata["value_differences"].value == 0
