"""D: the report page's sections, built from stored values only."""

import altair as alt
import polars as pl

from ...experiment import Experiment
from ...pagekit.blocks import opening
from ...pagekit.render import Report, fmt, markdown_table
from ...pagekit.repro_page import publish_repro
from .spec import repro_id


def _ulp_text(value: int | None) -> str:
    # The check table stores a non-finite mismatch as the largest int64.
    return "non-finite mismatch" if value is not None and value >= 2**62 else fmt(value)


def deliverable(report: Report, exp: Experiment) -> str:
    table = report.table("data_movement_check_table")
    if table is None:
        return ""
    kind = (
        pl.when(pl.col("has_implicit_computation"))
        .then(pl.lit("hides arithmetic"))
        .otherwise(pl.lit("pure data movement"))
    )
    cells = table.group_by("subgraph", "dtype", maintain_order=True).agg(
        kind.first().alias("kind"),
        (pl.col("bit_equal").sum().cast(pl.String) + " / " + pl.len().cast(pl.String)).alias("bit-exact"),
    )
    check = cells.pivot(on="dtype", index=["subgraph", "kind"], values="bit-exact", aggregate_function="first")
    bad = table.filter(~pl.col("bit_equal"))
    pure_bad = bad.filter(~pl.col("has_implicit_computation")).height

    # A list, not a table: each counterexample's explanation is prose.
    def repro_link(row: dict) -> str:
        link = publish_repro(report, repro_id(row["subgraph"], row["dtype"], row["shape"], row["layout"]))
        return f" [Reproducer and report]({link}/report.md) ([repro.py]({link}/repro.py))." if link else ""

    items = [
        f"- **{r['subgraph']}**, {r['dtype']}, shape {r['shape']}, {r['layout']}"
        f"{' (hides arithmetic)' if r['has_implicit_computation'] else ''}: "
        f"max ULP {_ulp_text(r['ulp_max'])}, {fmt(r['mismatched_elements'])} element(s) differ. {fmt(r['notes'])}"
        + (f" Cause: `{r['cause_op']}` ({fmt(r.get('cause_path'))})." if r.get("cause_op") else "")
        + repro_link(r)
        for r in bad.iter_rows(named=True)
    ]
    return opening(
        exp,
        (
            "### Check table\n\nBit-exact rows (shapes x layouts) of eager vs fused, per subgraph and dtype.\n\n"
            + markdown_table(check)
            + f"\n### Counterexamples\n\n**{bad.height}** row(s) not bit-exact, {pure_bad} of them pure data movement.\n\n"
            + ("\n".join(items) + "\n" if items else "None.\n")
        ),
    )


def details(report: Report, exp: Experiment) -> str:
    table = report.table("data_movement_check_table")
    if table is None:
        return ""
    notes = table.filter(~pl.col("bit_equal")).select(
        "subgraph",
        "dtype",
        "shape",
        "layout",
        "ulp_max",
        "mismatched_elements",
        "nan_encoding_mismatches",
        "signed_zero_mismatches",
        "cause_op",
        "cause_path",
        "notes",
    )
    rs = table.filter(pl.col("reshape_copied").is_not_null())
    reshape = (
        "\n## Reshape rows\n\n`reshape_copied`: whether the eager reshape returned a copy (a non-contiguous input) "
        "rather than a view, measured on the storage.\n\n"
        + markdown_table(
            rs.select("subgraph", "dtype", "shape", "layout", "reshape_copied", "bit_equal", "ulp_max", "kernel_count")
        )
    )
    return (
        report.chart(
            exp.slug, "check-table", d_bit_exact_chart(table), "Share of bit-exact rows per subgraph and dtype"
        )
        + "\n## Rows that are not bit-exact\n\n"
        + (markdown_table(notes) if notes.height else "None.\n")
        + reshape
    )


def d_bit_exact_chart(table: pl.DataFrame) -> alt.FacetChart:
    """Share of bit-exact rows per subgraph and dtype, pure data movement and hidden arithmetic apart."""
    agg = (
        table.group_by("subgraph", "dtype", "has_implicit_computation", maintain_order=True)
        .agg(
            pl.len().alias("rows"),
            pl.col("bit_equal").sum().alias("bit_exact_rows"),
            pl.col("ulp_max").max().alias("ulp_max"),
        )
        .with_columns(
            (pl.col("bit_exact_rows") / pl.col("rows")).alias("bit_exact_share"),
            (pl.col("bit_exact_rows").cast(pl.String) + "/" + pl.col("rows").cast(pl.String)).alias("label"),
            pl.when(pl.col("has_implicit_computation"))
            .then(pl.lit("hides arithmetic"))
            .otherwise(pl.lit("pure data movement"))
            .alias("kind"),
        )
    )
    base = alt.Chart(agg).encode(x=alt.X("dtype:N", title=None), y=alt.Y("subgraph:N", title=None))
    return (
        (
            base.mark_rect().encode(
                color=alt.Color(
                    "bit_exact_share:Q", title="bit-exact rows", scale=alt.Scale(scheme="redyellowgreen", domain=[0, 1])
                ),
                tooltip=["subgraph", "dtype", "rows", "bit_exact_rows", "ulp_max"],
            )
            + base.mark_text(fontSize=11).encode(text="label:N")
        )
        .properties(width=240, height=150)
        .facet(row=alt.Row("kind:N", title=None))
        .resolve_scale(y="independent")
        .properties(title="D: eager vs fused bit equality (rows: shapes x layouts)")
    )
