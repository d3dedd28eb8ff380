"""The report's pages: overview (claim -> evidence), one page per experiment, toolkit page."""

from typing import Callable

import polars as pl

from .charts import CHARTS
from .claims import CLAIM_EVIDENCE, EXPERIMENTS, SECTIONS, Experiment
from .render import Report, experiment_header, markdown_table, outcome_cells


#: Tables longer than this are not printed on the page (only described).
LONG_TABLE_ROWS = 120


def overview(report: Report) -> str:
    by_id = {e.id: e for e in EXPERIMENTS}
    lines = [
        "# Fusion precision report\n",
        "Does automatic operator fusion change numerics, and is it worse than eager execution? "
        "Each row below is a claim of the main document, the experiment that gives it evidence, and "
        "three separate outcomes of that experiment's latest materialization: whether the run was *valid* "
        "(it did what it claims: fused with evidence, inputs as recorded, nothing non-finite where the plan says "
        "finite), the claim's *verdict* (supported / contradicted / inconclusive, by a rule stated before the "
        "data: threshold, confidence, sample size, shown on each page) and how many *findings* a human should "
        "read. An invalid run is never shown as a verdict on the claim.\n",
        f"Profile **{report.profile}**, device **{report.device}**. Experiments that were not "
        "materialized with this profile are marked *not yet run*.\n",
        "| claim | main document | evidence | run validity | verdict | findings |",
        "|---|---|---|---|---|---|",
    ]
    for section_key, exp_ids in CLAIM_EVIDENCE:
        section = SECTIONS[section_key]
        for exp_id in exp_ids:
            exp = by_id[exp_id]
            validity, verdict, findings = outcome_cells(report, exp.group)
            lines.append(
                f"| {section.claim} | {report.section_link(section_key, from_results=False)} | "
                f"[{exp.id}: {exp.title}](results/{exp.slug}.md) | {validity} | {verdict} | {findings} |"
            )
    if not report.device.startswith("cuda"):
        lines.append(
            "!!! note \"Measured on the CPU only\"\n    Every number here comes from the CPU: the fused path is "
            "Inductor's generated C++. The same pipeline runs on CUDA (Triton kernels) with "
            "`device: cuda`, but no GPU result is part of this build, so nothing here says how fusion "
            "behaves on a GPU.\n"
        )
    lines.append("\n## Experiments\n")
    lines.append("| experiment | asset group | run validity | verdict | findings |\n|---|---|---|---|---|")
    for exp in EXPERIMENTS:
        validity, verdict, findings = outcome_cells(report, exp.group)
        lines.append(f"| [{exp.id}: {exp.title}](results/{exp.slug}.md) | `{exp.group}` | {validity} | {verdict} | {findings} |")
    lines.append("\nDefinitions of every statistic are on the [methodology](methodology.md) page.\n")
    return "\n".join(lines)


def experiment_page(report: Report, exp: Experiment) -> str:
    parts = [experiment_header(report, exp)]
    if not any(a.materialized for a in report.assets_of(exp.group)):
        return parts[0]
    builder: Callable[[Report, Experiment], str] | None = CHARTS.get(exp.id)
    if builder is not None:
        parts.append(builder(report, exp))
    parts.append("## Stored tables\n")
    for asset in report.assets_of(exp.group):
        table = report.table(asset.key)
        if not isinstance(table, pl.DataFrame):
            continue
        if table.height > LONG_TABLE_ROWS:  # per-run / per-set logs: summarized above, kept on disk
            body = f"_{table.height} rows x {table.width} columns; stored as `{asset.key}.parquet` in the data folder._\n"
        else:
            body = markdown_table(table)
        parts.append(f"### `{asset.key}`\n\n{asset.description}\n\n{body}")
    return "\n".join(parts)


def all_pages(report: Report) -> dict[str, str]:
    pages = {"index.md": overview(report)}
    for exp in EXPERIMENTS:
        pages[f"results/{exp.slug}.md"] = experiment_page(report, exp)
    return pages
