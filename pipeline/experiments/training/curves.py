"""What E computes from the stored curves: the deviation frame (every eval point against the
replicate envelope), its summary, the final-metric table and the problems that make a run invalid."""

import math
from typing import Any

import polars as pl

from .judge import TrainingJudgement, is_finite, judge_training, rms
from .rules import JUDGED_METRICS, REPLICATE_ORDERS
from .run_set import control_run, fused_run, replicate_run

#: Metrics compared between the paths; perplexity is exp(eval_loss), so it is only in the final table.
DEVIATION_METRICS = JUDGED_METRICS
FINAL_METRICS = ("train_loss", "eval_loss", "perplexity", "grad_norm")


def _series(curves: pl.DataFrame, run: str, metric: str) -> list[float | None]:
    return curves.filter(pl.col("run") == run).sort("step")[metric].to_list()


def _minus(x: float | None, y: float | None) -> float | None:
    """``x - y`` when both are finite, else None."""
    return x - y if is_finite(x) and is_finite(y) else None


def _mean_sd(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample sd of the finite values (sd None below two)."""
    vals = [v for v in values if is_finite(v)]
    if not vals:
        return None, None
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    return mean, sd


def _band(replicates: list[float | None]) -> dict[str, float | None]:
    """The eager runs' range over data orders at one eval point (None unless every one is finite)."""
    vals = [v for v in replicates if is_finite(v)]
    if len(vals) != len(replicates) or not vals:
        return dict.fromkeys(("replicate_min", "replicate_max", "replicate_spread"))
    return {"replicate_min": min(vals), "replicate_max": max(vals), "replicate_spread": max(vals) - min(vals)}


def deviation_frame(curves: pl.DataFrame, main: str) -> pl.DataFrame:
    """Per precision x metric x step: each data order's eager (``replicate_<o>``), fused and control
    values, the eager runs' range, order A's eager / fused / control, fused's and the control's
    difference from eager on order A, and the paired difference fused - eager averaged over the
    data orders (with its sd) and the control's.

    The data orders exist for the main precision only; the optional fp32 pair has order A alone."""
    runs = set(curves["run"].unique().to_list())
    needed = [n for o in REPLICATE_ORDERS for n in (replicate_run(main, o), fused_run(main, o), control_run(main, o))]
    missing = [r for r in needed if r not in runs]
    if missing:
        raise ValueError(f"the rule needs runs {', '.join(missing)}; curves hold {', '.join(sorted(runs))}")
    steps = [int(step) for step in curves.filter(pl.col("run") == replicate_run(main, "A")).sort("step")["step"]]
    rows = []
    for precision in curves["precision"].unique(maintain_order=True).to_list():
        orders = REPLICATE_ORDERS if precision == main else ("A",)
        if replicate_run(precision, "A") not in runs or fused_run(precision, "A") not in runs:
            continue
        for metric in DEVIATION_METRICS:
            eager = {o: _series(curves, replicate_run(precision, o), metric) for o in orders}
            fused = {o: _series(curves, fused_run(precision, o), metric) for o in orders}
            control = {
                o: _series(curves, control_run(precision, o), metric) if precision == main else [None] * len(steps)
                for o in orders
            }
            if any(len(c) != len(steps) for d in (eager, fused, control) for c in d.values()):
                raise ValueError(f"runs of {precision}/{metric} have different evaluation steps")
            for i, step in enumerate(steps):
                diffs = [_minus(fused[o][i], eager[o][i]) for o in orders]
                mean, sd = _mean_sd(diffs)
                rows.append(
                    {
                        "precision": precision,
                        "metric": metric,
                        "step": step,
                        "judged": step > 0,
                        **{f"replicate_{o}": eager[o][i] for o in REPLICATE_ORDERS if o in eager},
                        **{f"fused_{o}": fused[o][i] for o in REPLICATE_ORDERS if o in fused},
                        **{f"control_{o}": control[o][i] for o in REPLICATE_ORDERS if o in control},
                        "eager": eager["A"][i],
                        "fused": fused["A"][i],
                        "control": control["A"][i],
                        **_band([eager[o][i] for o in orders]),
                        "fused_minus_eager": _minus(fused["A"][i], eager["A"][i]),
                        "control_minus_eager": _minus(control["A"][i], eager["A"][i]),
                        "paired_mean_diff": mean,
                        "paired_sd_diff": sd,
                        "control_mean_diff": _mean_sd([_minus(control[o][i], eager[o][i]) for o in orders])[0],
                    }
                )
    return pl.DataFrame(rows, infer_schema_length=None)


def judge_frame(dev: pl.DataFrame, precision: str) -> TrainingJudgement:
    """:func:`.judge.judge_training` on one precision of :func:`deviation_frame`: fused and the one-ULP
    control, each paired with eager per data order."""
    metrics, controls = {}, {}
    steps: list[int] = []

    def curves_of(part: pl.DataFrame, role: str) -> dict[str, tuple[list[float | None], list[float | None]]]:
        """``(eager, <role>)`` per data order that has a ``<role>`` curve."""
        return {
            o: (part[f"replicate_{o}"].to_list(), part[f"{role}_{o}"].to_list())
            for o in REPLICATE_ORDERS
            if f"{role}_{o}" in part.columns and part[f"{role}_{o}"].null_count() < part.height
        }

    for metric in JUDGED_METRICS:
        part = dev.filter((pl.col("precision") == precision) & (pl.col("metric") == metric)).sort("step")
        if not part.height:
            continue
        steps = part["step"].to_list()
        metrics[metric] = curves_of(part, "fused")
        controls[metric] = curves_of(part, "control")
    return judge_training(steps, metrics, controls)


def final_differences(dev: pl.DataFrame, precision: str, metric: str = "eval_loss") -> tuple[list[float], list[float]]:
    """Per data order at the last step: fused - eager and control - eager (finite ones)."""
    part = dev.filter((pl.col("precision") == precision) & (pl.col("metric") == metric)).sort("step")
    if not part.height:
        return [], []
    last = part.row(part.height - 1, named=True)
    fused, control = [], []
    for o in REPLICATE_ORDERS:
        f = _minus(last.get(f"fused_{o}"), last.get(f"replicate_{o}"))
        c = _minus(last.get(f"control_{o}"), last.get(f"replicate_{o}"))
        if f is not None:
            fused.append(f)
        if c is not None:
            control.append(c)
    return fused, control


def deviation_summary(dev: pl.DataFrame) -> list[dict[str, Any]]:
    """Per precision x metric: the rule's final and drift tests, the band width and the deviations
    of fused and the control from eager on order A."""
    out = []
    verdicts = {p: judge_frame(dev, p) for p in dev["precision"].unique(maintain_order=True).to_list()}
    for (precision, metric), _ in dev.group_by(["precision", "metric"], maintain_order=True):
        j = verdicts[precision]
        part = dev.filter((pl.col("precision") == precision) & (pl.col("metric") == metric) & pl.col("judged"))
        spread_mean = part["replicate_spread"].drop_nulls().mean()  # None when no point has a spread
        final, drift = j.test(metric, "final"), j.test(metric, "drift")
        out.append(
            {
                "precision": precision,
                "metric": metric,
                "verdict_under_rule": j.verdict,
                "orders": j.orders,
                "judged_points": j.judged_points,
                "spread_mean": float(spread_mean) if isinstance(spread_mean, (int, float)) else None,
                "final_mean_fused_minus_eager": final.mean if final else None,
                "final_margin": final.margin if final else None,
                "final_p_beyond_holm": final.p_holm if final else None,
                "drift_mean": drift.mean if drift else None,
                "fused_rms_dev": rms(part["fused_minus_eager"].to_list()),
                "control_rms_dev": rms(part["control_minus_eager"].to_list()),
            }
        )
    return out


def final_metric_table(curves: pl.DataFrame, main: str) -> pl.DataFrame:
    """One row per precision x metric at the last step: eager, fused, fused - eager, the replicate
    spread and the control's difference from eager (main precision; perplexity spread from the
    replicates' own perplexities)."""
    last = curves.group_by("run").agg(pl.all().sort_by("step").last())
    final = {r["run"]: r for r in last.iter_rows(named=True)}
    reps = [final[replicate_run(main, o)] for o in REPLICATE_ORDERS if replicate_run(main, o) in final]
    pairs = [
        (final[replicate_run(main, o)], final[fused_run(main, o)])
        for o in REPLICATE_ORDERS
        if replicate_run(main, o) in final and fused_run(main, o) in final
    ]
    control = final.get(control_run(main))
    rows = []
    for precision in curves["precision"].unique(maintain_order=True).to_list():
        e, f = final.get(f"{precision}_eager"), final.get(f"{precision}_fused")
        if e is None or f is None:
            continue
        for metric in (*FINAL_METRICS, "wall_seconds"):
            vals = [r[metric] for r in reps if r[metric] is not None]
            spread = max(vals) - min(vals) if len(vals) >= 2 else None
            diff = f[metric] - e[metric]
            ctrl = control if precision == main else None
            c_diff = ctrl[metric] - e[metric] if ctrl is not None else None
            paired = [pf[metric] - pe[metric] for pe, pf in pairs] if precision == main else [diff]
            p_mean, p_sd = _mean_sd(list(paired))
            rows.append(
                {
                    "precision": precision,
                    "metric": metric,
                    "step": e["step"],
                    "eager": e[metric],
                    "fused": f[metric],
                    "fused_minus_eager": diff,
                    "rel_diff": diff / e[metric] if e[metric] else None,
                    "replicate_spread": spread,
                    "diff_in_spreads": abs(diff) / spread if spread else None,
                    "control": ctrl[metric] if ctrl is not None else None,
                    "control_minus_eager": c_diff,
                    "paired_mean_diff": p_mean,
                    "paired_sd_diff": p_sd,
                }
            )
    return pl.DataFrame(
        rows,
        schema={
            "precision": pl.String,
            "metric": pl.String,
            "step": pl.Int64,
            "eager": pl.Float64,
            "fused": pl.Float64,
            "fused_minus_eager": pl.Float64,
            "rel_diff": pl.Float64,
            "replicate_spread": pl.Float64,
            "diff_in_spreads": pl.Float64,
            "control": pl.Float64,
            "control_minus_eager": pl.Float64,
            "paired_mean_diff": pl.Float64,
            "paired_sd_diff": pl.Float64,
        },
    )


def run_problems(curves: pl.DataFrame, plan: list[dict[str, Any]]) -> list[str]:
    """Everything that makes an E run invalid (empty: valid)."""
    problems = []
    runs = {r: part.sort("step") for (r,), part in curves.group_by("run", maintain_order=True)}
    missing = [p["run"] for p in plan if p["run"] not in runs]
    if missing:
        problems.append(f"runs missing: {', '.join(missing)}")
    step_sets = {tuple(part["step"].to_list()) for part in runs.values()}
    if len(step_sets) > 1:
        problems.append("runs have different eval steps")
    replicate_seeds = [runs[p["run"]]["data_seed"][0] for p in plan if p["role"] == "replicate" and p["run"] in runs]
    if len(set(replicate_seeds)) != len(replicate_seeds):
        problems.append("replicates share a data order")
    for name, part in runs.items():
        for metric in ("eval_loss", "train_loss", "grad_norm"):
            vals = part[metric].drop_nulls().to_list()
            if not all(math.isfinite(v) for v in vals):
                problems.append(f"{name}: non-finite {metric}")
        first, last = part["eval_loss"][0], part["eval_loss"][-1]
        if math.isfinite(first) and math.isfinite(last) and not last < first:
            problems.append(f"{name}: eval loss did not decrease ({first:.4f} -> {last:.4f})")
        row = part.row(0, named=True)
        if row["path"] == "fused":
            if row["graph_breaks"] != 0 or row["recompiles"] != 0:
                problems.append(f"{name}: {row['graph_breaks']} graph breaks, {row['recompiles']} recompiles")
            if not (row["fwd_kernels"] or 0) > 0 or not (row["bwd_kernels"] or 0) > 0:
                problems.append(f"{name}: no generated forward/backward kernels recorded")
    for p in plan:
        if p["role"] not in ("control", "fused") or p["run"] not in runs:
            continue
        part = runs[p["run"]]
        row = part.row(0, named=True)
        paired = runs.get(replicate_run(p["precision"], p["data_order"]))
        if p["role"] == "control" and row["nudged_elements"] != row["n_params"]:
            problems.append(f"{p['run']}: {row['nudged_elements']} of {row['n_params']} initial weights nudged")
        if paired is not None:
            if (row["data_seed"], row["init_seed"]) != (paired["data_seed"][0], paired["init_seed"][0]):
                problems.append(f"{p['run']}: data order or init differs from the eager run it is paired with")
            if p["role"] == "control" and part["eval_loss"].to_list() == paired["eval_loss"].to_list():
                problems.append(f"{p['run']}: eval-loss curve bit-identical to eager (the perturbation did not take)")
    return problems
