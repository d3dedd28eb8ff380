"""Compilers side by side: one copy of a device's report per compiler with results there, so the overview's
answer and claims table and each experiment page show every compiler's verdict in the same vocabulary.
With one compiler the pages stay as they were (no copies are made)."""

import dagster as dg

from .. import runs
from ..compilers import compiler_title, outcomes_by_compiler
from ..experiment import Experiment
from ..pagekit.render import Report
from ..runs import DEFAULT_BACKEND
from .outcomes import outcome_cells


def compilers_with_results(defs: dg.Definitions, instance: dg.DagsterInstance, profile: str) -> list[str]:
    """The compilers with results under ``profile`` made here: a stored outcome (an evaluation or a failed
    step, :func:`pipeline.compilers.outcomes_by_compiler`) or a materialization of an experiment's asset
    (whose checks may not have run yet when the report renders in the same run); Inductor first, then
    by name."""
    found = {backend for backend, _ in outcomes_by_compiler(defs, instance, profile)}
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        if graph.get(key).group_name == "report":
            continue
        for _, _, meta in runs.materializations(instance, key, limit=20):
            if runs.matches(meta, profile, origin="local"):
                found.add(str(meta.get("provenance.backend") or DEFAULT_BACKEND))
    return sorted(found, key=lambda b: (b != DEFAULT_BACKEND, b))


def compiler_reports(report: Report, backends: list[str]) -> list[Report]:
    """One report per compiler of ``backends`` when there are several, else none (the pages stay as a
    single compiler's)."""
    return [report.for_compiler(b) for b in backends] if len(backends) > 1 else []


def title(report: Report) -> str:
    """A column's name: the compiler's title and the device (``OpenVINO · cpu``)."""
    device = report.device_label or report.device
    return f"{compiler_title(report.compiler or DEFAULT_BACKEND)} · {device}"


def verdict_cell(report: Report, group: str) -> str:
    """One compiler's cell in a claims table: its verdict; an invalid run's says so, never a verdict."""
    return outcome_cells(report, group)[1]


def claims_header(report: Report, first: tuple[str, ...]) -> list[str]:
    """A table header with ``first`` columns and one column per compiler."""
    names = [*first, *(title(r) for r in report.compilers)]
    return ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]


def compilers_section(report: Report, exp: Experiment) -> str:
    """An experiment page's table of compilers side by side (empty with one compiler): run validity,
    verdict and findings per compiler, from each compiler's own stored records."""
    if not report.compilers:
        return ""
    lines = [
        "## Compilers side by side\n",
        "This experiment's outcome for each compiler with results here, each from its own latest records.\n",
        "| compiler · device | run validity | verdict | findings |",
        "|---|---|---|---|",
    ]
    for r in report.compilers:
        validity, verdict, findings = outcome_cells(r, exp.group)
        lines.append(f"| {title(r)} | {validity} | {verdict} | {findings} |")
    return "\n".join(lines) + "\n"
