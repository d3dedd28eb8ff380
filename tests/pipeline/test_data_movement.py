import dagster as dg
import polars as pl
import pytest
import torch

from pipeline import storage
from pipeline.experiments import experiment
from pipeline.experiments.data_movement import assets as data_movement
from pipeline.experiments.data_movement import checks as d_checks
from pipeline.experiments.data_movement.movement import (
    CATALOGUE,
    COUNTEREXAMPLES,
    LAYOUTS,
    PURE,
    get_graph,
    movement_input,
)
from pipeline.experiments.data_movement.spec import SIZES
from pipeline.experiments.toolkit import assets as toolkit
from pipeline.verdicts import CLAIM, CONTRADICTED, FINDING, INCONCLUSIVE, SUPPORTED, VALIDITY
from precisionkit import bit_equal

CHECKS = [
    d_checks.pure_movement_rows_bit_exact,
    d_checks.pure_movement_nan_encodings,
    d_checks.implicit_computation_counterexamples,
    d_checks.every_movement_combination_ran,
    d_checks.movement_rows_not_fused,
    *experiment("D").generated_checks(),
]
#: The §2 claim; NaN re-encodings and the hidden-arithmetic counterexamples are findings; fusion is validity.
KINDS = {
    "pure_movement_rows_bit_exact": CLAIM,
    "pure_movement_nan_encodings": FINDING,
    "implicit_computation_counterexamples": FINDING,
    "every_movement_combination_ran": VALIDITY,
    "movement_rows_not_fused": FINDING,
    "data_movement_check_table_shows_fusion": VALIDITY,
    "data_movement_check_table_computes_in_workload_dtype": FINDING,
}


def test_catalogue_shapes_and_eager_semantics():
    x = movement_input((2, 5, 6), torch.float32, "contiguous", 1, specials=False)
    y = movement_input((2, 5, 6), torch.float32, "contiguous", 2, specials=False)
    assert CATALOGUE["transpose_concat"].fn(x, y).shape == (2, 6, 10)
    assert CATALOGUE["split_transpose_concat"].fn(x, y).shape == (2, 12, 5)
    q, _k = CATALOGUE["rope_rotate_half"].fn(x, y)
    assert torch.equal(q[..., :3], -x[..., 3:]) and torch.equal(q[..., 3:], x[..., :3])
    assert torch.equal(CATALOGUE["reshape_concat"].fn(x, y), torch.cat([x.reshape(2, 30), y.reshape(2, 30)], -1))
    a, b = CATALOGUE["full_two_concats"].fn(x, y)
    assert a.shape == b.shape == (2, 5, 14) and bool((a[..., 6:] == -1.5).all())
    # Counterexamples really hide arithmetic; pure graphs do not.
    assert set(COUNTEREXAMPLES) and all(CATALOGUE[n].has_implicit_computation for n in COUNTEREXAMPLES)
    assert not any(CATALOGUE[n].has_implicit_computation for n in PURE)
    with pytest.raises(ValueError, match="unknown movement subgraph 'gather'"):
        get_graph("gather")


def test_inputs_are_seeded_strided_and_carry_special_values():
    a = movement_input((1, 7, 24), torch.bfloat16, "transposed_view", 5, specials=True)
    b = movement_input((1, 7, 24), torch.bfloat16, "transposed_view", 5, specials=True)
    assert a.shape == (1, 7, 24) and not a.is_contiguous()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))
    assert bool(torch.isnan(a).any()) and bool(torch.isinf(a).any())
    assert bool(((a == 0) & torch.signbit(a)).any())  # -0.0 present
    with pytest.raises(ValueError, match="unknown layout 'blocked'"):
        movement_input((1, 2, 3), torch.float16, "blocked", 0, specials=False)
    with pytest.raises(ValueError, match=r"\[batch, seq, hidden\]"):
        movement_input((4, 4), torch.float16, "contiguous", 0, specials=False)


def test_reshape_of_a_non_contiguous_view_copies():
    from pipeline.experiments.data_movement.movement import reshape_copied

    graph = CATALOGUE["reshape_concat"]
    flat = movement_input((1, 7, 24), torch.float16, "contiguous", 1, specials=False)
    strided = movement_input((1, 7, 24), torch.float16, "transposed_view", 1, specials=False)
    assert reshape_copied(graph, flat, flat) is False and reshape_copied(graph, strided, strided) is True
    assert reshape_copied(CATALOGUE["transpose_concat"], flat, flat) is None


def test_localization_finds_the_op_that_changed_a_payload():
    from pipeline.experiments.data_movement.movement import describe_localization, localize_bit_difference

    # A NaN with a full payload and the sign set: negation must flip only the sign bit.
    # hidden 16: eager negates each 8-element half-row in its scalar (non-vector) loop
    x = torch.full((2, 8, 16), 1.0, dtype=torch.bfloat16)
    x.view(torch.int16)[0, 0, 12] = -1  # 0xffff
    graph = CATALOGUE["rope_rotate_half"]
    loc = localize_bit_difference(graph.fn, (x, x.clone()))
    eager_q = graph.fn(x, x)[0]
    if int(eager_q.view(torch.int16)[0, 0, 4]) & 0xFFFF == 0x7FFF:
        pytest.skip("CPU-specific: the eager bf16 negation canonicalizing a NaN payload was measured on the CPU")
    assert loc["op"] == "aten.neg.default" and loc["op_moves_data_only"] is False
    assert loc["departs_from_bitwise"] == "eager" and "bitwise expectation 0x7fff" in loc["samples"][0]
    assert "the eager path departs" in describe_localization(loc)
    # A pure copy graph has nothing to find.
    clean = localize_bit_difference(CATALOGUE["transpose_concat"].fn, (x, x.clone()))
    assert clean["op"] is None and "cat" in clean["ops_checked"]


def test_s_is_upstream_in_the_asset_graph():
    assert dg.AssetKey("toolkit_selfcheck") in data_movement.data_movement_check_table.dependency_keys


def test_plan_compile_count_stays_bounded():
    shapes = SIZES["default"].shapes
    combos = data_movement.compile_plan(shapes)
    assert len(combos) == len(PURE) * 3 * len(shapes) * len(LAYOUTS) + len(COUNTEREXAMPLES) * 3
    assert len(combos) <= 120
    with pytest.raises(ValueError, match="no movement shapes"):
        data_movement.compile_plan(())


def test_checks_declare_their_outcome_and_rule():
    specs = {spec.name: spec.metadata for c in CHECKS for spec in c.check_specs}
    assert {name: meta["outcome"] for name, meta in specs.items()} == KINDS
    claim = specs["pure_movement_rows_bit_exact"]
    assert claim["rule.threshold"] == 0.0 and claim["rule.confidence"] == "deterministic"
    assert claim["rule.claim"].startswith("§2") and "NaN" in claim["rule.decision"]


def _table(rows: list[dict]) -> pl.DataFrame:
    base = {
        "subgraph": "transpose_concat",
        "dtype": "float16",
        "shape": "1x3x8",
        "layout": "contiguous",
        "has_implicit_computation": False,
        "bit_equal": True,
        "ulp_max": 0,
        "mismatched_elements": 0,
        "nan_encoding_mismatches": 0,
        "kernel_count": 1,
        "graph_breaks": 0,
        "recompiles": 0,
        "notes": "bit-exact",
    }
    return pl.DataFrame([{**base, **r} for r in rows])


def test_rules_on_synthetic_tables():
    # The rule, on any device: a changed value contradicts; a NaN re-encoding is only a finding.
    claim = d_checks.pure_movement_rows_bit_exact
    nan_only = {
        "bit_equal": False,
        "mismatched_elements": 2,
        "nan_encoding_mismatches": 2,
        "notes": "NaN 0x7e00 vs 0x7fc0",
    }
    changed = {"bit_equal": False, "ulp_max": 1, "mismatched_elements": 3, "nan_encoding_mismatches": 1}
    assert claim(_table([{}])).metadata["verdict"].value == SUPPORTED
    assert claim(_table([{}, nan_only])).metadata["verdict"].value == SUPPORTED
    bad = claim(_table([{}, changed]))
    assert bad.metadata["verdict"].value == CONTRADICTED and bad.severity == dg.AssetCheckSeverity.ERROR
    assert claim(_table([{"has_implicit_computation": True}])).metadata["verdict"].value == INCONCLUSIVE

    nan = d_checks.pure_movement_nan_encodings(_table([{}, nan_only, changed]))
    assert nan.passed and nan.metadata["findings"].value == 1 and nan.metadata["rows"].value == 1
    implicit = d_checks.implicit_computation_counterexamples(
        _table([{"subgraph": "scaled_add_concat", "has_implicit_computation": True, "bit_equal": False, "ulp_max": 1}])
    )
    assert implicit.passed and implicit.metadata["findings"].value == 1
    assert d_checks.implicit_computation_counterexamples(_table([{}])).metadata["findings"].value == 0


def test_each_profile_declares_the_compiles_its_plan_makes():
    for profile, sizes in SIZES.items():
        assert len(data_movement.compile_plan(sizes.shapes)) == sizes.compiles, profile
    # the seed's three shapes: 6 pure graphs x 3 dtypes x 3 shapes x 2 layouts + 3 counterexamples x 3 dtypes
    assert SIZES["seed"].compiles == 117 == SIZES["gpu"].compiles


def _count_draws_and_compiles(monkeypatch) -> tuple[list, list]:
    """Record every input draw (key and device) and every fused compile D makes from now on."""
    draws, compiles = [], []
    real_draw, real_fused = data_movement.draw_inputs, data_movement.fused

    def counting_draw(key, seeds, device):
        draws.append((key, device))
        x, y = real_draw(key, seeds, device)
        assert x.device == y.device == device
        return x, y

    def counting_fused(*args, **kwargs):
        compiles.append(args[0])
        return real_fused(*args, **kwargs)

    monkeypatch.setattr(data_movement, "draw_inputs", counting_draw)
    monkeypatch.setattr(data_movement, "fused", counting_fused)
    return draws, compiles


def test_smoke_check_table(smoke_resources, tmp_path, monkeypatch):
    draws, compiles = _count_draws_and_compiles(monkeypatch)
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [toolkit.toolkit_selfcheck, data_movement.data_movement_check_table, *CHECKS],
        resources=smoke_resources,
        instance=instance,
    )
    assert result.success
    # Inputs drawn once per (dtype, shape, layout, salted): 3 dtypes x 1 shape x 2 layouts for the
    # pure graphs, 3 dtypes on the last shape for the counterexamples; all on the run's device.
    smoke_plan = data_movement.compile_plan(SIZES["smoke"].shapes)
    keys = [k for k, _ in draws]
    assert len(keys) == len(set(keys)) == len({data_movement.input_key(*c) for c in smoke_plan}) == 9
    assert {d for _, d in draws} == {smoke_resources["settings"].torch_device()}
    # The compiles the spec declares: one fused graph per planned combination (localizations aside).
    assert len(compiles) == SIZES["smoke"].compiles
    # The combinations loop reports progress into the run log: its first and its last combination.
    n_combos = len(smoke_plan)
    messages = [e.user_message for e in instance.all_logs(result.run_id) if e.dagster_event is None]
    progress = [m for m in messages if m.startswith("subgraph combinations ")]
    assert progress[0].startswith(f"subgraph combinations 1/{n_combos} ")
    assert progress[-1].startswith(f"subgraph combinations {n_combos}/{n_combos} (100%)")
    table = storage.read_value(tmp_path / "smoke" / "data_movement_check_table")
    columns = ("subgraph", "dtype", "shape", "layout", "has_implicit_computation", "bit_equal", "ulp_max")
    assert {*columns, "kernel_count", "notes"} <= set(table.columns)
    assert table.height == len(smoke_plan)
    assert set(table["dtype"]) == set(data_movement.MOVEMENT_DTYPES)
    implicit = table.filter(pl.col("has_implicit_computation"))
    assert implicit.height == len(COUNTEREXAMPLES) * 3
    assert all(n for n in implicit["notes"])

    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert {name: e.metadata["outcome"].value for name, e in checks.items() if name in KINDS} == KINDS
    # Validity: every planned combination ran and fused (a property of the harness, on any device).
    assert checks["every_movement_combination_ran"].passed, checks["every_movement_combination_ran"].metadata
    assert (table["kernel_count"] >= 1).all() and (table["recompiles"] == 0).all()
    # The claim's verdict follows its rule applied to the table.
    pure = table.filter(~pl.col("has_implicit_computation"))
    not_exact = pure.filter(~pl.col("bit_equal"))
    value_changed = not_exact.filter(pl.col("mismatched_elements") != pl.col("nan_encoding_mismatches"))
    excused = not_exact.filter(d_checks.payload_excused(not_exact))
    bit = checks["pure_movement_rows_bit_exact"]
    assert bit.metadata["verdict"].value == (CONTRADICTED if not_exact.height > excused.height else SUPPORTED)
    assert bit.metadata["rule.threshold"].value == 0.0
    # NaN payload differences caused by an arithmetic op are listed counterexamples (WARN) with the
    # measured cause (op and path), never an ERROR.
    nan = checks["pure_movement_nan_encodings"]
    assert nan.severity == dg.AssetCheckSeverity.WARN
    assert nan.passed and (nan.metadata["findings"].value == 0) == (excused.height == 0)
    assert all("NaN" in n and "measured cause: first op whose output bits differ" in n for n in excused["notes"])
    # Reshape rows: a view of a contiguous input, a copy of the transposed (non-contiguous) view.
    reshape = table.filter(pl.col("subgraph") == "reshape_concat")
    assert reshape.height == 3 * len(SIZES["smoke"].shapes) * len(LAYOUTS)
    assert reshape.filter(pl.col("layout") == "contiguous")["reshape_copied"].to_list() == [False] * (
        reshape.height // 2
    )
    assert reshape.filter(pl.col("layout") == "transposed_view")["reshape_copied"].all()
    counter = checks["implicit_computation_counterexamples"]
    assert counter.severity == dg.AssetCheckSeverity.WARN and (counter.metadata["findings"].value == 0) == bool(
        implicit["bit_equal"].all()
    )

    # CPU-specific: what the CPU backend measured (Inductor's C++ kernels).
    if smoke_resources["settings"].torch_device().type != "cpu":
        pytest.skip("CPU-specific: D's verdict and the scalar-scale counterexample measured on the CPU backend")
    # Pure data movement never changed a value here: every element equal (NaN==NaN), 0 ULP.
    assert (pure["ulp_max"] == 0).all() and value_changed.height == 0
    assert bit.passed and bit.metadata["verdict"].value == SUPPORTED
    assert reshape["bit_equal"].all()
    # bf16 RoPE: eager negation canonicalizes a NaN's payload; measured op by op, the cause is aten.neg on the eager path.
    assert set(excused["cause_op"]) <= {"aten.neg.default"} and set(excused["cause_path"]) <= {"eager"}
    # The scalar-scale chain double-rounds in eager but not in the fused kernel for fp16.
    scaled = implicit.filter((pl.col("subgraph") == "scaled_add_concat") & (pl.col("dtype") == "float16")).row(
        0, named=True
    )
    assert not scaled["bit_equal"] and scaled["ulp_max"] > 0
    assert counter.metadata["findings"].value > 0 and "scaled_add_concat/float16" in counter.metadata["details"].value


# --- the plain functions behind the asset, without Dagster ------------------------------------------


def test_bit_sample_names_the_path_that_departs_from_the_bitwise_result():
    from pipeline.experiments.data_movement.movement import _bit_sample

    # fp16 1.0 is 0x3c00; negation must give 0xbc00: here the fused path kept the input's bits.
    text, departs = _bit_sample("neg", 0x3C00, 0xBC00, 0x3C00, 2)
    assert text == "input 0x3c00, eager 0xbc00, fused 0x3c00, bitwise expectation 0xbc00" and departs == {"fused"}
    # A copy keeps the bits: both paths departing are both named.
    assert _bit_sample("cat", 0x7E01, 0x7E00, 0x7E02, 2)[1] == {"eager", "fused"}
    # No bitwise expectation for arithmetic, or without the input.
    assert _bit_sample("add", 0x3C00, 0x4000, 0x4001, 2) == ("input 0x3c00, eager 0x4000, fused 0x4001", set())
    assert _bit_sample("neg", None, 0x1, 0x2, 4) == ("eager 0x00000001, fused 0x00000002", set())


def test_compare_combination_of_a_pure_graph():
    seeds = []

    def derived_seed(*parts):
        seeds.append(parts)
        return 7

    graph = CATALOGUE["transpose_concat"]
    inputs = data_movement.combination_inputs(
        graph, "float32", (1, 3, 4), "contiguous", derived_seed, torch.device("cpu")
    )
    assert seeds == [("movement", "float32", (1, 3, 4), "contiguous", True, s) for s in ("x", "y")]
    assert bit_equal(inputs[0], movement_input((1, 3, 4), torch.float32, "contiguous", 7, specials=True))
    row, localized = data_movement.compare_combination(
        "transpose_concat", "float32", (1, 3, 4), "contiguous", inputs, "inductor", {}, True
    )
    assert not localized and row["cause_op"] is None and row["reshape_copied"] is None
    assert (row["shape"], row["bit_equal"], row["ulp_max"], row["mismatched_elements"]) == ("1x3x4", True, 0, 0)
    assert row["kernel_count"] >= 1 and row["graph_breaks"] == 0
    assert row["notes"] == f"bit-exact; {graph.explanation}"


def _zero_minus(t: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(t) - t


def _zero_minus_backend(gm: torch.fx.GraphModule, example_inputs):
    """Negation as ``0 - x``, the way Triton's unary minus lowers it: +0.0 stays +0.0."""
    import operator

    negations = {operator.neg, torch.neg, torch.ops.aten.neg.default, "neg"}
    for node in list(gm.graph.nodes):
        if node.target in negations and node.op in ("call_function", "call_method"):
            with gm.graph.inserting_after(node):
                sub = gm.graph.call_function(_zero_minus, (node.args[0],))
            node.replace_all_uses_with(sub)
            gm.graph.erase_node(node)
    gm.recompile()
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs)


def test_a_sign_of_zero_mismatch_is_named_and_localized_to_the_negation():
    # Measured on an H200 (torch 2.11, Triton 3.6): rope_rotate_half's fused +0.0 where eager has
    # -0.0. The same lowering, planted on the CPU, must be counted, named and traced to neg.
    torch._dynamo.reset()
    torch._dynamo.register_backend(name="zero_minus_test", compiler_fn=_zero_minus_backend)
    x = torch.linspace(-1, 1, 2 * 8 * 16, dtype=torch.float32).reshape(2, 8, 16)
    x[0, 0, 9] = 0.0  # negated by rotate-half (second half of the last dimension)
    x[1, 3, 12] = -0.0  # 0 - (-0.0) is +0.0, as eager's negation: no mismatch
    row, localized = data_movement.compare_combination(
        "rope_rotate_half", "float32", (2, 8, 16), "contiguous", (x, x.clone()), "zero_minus_test", {}, True
    )
    assert row["bit_equal"] is False and row["ulp_max"] == 0
    assert row["mismatched_elements"] == 2 and row["signed_zero_mismatches"] == 2  # q and k
    assert "zero whose sign differs" in row["notes"]
    assert localized and row["cause_op"] == "aten.neg.default"
    assert "fused" in row["cause_path"]


def test_d_compiles_on_a_process_per_core_where_it_runs_alone_and_on_one_beside_other_work():
    from pipeline.experiments.data_movement.spec import SIZES

    assert SIZES["default"].compile_bound  # the default report's D: 138.6 s on one process, 81.5 s on two
    assert not SIZES["smoke"].compile_bound  # the tests and the planted-bug matrix run D beside other work


def test_rows_the_compiler_did_not_fuse_are_a_finding_and_not_judged():
    # OpenVINO compiles a transpose and a concatenation as runtime nodes of their own: measured, not fused.
    why = "not fused by OpenVINO: put each of the graph's 3 operations in a unit of its own: nothing was fused"
    crashed = "compile failed with OpenVINO: IndexError: list index out of range"
    table = _table(
        [
            {"not_fused": why, "bit_equal": False, "mismatched_elements": 1, "nan_encoding_mismatches": 0},
            {"subgraph": "rope_rotate_half", "not_fused": crashed, "bit_equal": None, "ulp_max": None},
            {"subgraph": "full_two_concats", "not_fused": None},
        ]
    )
    claim = d_checks.pure_movement_rows_bit_exact(table)  # the unfused row's changed value is not the claim's
    assert claim.metadata["verdict"].value == SUPPORTED and claim.metadata["pure_rows_not_fused"].value == 2
    assert "2 pure rows not fused by the compiler, not judged" in claim.metadata["reason"].value
    finding = d_checks.movement_rows_not_fused(table)
    assert finding.passed and finding.metadata["findings"].value == 2
    assert finding.metadata["not_compiled"].value == 1
    assert f"transpose_concat/float16/1x3x8/contiguous: {why} (not bit-exact)" in finding.metadata["details"].value
    none_fused = d_checks.pure_movement_rows_bit_exact(_table([{"not_fused": why}]))
    assert none_fused.metadata["verdict"].value == INCONCLUSIVE


def test_a_run_narrowed_to_some_subgraphs_plans_those(monkeypatch):
    from pipeline.cli.run_report import selection_problem
    from pipeline.experiment import SELECT_ENV, parse_selection, selected_parts

    shapes = SIZES["smoke"].shapes
    assert len(data_movement.compile_plan(shapes)) == SIZES["smoke"].compiles  # unchanged without a selection
    narrowed = data_movement.compile_plan(shapes, ("transpose_concat", "scaled_add_concat"))
    assert len(narrowed) == 3 * len(shapes) * 2 + 3 and {c[0] for c in narrowed} == {
        "transpose_concat",
        "scaled_add_concat",
    }
    assert parse_selection("B:softmax D:a,b") == {"B": ("softmax",), "D": ("a", "b")}
    assert selection_problem("B:softmax D:transpose_concat") is None
    assert selection_problem("D:no_such").startswith("--select D: no part 'no_such'; D has transpose_concat, ")
    assert selection_problem("C2:x") == "--select: 'C2' is no experiment that runs in parts (those that do: D, B)"
    monkeypatch.setenv(SELECT_ENV, "B:softmax D:scaled_add_concat")
    assert selected_parts("D") == ("scaled_add_concat",) and selected_parts("C2") is None
