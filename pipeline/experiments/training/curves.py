"""What E computes from the stored curves: the deviation frame (every eval point against the
replicate envelope), its summary, the final-metric table and the problems that make a run invalid."""

import math
from typing import Any

import polars as pl

from .judge import CurveJudgement, all_finite, is_finite, judge_fused_curve, outside_widened, rms
from .rules import ENVELOPE_WIDENING, REPLICATE_ORDERS
from .runs import control_run, replicate_run

#: Metrics compared between the paths; perplexity is exp(eval_loss), so it is only in the final table.
DEVIATION_METRICS = ("eval_loss", "train_loss", "grad_norm")
FINAL_METRICS = ("train_loss", "eval_loss", "perplexity", "grad_norm")


def _series(curves: pl.DataFrame, run: str, metric: str) -> list[float | None]:
    return curves.filter(pl.col("run") == run).sort("step")[metric].to_list()


def _minus(x: float | None, y: float | None) -> float | None:
    """``x - y`` when both are finite, else None."""
    return x - y if is_finite(x) and is_finite(y) else None


def _envelope_point(
    replicates: list[float | None], fused: float | None, *, judged: bool
) -> tuple[dict[str, float | None], bool | None]:
    """The replicate envelope at one eval point (all None unless every replicate is finite) and, at a
    judged point with an envelope, whether fused lies outside it widened by :data:`ENVELOPE_WIDENING` spreads."""
    vals = all_finite(replicates)
    if vals is None:
        return dict.fromkeys(("replicate_min", "replicate_max", "replicate_spread", "envelope_lo", "envelope_hi")), None
    lo, hi = min(vals), max(vals)
    spread = hi - lo
    envelope: dict[str, float | None] = {
        "replicate_min": lo,
        "replicate_max": hi,
        "replicate_spread": spread,
        "envelope_lo": lo - ENVELOPE_WIDENING * spread,
        "envelope_hi": hi + ENVELOPE_WIDENING * spread,
    }
    return envelope, outside_widened(fused, lo, hi, spread, ENVELOPE_WIDENING) if judged else None


def deviation_frame(curves: pl.DataFrame, main: str) -> pl.DataFrame:
    """Per precision x metric x step: replicate envelope (min, max, spread, widened bounds), eager,
    fused and control values, and fused's / the control's deviation from eager.

    The replicates and the control exist for the main precision only; the optional fp32 pair is
    shown against the same envelope (no control of its own)."""
    runs = set(curves["run"].unique().to_list())
    replicate_runs = {o: replicate_run(main, o) for o in REPLICATE_ORDERS}
    missing = [r for r in (*replicate_runs.values(), control_run(main)) if r not in runs]
    if missing:
        raise ValueError(f"the rule needs runs {', '.join(missing)}; curves hold {', '.join(sorted(runs))}")
    steps = [int(step) for step in curves.filter(pl.col("run") == replicate_runs["A"]).sort("step")["step"]]
    rows = []
    for precision in curves["precision"].unique(maintain_order=True).to_list():
        eager_run, fused_run = f"{precision}_eager", f"{precision}_fused"
        if eager_run not in runs or fused_run not in runs:
            continue
        for metric in DEVIATION_METRICS:
            reps = {o: _series(curves, r, metric) for o, r in replicate_runs.items()}
            eager, fused = _series(curves, eager_run, metric), _series(curves, fused_run, metric)
            control = _series(curves, control_run(main), metric) if precision == main else [None] * len(steps)
            if any(len(c) != len(steps) for c in (*reps.values(), eager, fused, control)):
                raise ValueError(f"runs of {precision}/{metric} have different evaluation steps")
            for i, step in enumerate(steps):
                envelope, outside = _envelope_point([reps[o][i] for o in REPLICATE_ORDERS], fused[i], judged=step > 0)
                rows.append(
                    {
                        "precision": precision,
                        "metric": metric,
                        "step": step,
                        "judged": step > 0,
                        **{f"replicate_{o}": reps[o][i] for o in REPLICATE_ORDERS},
                        "eager": eager[i],
                        "fused": fused[i],
                        "control": control[i],
                        **envelope,
                        "fused_minus_eager": _minus(fused[i], eager[i]),
                        "control_minus_eager": _minus(control[i], eager[i]),
                        "outside_envelope": outside,
                    }
                )
    return pl.DataFrame(rows)


def judge_frame(dev: pl.DataFrame, precision: str, metric: str = "eval_loss") -> CurveJudgement:
    """:func:`.judge.judge_fused_curve` on one precision x metric of :func:`deviation_frame`."""
    part = dev.filter((pl.col("precision") == precision) & (pl.col("metric") == metric)).sort("step")
    reps = [part[f"replicate_{o}"].to_list() for o in REPLICATE_ORDERS if f"replicate_{o}" in part.columns]
    return judge_fused_curve(part["step"].to_list(), reps, part["eager"].to_list(), part["fused"].to_list())


def deviation_summary(dev: pl.DataFrame) -> list[dict[str, Any]]:
    """Per precision x metric: the rule's numbers, band width and the control's deviation."""
    out = []
    for (precision, metric), _ in dev.group_by(["precision", "metric"], maintain_order=True):
        j = judge_frame(dev, precision, metric)
        part = dev.filter((pl.col("precision") == precision) & (pl.col("metric") == metric) & pl.col("judged"))
        spread_mean = part["replicate_spread"].drop_nulls().mean()  # None when no point has a spread
        out.append(
            {
                "precision": precision,
                "metric": metric,
                "verdict_under_rule": j.verdict,
                "judged_points": j.judged_points,
                "points_outside": j.points_outside,
                "first_outside_step": "never" if j.first_outside_step is None else str(j.first_outside_step),
                "spread_mean": float(spread_mean) if isinstance(spread_mean, (int, float)) else None,
                "spread_final": j.final_spread,
                "fused_rms_dev": rms(part["fused_minus_eager"].to_list()),
                "control_rms_dev": rms(part["control_minus_eager"].to_list()),
                "final_fused_minus_eager": j.final_fused_minus_eager,
                "final_control_minus_eager": part["control_minus_eager"].to_list()[-1] if part.height else None,
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
        if p["role"] != "control" or p["run"] not in runs:
            continue
        ctrl = runs[p["run"]]
        row = ctrl.row(0, named=True)
        paired = runs.get(replicate_run(p["precision"], "A"))
        if row["nudged_elements"] != row["n_params"]:
            problems.append(f"{p['run']}: {row['nudged_elements']} of {row['n_params']} initial weights nudged")
        if paired is not None:
            if (row["data_seed"], row["init_seed"]) != (paired["data_seed"][0], paired["init_seed"][0]):
                problems.append(f"{p['run']}: data order or init differs from the eager run it controls")
            if ctrl["eval_loss"].to_list() == paired["eval_loss"].to_list():
                problems.append(f"{p['run']}: eval-loss curve bit-identical to eager (the perturbation did not take)")
    return problems
