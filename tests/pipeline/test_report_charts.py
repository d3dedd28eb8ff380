"""The report's chart, table and history builders on tiny tables, without Dagster: each returns
the frame or Vega-Lite spec a page embeds."""

import datetime as dt

import dagster as dg
import polars as pl
import pytest

from pipeline.experiments.accumulated_error import report as b_report
from pipeline.experiments.data_movement import report as d_report
from pipeline.experiments.determinism import report as a_report
from pipeline.experiments.reduction_order import report as c2_report
from pipeline.experiments.training import report as e_report
from pipeline.instruments.diagnostics import report as diag_report
from pipeline.reporting.history import Point, figure_chart, glance_table, run_labels, verdict_timeline
from pipeline.scalars import as_number


def _values(spec: dict) -> list[dict]:
    """The rows of a spec's single inline dataset."""
    (rows,) = spec["datasets"].values()
    return rows


def test_as_number_names_the_empty_aggregate():
    assert as_number(pl.Series([3, 1]).max(), "x") == 3
    assert as_number(pl.Series([0.5, 2.5]).min(), "x") == 0.5
    with pytest.raises(ValueError, match="fused p99: expected a number, got None"):
        as_number(pl.Series([], dtype=pl.Float64).min(), "fused p99")


def test_c2_worst_row_counts_nan_margin_as_largest_and_formulas_drop_the_tile_size():
    bounds = pl.DataFrame(
        {
            "version": ["eager", "eager", "tile64"],
            "family": ["fp32_acc", "fp32_acc", "fp16_partials"],
            "output": ["out16", "out16", "out16"],
            "chain": [4095, 4095, 126],
            "row": [0, 1, 0],
            "abs_ref": [1.0, 2.0, 3.0],
            "abs_sum": [4.0, 5.0, 6.0],
            "partial_abs_sum": [None, None, 6.5],
            "error": [0.1, 0.2, 0.3],
            "bound": [1.0, 0.0, 1.0],
            "margin": [0.1, float("nan"), 0.3],
            "margin_prob": [0.2, float("nan"), 0.6],
            "bound_formula": ["u16|s| + gamma_c", "u16|s| + gamma_c", "E_p + gamma, b = 64"],
        }
    )
    worst = c2_report.c2_worst_rows(bounds)
    assert worst["version"].to_list() == ["tile64", "eager"]  # family order: fp16_partials < fp32_acc
    assert worst.filter(pl.col("version") == "eager")["row"].item() == 1
    assert worst.columns[4:7] == ["abs_s", "sum_abs_x", "sum_abs_partials"]
    formulas = c2_report.c2_bound_formulas(bounds)
    assert formulas.rows() == [
        ("fp32_acc", "out16", "4095", "u16|s| + gamma_c"),
        ("fp16_partials", "out16", "126", "E_p + gamma"),
    ]


def test_a_summary_table_cuts_the_hash_columns_to_16_digits():
    summary = pl.DataFrame(
        {
            "dtype": ["float16"],
            "round": ["round1"],
            "threads": [1],
            "run_count": [5],
            "unique_output_hashes": [1],
            "max_ulp_diff_across_runs": [0],
            "code_sha256": ["0123456789abcdef" * 4],
            "kernel_hash_equal_across_cold_start": ["yes"],
            "artifact_sha256": ["fedcba9876543210" * 4],
            "artifact_hash_equal_across_cold_start": ["reference (H_k0)"],
            "outputs_equal_round1": ["yes"],
            "ms_per_run": [1.5],
            "kernel_count": [2],
            "recompiles": [0],
        }
    )
    table = a_report.a_summary_table(summary)
    assert "ms_per_run" not in table.columns
    assert table["code_sha256"].item() == "0123456789abcdef"
    assert table["artifact_sha256"].item() == "fedcba9876543210"
    assert table["artifact_hash_equal_across_cold_start"].item() == "reference (H_k0)"
    spec = a_report.a_hashes_chart(summary).to_dict()
    assert [(r["outcome"], r["label"]) for r in _values(spec)] == [("1 hash, equal to round 1", "5 runs / 1 hash")]


def test_d_chart_counts_bit_exact_rows_per_subgraph_and_dtype():
    table = pl.DataFrame(
        {
            "subgraph": ["concat", "concat", "concat"],
            "dtype": ["float16", "float16", "float32"],
            "has_implicit_computation": [False, False, True],
            "bit_equal": [True, False, True],
            "ulp_max": [0, 2, 0],
        }
    )
    rows = sorted(_values(d_report.d_bit_exact_chart(table).to_dict()), key=lambda r: r["dtype"])
    assert [(r["dtype"], r["label"], r["bit_exact_share"], r["kind"]) for r in rows] == [
        ("float16", "1/2", 0.5, "pure data movement"),
        ("float32", "1/1", 1.0, "hides arithmetic"),
    ]


def test_e_judged_points_and_deviation_caption():
    deviation = pl.DataFrame(
        {
            "precision": ["bfloat16"] * 4 + ["float32"],
            "metric": ["eval_loss", "eval_loss", "eval_loss", "train_loss", "eval_loss"],
            "judged": [True, True, False, True, True],
            "step": [20, 10, 0, 10, 10],
            "paired_mean_diff": [0.0012, None, None, 0.5, 0.3],
            "paired_sd_diff": [0.0004, None, None, 0.1, None],
        }
    )
    main, ev = e_report.e_judged_eval(deviation)
    assert main == "bfloat16"
    assert ev["step"].to_list() == [10, 20]
    assert e_report.e_deviation_caption(ev).endswith(
        "at the last point fused - eager averages +0.0012 (sd 0.0004) over the data orders"
    )
    assert e_report.e_deviation_caption(ev.head(1)).endswith("relative to eager")


def test_e_rule_table_ends_with_the_result_only_when_judged():
    assert e_report.e_rule_table()["parameter"].to_list()[-1] == "finding"
    judged = e_report.e_rule_table("supported: all tests equivalent")
    assert judged.row(-1) == ("result", "supported: all tests equivalent")


def test_b_switch_list_rows_and_the_empty_case():
    text = b_report.b_switch_list({"keep_out_of_fusion": {"float16": ["gelu", "mul"]}, "watch": {}, "note": "N."})
    assert "| float16 | gelu, mul | keep out of fusion (contradicted) |" in text
    assert text.startswith("## Fusion switch list (§6.1)\n\nN.\n\n| dtype | op types | action |")
    assert b_report.b_switch_list({}).endswith("Nothing to switch off.\n")


def test_tolerance_chart_diagonal_spans_both_columns():
    tol = pl.DataFrame(
        {
            "atol": [0.0, 1e-3, 4e-2],
            "matrix_atol": [1e-4, 1e-2, 2e-3],
            "op_class": ["a", "b", "c"],
            "dtype": ["float16"] * 3,
            "reduction_size": [1, 64, 4096],
            "ratio": [0.0, 0.1, 20.0],
            "verdict": ["ok", "ok", "too tight"],
        }
    )
    spec = diag_report.tolerance_chart(tol).to_dict()
    diagonal = [rows for rows in spec["datasets"].values() if list(rows[0]) == ["x"]]
    assert diagonal == [[{"x": 1e-3}, {"x": 4e-2}]]  # the atol == 0 row is left out


# --- history -------------------------------------------------------------------------------------


def _point(run_id: str, minute: int, verdict: str = "supported", **figures: float) -> Point:
    when = dt.datetime(2026, 1, 2, 3, minute, tzinfo=dt.UTC)
    return Point(when, verdict, "c" * 12, "2.9", run_id, dict(figures))


def test_run_labels_order_runs_by_recorded_start_else_earliest_point():
    key = dg.AssetCheckKey(dg.AssetKey("t"), "claim")
    histories = [("C3", key, [_point("r1", 10), _point("r2", 20)]), ("D", key, [_point("r2", 5)])]
    assert run_labels(histories, {}) == {"r2": "01-02 03:05:00", "r1": "01-02 03:10:00"}
    late = dt.datetime(2026, 1, 2, 4, 0, tzinfo=dt.UTC)
    assert run_labels(histories, {"r2": late}) == {"r1": "01-02 03:10:00", "r2": "01-02 04:00:00"}


def test_history_charts_and_glance_from_plain_points():
    key = dg.AssetCheckKey(dg.AssetKey("t"), "toy_claim")
    points = [_point("r1", 1, worst=0.5), _point("r2", 2, "contradicted", worst=3.0)]
    histories = [("C3", key, points)]
    labels = run_labels(histories, {})
    timeline = verdict_timeline(histories, labels).to_dict()
    assert [r["verdict"] for r in _values(timeline)] == ["supported", "contradicted"]
    assert timeline["encoding"]["x"]["sort"] == ["01-02 03:01:00", "01-02 03:02:00"]
    figures = figure_chart(histories, labels)
    assert figures is not None
    assert [r["value"] for r in _values(figures.to_dict())] == [0.5, 3.0]
    assert figure_chart([("C3", key, [_point("r1", 1)])], labels) is None
    glance = glance_table(histories, "--gpu")
    assert "| [C3](rsqrt-iterations--gpu.md) | `toy_claim` | 2 |" in glance
    assert "verdict supported → contradicted; worst 0.5 → 3" in glance


def test_vendored_bundle_is_built_once_per_vl_convert_version(tmp_path):
    import vl_convert as vlc

    from pipeline.reporting.site import vendor_javascript

    cache = tmp_path / "cache"
    vendor_javascript(tmp_path / "docs_a", cache_dir=cache)
    built = (tmp_path / "docs_a" / "assets" / "vendor" / "vega-bundle.js").read_text()
    assert "vegaEmbed" in built
    cached = cache / f"vega-bundle-{vlc.__version__}.js"
    assert cached.read_text() == built
    # A later site copies the cached file instead of bundling again.
    cached.write_text("// cached bundle")
    vendor_javascript(tmp_path / "docs_b", cache_dir=cache)
    assert (tmp_path / "docs_b" / "assets" / "vendor" / "vega-bundle.js").read_text() == "// cached bundle"


def _line_marks(chart) -> list[tuple[str, list[float]]]:
    """Each line mark the chart renders (vl-convert's SVG): its label and the x of its points."""
    import re

    import vl_convert as vlc

    svg = vlc.vegalite_to_svg(chart.to_json())
    marks = re.findall(
        r'<path aria-label="([^"]*)" role="graphics-symbol" aria-roledescription="line mark" d="([^"]*)"', svg
    )
    return [(label, [float(x) for x in re.findall(r"[ML](-?[\d.]+),", d)]) for label, d in marks]


def test_b_cdf_panels_keep_their_lines_when_every_set_is_exact():
    """fp16's sets all exact (error 0) beside bf16's 0.5 to 3 sULP: each panel has a line per path,
    and bf16's spread over the axis. On a log axis zero has no place: the panel lost its marks and
    its neighbour collapsed onto one x."""
    rows = pl.DataFrame(
        {
            "chain": ["softmax"] * 8,
            "distribution": ["normal"] * 8,
            "dtype": ["float16"] * 4 + ["bfloat16"] * 4,
            "path": ["eager", "eager", "fused", "fused"] * 2,
            "bin_hi": [0.0, 0.0, 0.0, 0.0, 0.5, 2.0, 0.5, 3.0],
            "cdf": [0.5, 1.0, 0.5, 1.0] * 2,
        }
    )
    marks = _line_marks(b_report.b_cdf_chart(rows, "softmax", ["normal"]))
    assert len(marks) == 4  # (dtype x path), every panel drawn
    zero = [xs for label, xs in marks if "dtype: float16;" in label]
    spread = [xs for label, xs in marks if "dtype: bfloat16;" in label]
    assert len(zero) == 2 and all(set(xs) == {0.0} for xs in zero)
    assert len(spread) == 2 and all(max(xs) > min(xs) > 0 for xs in spread)
