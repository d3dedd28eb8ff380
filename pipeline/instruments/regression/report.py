"""Regression: the report page's sections, built from stored values only."""

import polars as pl

from ...experiment import Experiment
from ...pagekit.render import Report, markdown_table
from .rules import BUG_ROW, HEALTHY_ROW, SCORING


def details(report: Report, exp: Experiment) -> str:
    parts = []
    comparison = report.table("baseline_comparison")
    if comparison is not None:
        moved_flag = pl.col("moved") == "yes"
        per_exp = (
            comparison.group_by("experiment")
            .agg(pl.len().alias("items"), moved_flag.sum().alias("moved"))
            .sort("experiment")
        )
        moved = comparison.filter(moved_flag)
        parts.append(
            "## Latest comparison with the promoted baseline\n\n"
            + markdown_table(per_exp)
            + "\n### What moved\n\n"
            + (markdown_table(moved) if moved.height else "Nothing moved.\n")
        )
    matrix = report.table("planted_bug_matrix")
    if matrix is not None:
        bugs = matrix.filter(pl.col("row") == BUG_ROW)
        healthy = matrix.filter(pl.col("row") == HEALTHY_ROW)
        caught = int((bugs["caught"] == "yes").sum())
        alarms = int(healthy["error_outcomes"].sum())
        parts.append(
            "## Planted-bug suite: every silent bug must fail at ERROR\n\n"
            f"**{caught} of {bugs.height} bugs caught at ERROR; {alarms} ERROR outcome(s) over {healthy.height} healthy "
            f"seeds.** Scoring: {SCORING}\n\n"
            "### Bug x caught at ERROR\n\n"
            + markdown_table(
                bugs.select(
                    "bug", "fault_class", "caught", "error_outcomes", "caught_by", pl.col("wall_seconds").round(1)
                )
            )
            + "\n### Healthy backend over several base seeds (false alarms)\n\n"
            + markdown_table(healthy.select("bug", "seed", "caught", "error_outcomes", pl.col("wall_seconds").round(1)))
            + "\n<details><summary>What each bug does</summary>\n\n"
            + markdown_table(bugs.select("bug", "description"))
            + "\n</details>\n"
        )
    return "\n".join(parts)
