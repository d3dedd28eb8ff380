"""M's checks: the run's validity, the claim per model x dtype under :data:`.rules.RULE`, and two
findings: where ``same()`` and the rule disagree, and the graph breaks per model."""

import dagster as dg
import polars as pl

from ...resources import ExperimentSettings
from ...tables import markdown_table
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    claim_check,
    claim_result,
    combine,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from .judge import INVALID
from .rules import RULE
from .spec import ID


@validity_check(
    asset="model_verdicts",
    name="model_runs_valid",
    required_resource_keys={"settings"},
    description="The M run did what it claims: every model x dtype that compiled ran every batch eager, fused and "
    "in fp64, and eager is finite wherever fp64 is. A model x dtype the compiler could not compile or fuse is the "
    "compiler's finding (models_not_compiled) and is not judged; a run in which none compiled is invalid, with the "
    "compiler's reason.",
)
def model_runs_valid(context: dg.AssetCheckExecutionContext, model_verdicts: pl.DataFrame) -> dg.AssetCheckResult:
    settings: ExperimentSettings = context.resources.settings
    batches = settings.sizes(ID).batches
    failed = model_verdicts.filter(pl.col("error") != "")
    problems = []
    if model_verdicts.height and failed.height == model_verdicts.height:
        problems.append(f"no model x dtype compiled: {failed['model'][0]} {failed['dtype'][0]}: {failed['error'][0]}")
    short = model_verdicts.filter((pl.col("error") == "") & (pl.col("batches") != batches))
    problems += [f"{r['model']} {r['dtype']}: {r['batches']} of {batches} batches" for r in short.iter_rows(named=True)]
    eager_bad = model_verdicts.filter(pl.col("eager_nonfinite") > 0)
    problems += [
        f"{r['model']} {r['dtype']}: eager is non-finite where fp64 is finite ({r['eager_nonfinite']} elements)"
        for r in eager_bad.iter_rows(named=True)
    ]
    if model_verdicts.height == 0:
        problems.append("no model ran")
    return validity_result(
        problems, {"models_x_dtypes": model_verdicts.height, "batches_each": batches, "not_compiled": failed.height}
    )


@claim_check(
    rule=RULE,
    asset="model_verdicts",
    name="fused_not_worse_than_eager_on_models",
    description="M: on real architectures (and the user's workloads), fused inference error against fp64 is no worse "
    "than eager's, per model x dtype (P99 of per-unit scale-aware ULP error, paired bootstrap, Holm over the table; "
    "float elements whose class (NaN, +-inf, +-0) differs from eager's where eager has fp64's, or integer and bool "
    "elements that differ from eager's where fp64 does not side with fused, contradict).",
)
def fused_not_worse_than_eager_on_models(model_verdicts: pl.DataFrame) -> dg.AssetCheckResult:
    judged = model_verdicts.filter(pl.col("verdict") != INVALID)
    if judged.height == 0:
        return claim_result(INCONCLUSIVE, RULE, "no model x dtype ran validly")
    verdict = combine(judged["verdict"].to_list())
    deciding = judged.filter(pl.col("verdict") == verdict)
    names = ", ".join(
        f"{r['model']} {r['dtype']}"
        + (f" (first divergent module: {r['first_divergent_module']})" if r["first_divergent_module"] else "")
        for r in deciding.iter_rows(named=True)
    )
    reason = {
        CONTRADICTED: f"fused is worse than eager on {names}",
        SUPPORTED: f"fused is within the rule on every model x dtype judged ({judged.height})",
        INCONCLUSIVE: f"not enough evidence either way on {names}",
    }[verdict]
    if unjudged := model_verdicts.height - judged.height:  # a verdict over fewer rows than planned says so
        reason += f"; {unjudged} of {model_verdicts.height} not judged (models_not_compiled, model_runs_valid)"
    table = judged.select(
        "model",
        "dtype",
        "units",
        "eager_p99",
        "fused_p99",
        "difference",
        "ci_upper",
        "p_holm",
        "fused_nonfinite",
        "integer_mismatches",
        "class_differences",
        "verdict",
        "first_divergent_module",
    )
    meta = {
        "rows_judged": judged.height,
        **{f"rows_{v}": int((judged["verdict"] == v).sum()) for v in (SUPPORTED, CONTRADICTED, INCONCLUSIVE)},
        "first_divergent_modules": ", ".join(sorted({m for m in deciding["first_divergent_module"].to_list() if m})),
        "table": dg.MetadataValue.md(markdown_table(table)),
    }
    return claim_result(verdict, RULE, reason, meta)


@finding_check(
    asset="model_verdicts",
    name="same_and_rule_disagree",
    description="M: the models x dtypes where torch._dynamo.utils.same (PyTorch's accuracy check) and M's rule reach "
    "different answers, and why.",
)
def same_and_rule_disagree(model_verdicts: pl.DataFrame) -> dg.AssetCheckResult:
    rows, findings = _rows_saying(model_verdicts, "disagreement")
    same_failed = int((model_verdicts["same_verdict"] == "fail").sum())
    return finding_result(findings, {"same_failed": same_failed, "disagreements": rows.height})


@finding_check(
    asset="model_verdicts",
    name="models_not_compiled",
    description="M: the models x dtypes the compiler failed to compile, or compiled without fusing anything, each "
    "with its reason: they are not judged, and the claim's verdict counts only the others.",
)
def models_not_compiled(model_verdicts: pl.DataFrame) -> dg.AssetCheckResult:
    failed, findings = _rows_saying(model_verdicts, "error")
    return finding_result(findings, {"not_compiled": failed.height, "models_x_dtypes": model_verdicts.height})


def _rows_saying(model_verdicts: pl.DataFrame, column: str) -> tuple[pl.DataFrame, list[str]]:
    """The rows whose ``column`` holds a text, and one finding per row: "<model> <dtype>: <text>"."""
    rows = model_verdicts.filter(pl.col(column) != "")
    return rows, [f"{r['model']} {r['dtype']}: {r[column]}" for r in rows.iter_rows(named=True)]


@finding_check(
    asset="model_verdicts",
    name="model_graph_breaks",
    description="M: models whose fused path broke the graph (it still compiled, in several graphs; the compiled "
    "pieces are what the verdict judges), with the reasons Dynamo gave.",
)
def model_graph_breaks(model_verdicts: pl.DataFrame) -> dg.AssetCheckResult:
    broken = model_verdicts.filter(pl.col("graph_breaks").fill_null(0) > 0)
    findings = [
        f"{r['model']} {r['dtype']}: {r['graph_breaks']} break(s), {r['graph_count']} graphs ({r['break_reasons']})"
        for r in broken.iter_rows(named=True)
    ]
    return finding_result(findings, {"models_with_breaks": broken["model"].n_unique() if broken.height else 0})
