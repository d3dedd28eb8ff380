"""Pieces every experiment page uses: the deliverable opening, dropdown parameters, shared colours."""

import altair as alt
import polars as pl

from ..experiment import Experiment

#: Colours shared by every eager-vs-fused chart.
PATH_COLORS = alt.Scale(domain=["eager", "fused", "fused_emulate"], range=["#1f77b4", "#d62728", "#ff9896"])


PATH_DASHES = alt.Scale(domain=["eager", "fused", "fused_emulate"], range=[[1, 0], [6, 3], [2, 2]])


def error_scale(*columns: pl.Series) -> alt.Scale:
    """An axis for errors that spans binades and keeps zero: symmetric log, linear below the
    smallest positive value in ``columns`` (so an exact result, error 0, is drawn at 0 instead of
    being dropped, as a log axis drops it), logarithmic above."""
    positive = [float(c.filter(c > 0).min()) for c in columns if c.len() and (c > 0).any()]  # type: ignore[arg-type]
    return alt.Scale(type="symlog", constant=min(positive) if positive else 1.0)


def opening(exp: Experiment, body: str) -> str:
    return f"## Deliverable\n\n*Test plan:* {exp.plan_deliverable}.\n\n{body}\n"


def select(name: str, options: list[str], label: str) -> alt.Parameter:
    """A variable parameter bound to a dropdown: one chart shows one of many combinations."""
    return alt.param(name=name, value=options[0], bind=alt.binding_select(options=options, name=label))


def ulp_bars(table: pl.DataFrame, title: str, columns: int = 2) -> alt.FacetChart:
    order = table["ulp"].unique(maintain_order=True).to_list()
    return (
        alt.Chart(table)
        .mark_bar()
        .encode(
            x=alt.X("ulp:N", sort=order, title="ULP distance"),
            y=alt.Y("fraction:Q", axis=alt.Axis(format="%"), title="share of elements"),
            tooltip=["comparison", "ulp", "count", alt.Tooltip("fraction:Q", format=".4%")],
        )
        .properties(width=220, height=140)
        .facet(
            facet=alt.Facet("comparison:N", title=None, sort=table["comparison"].unique(maintain_order=True).to_list()),
            columns=columns,
        )
        .properties(title=title)
    )
