"""Task E: does fused numerics change what a model learns? (feeds main document §3.2 and §6.1)

One training function (:func:`pipeline.experiments.training.gpt.train`) runs a GPT-2-style byte-level model with the
eager switch and the fused switch under identical seed, data order, batch, schedule and optimizer.

What "within normal random fluctuation" means is measured, not assumed, with two kinds of extra run:

* **replicates**: :data:`REPLICATE_ORDERS` eager runs that differ only in their data-order seed (order
  A is the eager run fused is paired with). Data order, not the init seed, because it is the
  fluctuation every real training run has and nobody controls (shuffling, sharding, worker timing),
  while the init stays shared with fused so every curve starts from the same point and the band
  covers what training does to it. Their envelope per eval step is the band.
* **numerics-only control**: eager with fused's data order and init, every initial weight moved by
  one ULP (:func:`pipeline.experiments.training.gpt.nudge_one_ulp`). Fused differs from eager only by rounding; the control
  shows how far a rounding-sized difference alone moves the curve through training. (A different
  intra-op thread count also changes bits on this CPU at the default size, but not at smoke size
  and not on a GPU, so it is not used.)

The claim is judged on every eval point by :data:`RULE` (see :func:`judge_fused_curve`); how fused
compares with the control is a finding. Runs: the main precision (bf16 autocast on CPU, fp16
autocast + GradScaler on CUDA) replicates, fused and control; an fp32 eager/fused pair where the
profile's ``train.fp32_control`` is 1 (reported, not judged).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeGuard

import dagster as dg
import polars as pl

from ...progress import Progress
from ...resources import ExperimentSettings
from ...storage import DataFolder
from ...tables import markdown_table
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    Rule,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from .corpus import load_corpus
from .gpt import TrainConfig, TrainResult, train
from .spec import GROUP

#: Metrics compared between the paths; perplexity is exp(eval_loss), so it is only in the final table.
DEVIATION_METRICS = ("eval_loss", "train_loss", "grad_norm")
FINAL_METRICS = ("train_loss", "eval_loss", "perplexity", "grad_norm")

# --- the rule, fixed before any run --------------------------------------------------------------

#: Data orders of the eager replicates; "A" is also fused's and the control's order.
REPLICATE_ORDERS = ("A", "B", "C", "D")
#: The envelope [min, max] over replicates is widened by this many replicate spreads on each side.
ENVELOPE_WIDENING = 2.0
#: Contradicted when fused is outside the widened envelope at more than this fraction of judged points.
MAX_OUTSIDE_FRACTION = 0.5
#: ... or when |fused - eager| of the final eval loss exceeds this many final replicate spreads.
FINAL_SPREAD_MULTIPLE = 3.0
#: Fewest judged eval points: "more than half" of 4 is 3, so one or two transient excursions never
#: decide on their own (and 4 is what the smoke profile has: 20 steps / eval every 5).
MIN_POINTS = 4
#: Per-point and final-point false-contradiction probabilities under the least favourable null (fused
#: an independent replicate, replicate values iid normal; Monte Carlo, 4e6 draws, R = 4); see RULE.
PER_POINT_FALSE_ALARM = 0.0158
FINAL_FALSE_ALARM = 0.0104
#: Finding: fused's RMS deviation from eager exceeds this multiple of the control's.
CONTROL_FACTOR = 3.0


#: The columns of one judged eval point, as the claim's metadata and the report's table show them.
EVAL_POINT_COLUMNS = (
    "step",
    "replicate_min",
    "replicate_max",
    "replicate_spread",
    "eager",
    "fused",
    "control",
    "fused_minus_eager",
    "control_minus_eager",
    "outside_envelope",
)

RULE = Rule(
    claim="Fused training learns what eager learns: its eval-loss curve stays within the run-to-run variation of "
    "eager replicates that differ only in data order (main document §3.2; a deviation feeds §6.1)",
    metric="eval loss (mean next-byte cross-entropy on fixed eval windows) at every eval step after step 0; "
    "envelope = [min, max] over the eager replicates, spread s = max - min",
    decision=(
        f"contradicted if fused lies outside [min - {ENVELOPE_WIDENING:g}s, max + {ENVELOPE_WIDENING:g}s] at more "
        f"than {MAX_OUTSIDE_FRACTION:.0%} of the judged eval points, or if |fused - eager| of the final eval loss "
        f"exceeds {FINAL_SPREAD_MULTIPLE:g}x the final spread; inconclusive if fewer than {len(REPLICATE_ORDERS)} "
        f"replicates or {MIN_POINTS} judged points, or if the spread is zero or undefined at any judged point; "
        "supported otherwise"
    ),
    threshold=ENVELOPE_WIDENING,
    unit="replicate spreads (max - min over replicates at the same eval step) beyond the envelope",
    confidence=0.95,
    sample_size=f"{len(REPLICATE_ORDERS)} replicates x every eval point after step 0 (steps / eval_every: "
    "4 in smoke, 20 in default), plus fused and eager on the same points",
    derivation=(
        "Least favourable null: fused behaves like one more independent replicate (as far from eager as a new data "
        "order, the most 'normal fluctuation' allows); replicate values at a step iid normal. Monte Carlo (4e6 draws, "
        f"R = {len(REPLICATE_ORDERS)}): P(outside the envelope widened by {ENVELOPE_WIDENING:g}s) = "
        f"{PER_POINT_FALSE_ALARM}, P(|fused - eager| > {FINAL_SPREAD_MULTIPLE:g}s) = {FINAL_FALSE_ALARM}. Eval points "
        "of one run are correlated, so the point count is not binomial; Markov's inequality holds for any "
        f"correlation: P(outside fraction > {MAX_OUTSIDE_FRACTION:g}) <= {PER_POINT_FALSE_ALARM}/"
        f"{MAX_OUTSIDE_FRACTION:g} = {PER_POINT_FALSE_ALARM / MAX_OUTSIDE_FRACTION:.4f}. Union with the final-point "
        f"test: false contradiction <= {PER_POINT_FALSE_ALARM / MAX_OUTSIDE_FRACTION + FINAL_FALSE_ALARM:.3f} < 0.05. "
        f"Step 0 is not judged (no training yet: all replicates share the init, spread 0). At least {MIN_POINTS} "
        "points, so that 'more than half' takes at least 3 of them. Fused shares eager's data order, so under a true null it is "
        "closer than that; smaller numerics effects are the control finding's job."
    ),
)


def main_precision(settings: ExperimentSettings) -> str:
    """fp16 on CUDA; on CPU the profile's ``cpu_train_precision`` (bf16, or fp32 in the default
    profile, whose budget must hold on CPUs without native 16-bit matmul: see pipeline/profiles.py)."""
    return "float16" if settings.torch_device().type == "cuda" else settings.get_profile().cpu_train_precision


def replicate_run(main: str, order: str) -> str:
    """Run name of the eager replicate with data order ``order`` (order A is the plain eager run)."""
    return f"{main}_eager" if order == "A" else f"{main}_eager_order_{order}"


def control_run(main: str) -> str:
    return f"{main}_eager_ulp_nudge"


def run_plan(settings: ExperimentSettings) -> list[dict[str, Any]]:
    """The runs of one materialization: name, path, precision, data order, role, init nudge.

    Roles: ``replicate`` (eager, one per data order), ``fused`` (order A), ``control`` (eager,
    order A, initial weights one ULP off), ``fp32_pair`` (the optional fp32 eager/fused pair).
    """
    main = main_precision(settings)
    plan = [
        {
            "run": replicate_run(main, "A"),
            "path": "eager",
            "precision": main,
            "data_order": "A",
            "role": "replicate",
            "init_ulp_nudge": False,
        },
        {
            "run": f"{main}_fused",
            "path": "fused",
            "precision": main,
            "data_order": "A",
            "role": "fused",
            "init_ulp_nudge": False,
        },
        {
            "run": control_run(main),
            "path": "eager",
            "precision": main,
            "data_order": "A",
            "role": "control",
            "init_ulp_nudge": True,
        },
    ]
    plan += [
        {
            "run": replicate_run(main, o),
            "path": "eager",
            "precision": main,
            "data_order": o,
            "role": "replicate",
            "init_ulp_nudge": False,
        }
        for o in REPLICATE_ORDERS[1:]
    ]
    if settings.get_profile().train.get("fp32_control", 0) and main != "float32":
        plan += [
            {
                "run": "float32_eager",
                "path": "eager",
                "precision": "float32",
                "data_order": "A",
                "role": "fp32_pair",
                "init_ulp_nudge": False,
            },
            {
                "run": "float32_fused",
                "path": "fused",
                "precision": "float32",
                "data_order": "A",
                "role": "fp32_pair",
                "init_ulp_nudge": False,
            },
        ]
    return plan


def checkpoint_root(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> Path:
    """``<data>/<profile>/checkpoints``, next to the stored assets of the profile."""
    data: DataFolder = context.resources.data
    return data.profile_dir(settings.profile) / "checkpoints"


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    deps=[dg.AssetKey("toolkit_selfcheck")],
    # The data folder holds the checkpoints (no settings param: Dagster rejects resource keys
    # given both in the decorator and as arguments).
    required_resource_keys={"data", "settings"},
    description=(
        "Task E training curves (feeds §3.2/§6.1): GPT-2-style byte-level model trained with the fused switch, "
        f"{len(REPLICATE_ORDERS)} eager replicates that differ only in data order, and an eager numerics-only control "
        "(fused's data order and init, weights one ULP off); train/eval loss, perplexity and grad norm every eval_every steps."
    ),
    kinds={"pytorch", "polars"},
)
def training_curves(context: dg.AssetExecutionContext) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    profile = settings.get_profile()
    corpus = load_corpus()
    device = settings.torch_device()
    ckpt_root = checkpoint_root(context, settings)
    frames, summary = [], []
    plan = run_plan(settings)
    progress = Progress(context.log.info, "training runs", len(plan), every=0.0)
    for run in plan:
        cfg = TrainConfig.from_profile(
            profile.train,
            path=run["path"],
            precision=run["precision"],
            device=str(device),
            init_seed=settings.derived_seed("train", "init"),
            data_seed=settings.derived_seed("train", "data", run["data_order"]),
            init_ulp_nudge=run["init_ulp_nudge"],
            backend=settings.backend,
            options_json=_sorted_json(settings.options()),
            corpus_sha256=corpus.sha256,
        )
        context.log.info(f"training {run['run']} ({cfg.steps} steps, config {cfg.key()})")
        result = train(cfg, corpus, checkpoint_dir=ckpt_root / run["run"], log=context.log.info)
        frames.append(_curve_frame(run, cfg, result))
        summary.append({**run, **_run_summary(result)})
        progress.advance(note=f"{run['run']} done")
    curves = pl.concat(frames, how="vertical")
    context.add_output_metadata(
        {
            **corpus.metadata(),
            "runs": len(summary),
            "replicates": len(REPLICATE_ORDERS),
            "wall_seconds.total": round(sum(s["wall_seconds"] for s in summary), 2),
            **{f"wall_seconds.{s['run']}": s["wall_seconds"] for s in summary},
            **{f"final_eval_loss.{s['run']}": s["final_eval_loss"] for s in summary},
            **{
                f"{s['run']}.{k}": v
                for s in summary
                for k, v in s["evidence"].items()
                if isinstance(v, (int, float, str))
            },
            "n_params": summary[0]["n_params"],
            "tokens_per_run": int(profile.train["steps"] * profile.train["batch"] * profile.train["context"]),
            "run_table": dg.MetadataValue.md(
                markdown_table(
                    pl.DataFrame(summary).select(
                        "run",
                        "role",
                        "path",
                        "precision",
                        "data_order",
                        "init_ulp_nudge",
                        "nudged_elements",
                        "wall_seconds",
                        "final_eval_loss",
                        "resumed_from_step",
                    )
                )
            ),
            **{f"train.{k}": v for k, v in profile.train.items()},
        }
    )
    return curves


def _sorted_json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value, sort_keys=True)


def _run_summary(result: TrainResult) -> dict[str, Any]:
    return {
        "wall_seconds": round(result.seconds, 2),
        "final_eval_loss": result.rows[-1]["eval_loss"],
        "resumed_from_step": result.resumed_from_step,
        "n_params": result.n_params,
        "nudged_elements": result.nudged_elements,
        "evidence": result.evidence,
    }


CURVE_SCHEMA = {
    "run": pl.String,
    "path": pl.String,
    "precision": pl.String,
    "data_order": pl.String,
    "role": pl.String,
    "init_ulp_nudge": pl.Boolean,
    "data_seed": pl.Int64,
    "init_seed": pl.Int64,
    "nudged_elements": pl.Int64,
    "step": pl.Int64,
    "tokens": pl.Int64,
    "train_loss": pl.Float64,
    "eval_loss": pl.Float64,
    "perplexity": pl.Float64,
    "grad_norm": pl.Float64,
    "lr": pl.Float64,
    "skipped_steps": pl.Int64,
    "wall_seconds": pl.Float64,
    "n_params": pl.Int64,
    "graph_breaks": pl.Int64,
    "recompiles": pl.Int64,
    "fwd_kernels": pl.Int64,
    "bwd_kernels": pl.Int64,
    "eval_kernels": pl.Int64,
    "fwd_code_sha256": pl.String,
    "bwd_code_sha256": pl.String,
}


def _curve_frame(run: dict[str, Any], cfg: TrainConfig, result: TrainResult) -> pl.DataFrame:
    ev = result.evidence
    per_run = {
        **run,
        "data_seed": int(cfg.data_seed),
        "init_seed": int(cfg.init_seed),
        "nudged_elements": int(result.nudged_elements),
        "wall_seconds": float(result.seconds),
        "n_params": int(result.n_params),
        # Fusion evidence of the fused runs (forward + lazily compiled backward + eval graph).
        "graph_breaks": int(ev.get("train_graph_breaks", 0) + ev.get("eval_graph_breaks", 0)) if ev else None,
        "recompiles": int(ev.get("train_recompiles", 0) + ev.get("eval_recompiles", 0)) if ev else None,
        "fwd_kernels": ev.get("train_kernel_count"),
        "bwd_kernels": ev.get("bwd_kernel_count"),
        "eval_kernels": ev.get("eval_kernel_count"),
        "fwd_code_sha256": ev.get("train_code_sha256"),
        "bwd_code_sha256": ev.get("bwd_code_sha256"),
    }
    return pl.DataFrame([{**per_run, **row} for row in result.rows], schema=CURVE_SCHEMA)


# ------------------------------------------------------------------------- the rule, as a function


@dataclass(frozen=True)
class CurveJudgement:
    """:data:`RULE` applied to one eval-loss curve: the verdict and the numbers it rests on."""

    verdict: str
    reason: str
    replicates: int
    judged_points: int
    points_outside: int
    outside_fraction: float | None
    first_outside_step: int | None
    final_step: int | None
    final_fused_minus_eager: float | None
    final_spread: float | None
    min_spread: float | None

    def metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "replicates": self.replicates,
            "judged_points": self.judged_points,
            "points_outside": self.points_outside,
            "first_outside_step": "never" if self.first_outside_step is None else int(self.first_outside_step),
        }
        for k in ("outside_fraction", "final_fused_minus_eager", "final_spread", "min_spread"):
            v = getattr(self, k)
            if v is not None:
                out[k] = float(v)
        if self.final_spread and self.final_fused_minus_eager is not None:
            out["final_diff_in_spreads"] = abs(self.final_fused_minus_eager) / self.final_spread
        return out


def _finite(v: object) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _all_finite(values: Sequence[float | None]) -> list[float] | None:
    """``values`` when every one is a finite number, else None."""
    finite = [v for v in values if _finite(v)]
    return finite if len(finite) == len(values) else None


def _outside(value: float | None, lo: float, hi: float, spread: float, widening: float) -> bool:
    """Whether ``value`` is non-finite or outside ``[lo, hi]`` widened by ``widening`` spreads."""
    return not _finite(value) or value < lo - widening * spread or value > hi + widening * spread


def _envelope(
    steps: Sequence[int],
    judged: list[int],
    replicates: Sequence[Sequence[float | None]],
    fused: Sequence[float | None],
    widening: float,
) -> tuple[list[float | None], list[int]]:
    """Per judged point the replicates' spread (None where a replicate is not finite), and the steps
    where fused lies outside the envelope widened by ``widening`` spreads."""
    spreads: list[float | None] = []
    outside_steps: list[int] = []
    for i in judged:
        vals = _all_finite([r[i] for r in replicates])
        if vals is None:
            spreads.append(None)
            continue
        lo, hi = min(vals), max(vals)
        spreads.append(hi - lo)
        if _outside(fused[i], lo, hi, hi - lo, widening):
            outside_steps.append(steps[i])
    return spreads, outside_steps


def _contradictions(
    outside_steps: list[int],
    n_judged: int,
    final_diff: float | None,
    final_spread: float,
    *,
    widening: float,
    max_outside_fraction: float,
    final_multiple: float,
) -> list[str]:
    """Why the rule contradicts the claim (empty when it does not): too many points outside the
    widened envelope, or a final fused - eager difference beyond ``final_multiple`` spreads."""
    fraction = len(outside_steps) / n_judged
    reasons = []
    if fraction > max_outside_fraction:
        reasons.append(
            f"fused outside the envelope widened by {widening:g} spreads at {len(outside_steps)}/{n_judged} "
            f"eval points ({fraction:.0%} > {max_outside_fraction:.0%}; first at step {outside_steps[0]})"
        )
    if final_diff is None or abs(final_diff) > final_multiple * final_spread:
        shown = "non-finite" if final_diff is None else f"{final_diff:+.4g}"
        reasons.append(
            f"final eval loss fused - eager {shown} exceeds {final_multiple:g} x final spread "
            f"{final_spread:.4g} = {final_multiple * final_spread:.4g}"
        )
    return reasons


def judge_fused_curve(
    steps: Sequence[int],
    replicates: Sequence[Sequence[float | None]],
    eager: Sequence[float | None],
    fused: Sequence[float | None],
    *,
    widening: float = ENVELOPE_WIDENING,
    max_outside_fraction: float = MAX_OUTSIDE_FRACTION,
    final_multiple: float = FINAL_SPREAD_MULTIPLE,
    min_replicates: int = len(REPLICATE_ORDERS),
    min_points: int = MIN_POINTS,
) -> CurveJudgement:
    """:data:`RULE` on one curve: a pure function of the eval points (``replicates`` holds one
    curve per replicate, ``eager`` is the replicate fused is paired with). Step 0 is not judged.

    >>> reps = [
    ...     [5, 3.0, 2.5, 2.2, 2.0],
    ...     [5, 3.1, 2.6, 2.3, 2.1],
    ...     [5, 3.05, 2.55, 2.25, 2.05],
    ...     [5, 2.95, 2.45, 2.15, 1.95],
    ... ]
    >>> judge_fused_curve([0, 10, 20, 30, 40], reps, reps[0], [5, 3.01, 2.5, 2.21, 2.0]).verdict
    'supported'
    """
    n = len(steps)
    curves = [list(c) for c in (*replicates, eager, fused)]
    if any(len(c) != n for c in curves):
        raise ValueError(f"every curve needs one value per eval step ({n}); got lengths {[len(c) for c in curves]}")
    judged = [i for i, s in enumerate(steps) if s > 0]
    spreads, outside_steps = _envelope(steps, judged, replicates, fused, widening)
    last = judged[-1] if judged else None
    final_diff = None
    if last is not None and _finite(f_last := fused[last]) and _finite(e_last := eager[last]):
        final_diff = f_last - e_last
    defined = [s for s in spreads if s is not None]
    figures = CurveJudgement(
        INCONCLUSIVE,
        "",
        replicates=len(replicates),
        judged_points=len(judged),
        points_outside=len(outside_steps),
        outside_fraction=len(outside_steps) / len(judged) if judged else None,
        first_outside_step=outside_steps[0] if outside_steps else None,
        final_step=steps[last] if last is not None else None,
        final_fused_minus_eager=final_diff,
        final_spread=spreads[-1] if spreads else None,
        min_spread=min(defined) if defined else None,
    )
    if len(replicates) < min_replicates:
        return replace(figures, reason=f"{len(replicates)} replicates, the rule needs {min_replicates}")
    if len(judged) < min_points:
        return replace(figures, reason=f"{len(judged)} judged eval points, the rule needs {min_points}")
    if len(defined) < len(spreads) or min(defined) <= 0:
        bad = [steps[i] for i, s in zip(judged, spreads, strict=False) if s is None or s <= 0]
        return replace(
            figures,
            reason=f"replicate spread zero or undefined at step(s) {bad[:5]}: no measured variation to judge against",
        )
    final_spread = defined[-1]  # every spread is defined here
    reasons = _contradictions(
        outside_steps,
        len(judged),
        final_diff,
        final_spread,
        widening=widening,
        max_outside_fraction=max_outside_fraction,
        final_multiple=final_multiple,
    )
    if reasons:
        return replace(figures, verdict=CONTRADICTED, reason="; ".join(reasons))
    return replace(
        figures,
        verdict=SUPPORTED,
        reason=f"fused outside the widened envelope at {len(outside_steps)}/{len(judged)} eval points (<= {max_outside_fraction:.0%}); "
        f"final fused - eager {final_diff:+.4g} within {final_multiple:g} x spread {final_spread:.4g}",
    )


def rms(values: Sequence[float | None]) -> float | None:
    """Root mean square of the finite values (None when there are none)."""
    vals = [v for v in values if _finite(v)]
    return math.sqrt(sum(v * v for v in vals) / len(vals)) if vals else None


def control_findings(
    fused_dev: Sequence[float | None], control_dev: Sequence[float | None], factor: float = CONTROL_FACTOR
) -> list[str]:
    """Finding when fused's RMS deviation from eager exceeds ``factor`` x the control's (both over
    the same judged eval points): fused moves the curve more than a pure rounding perturbation does.

    >>> control_findings([0.01, 0.02], [0.001, -0.002])
    ['fused moves the eval-loss curve 10x as far as the one-ULP control (RMS 0.01581 vs 0.001581; finding above 3x)']
    >>> control_findings([0.001, 0.002], [0.001, -0.002])
    []
    """
    f, c = rms(fused_dev), rms(control_dev)
    if f is None or c is None:
        return ["fused or control deviation undefined (no finite eval points)"]
    if c == 0:
        return [] if f == 0 else [f"the control did not move the curve (RMS 0) while fused did (RMS {f:.4g})"]
    if f > factor * c:
        return [
            f"fused moves the eval-loss curve {f / c:.3g}x as far as the one-ULP control (RMS {f:.4g} vs {c:.4g}; finding above {factor:g}x)"
        ]
    return []


# ------------------------------------------------------------------------------- deviation frame


def _series(curves: pl.DataFrame, run: str, metric: str) -> list[float | None]:
    return curves.filter(pl.col("run") == run).sort("step")[metric].to_list()


def _minus(x: float | None, y: float | None) -> float | None:
    """``x - y`` when both are finite, else None."""
    return x - y if _finite(x) and _finite(y) else None


def _envelope_point(
    replicates: list[float | None], fused: float | None, *, judged: bool
) -> tuple[dict[str, float | None], bool | None]:
    """The replicate envelope at one eval point (all None unless every replicate is finite) and, at a
    judged point with an envelope, whether fused lies outside it widened by :data:`ENVELOPE_WIDENING` spreads."""
    vals = _all_finite(replicates)
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
    return envelope, _outside(fused, lo, hi, spread, ENVELOPE_WIDENING) if judged else None


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
    """:func:`judge_fused_curve` on one precision x metric of :func:`deviation_frame`."""
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


# ------------------------------------------------------------------------------------- assets


@dg.asset(
    group_name=GROUP,
    description="Task E final-metric difference table (feeds §3.2/§6.1): at the last step, eager, fused, fused - eager, "
    "the spread of the eager replicates (max - min over data orders) and the one-ULP control's difference from eager.",
    kinds={"polars"},
)
def training_final_metrics(
    context: dg.AssetExecutionContext, settings: ExperimentSettings, training_curves: pl.DataFrame
) -> pl.DataFrame:
    table = final_metric_table(training_curves, main_precision(settings))
    context.add_output_metadata(
        {
            "table": dg.MetadataValue.md(markdown_table(table)),
            **{
                f"{r['precision']}.{r['metric']}.fused_minus_eager": float(r["fused_minus_eager"])
                for r in table.iter_rows(named=True)
            },
            **{
                f"{r['precision']}.{r['metric']}.replicate_spread": float(r["replicate_spread"])
                for r in table.iter_rows(named=True)
                if r["replicate_spread"] is not None
            },
            **{
                f"{r['precision']}.{r['metric']}.control_minus_eager": float(r["control_minus_eager"])
                for r in table.iter_rows(named=True)
                if r["control_minus_eager"] is not None
            },
        }
    )
    return table


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


@dg.asset(
    group_name=GROUP,
    description="Task E deviation analysis (feeds §6.1): per eval step, the envelope of the eager replicates (and its "
    f"widening by {ENVELOPE_WIDENING:g} spreads), fused and the one-ULP control against eager; the first step outside.",
    kinds={"polars"},
)
def training_deviation(
    context: dg.AssetExecutionContext, settings: ExperimentSettings, training_curves: pl.DataFrame
) -> pl.DataFrame:
    dev = deviation_frame(training_curves, main_precision(settings))
    summary = deviation_summary(dev)
    meta: dict[str, Any] = {"summary": dg.MetadataValue.md(markdown_table(pl.DataFrame(summary)))}
    for s in summary:
        prefix = f"{s['precision']}.{s['metric']}"
        meta[f"{prefix}.first_outside_step"] = s["first_outside_step"]
        meta[f"{prefix}.points_outside"] = int(s["points_outside"])
        for k in (
            "spread_mean",
            "spread_final",
            "fused_rms_dev",
            "control_rms_dev",
            "final_fused_minus_eager",
            "final_control_minus_eager",
        ):
            if s[k] is not None:
                meta[f"{prefix}.{k}"] = float(s[k])
    context.add_output_metadata(meta)
    return dev


# ------------------------------------------------------------------------------------- checks


@validity_check(
    asset=training_curves,
    name="training_runs_valid",
    required_resource_keys={"settings"},
    description="The E run did what it claims: every planned run (replicates with distinct data orders, fused, one-ULP "
    "control with fused's order and init) is present with the same eval steps; every loss and grad norm is finite; "
    "every run learned (final eval loss below the initial one); each fused run compiled with 0 graph breaks, "
    "0 recompiles and generated forward and backward kernels; the control's weights were all nudged and its curve "
    "differs from eager's.",
)
def training_runs_valid(context: dg.AssetCheckExecutionContext, training_curves: pl.DataFrame) -> dg.AssetCheckResult:
    plan = run_plan(context.resources.settings)
    return validity_result(
        run_problems(training_curves, plan), {"runs": training_curves["run"].n_unique(), "planned_runs": len(plan)}
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


@claim_check(
    rule=RULE,
    asset=training_deviation,
    name="fused_learns_like_eager",
    required_resource_keys={"settings"},
    description=f"§3.2: the fused eval-loss curve stays within the variation of {len(REPLICATE_ORDERS)} eager data-order "
    f"replicates at every eval point (envelope widened by {ENVELOPE_WIDENING:g} spreads, at most "
    f"{MAX_OUTSIDE_FRACTION:.0%} of points outside; final |fused - eager| <= {FINAL_SPREAD_MULTIPLE:g} spreads).",
)
def fused_learns_like_eager(
    context: dg.AssetCheckExecutionContext, training_deviation: pl.DataFrame
) -> dg.AssetCheckResult:
    main = main_precision(context.resources.settings)
    j = judge_frame(training_deviation, main)
    part = training_deviation.filter(
        (pl.col("precision") == main) & (pl.col("metric") == "eval_loss") & pl.col("judged")
    ).sort("step")
    table = part.select(EVAL_POINT_COLUMNS)
    return claim_result(
        j.verdict,
        RULE,
        j.reason,
        {"precision": main, **j.metadata(), "points": dg.MetadataValue.md(markdown_table(table))},
    )


@finding_check(
    asset=training_deviation,
    name="fused_deviation_vs_rounding_control",
    required_resource_keys={"settings"},
    description=f"For a human: fused's RMS deviation from eager over the eval-loss curve against the one-ULP control's "
    f"(same data order and init); a finding above {CONTROL_FACTOR:g}x (fused moves the curve more than pure rounding "
    "does, even if within the replicate envelope).",
)
def fused_deviation_vs_rounding_control(
    context: dg.AssetCheckExecutionContext, training_deviation: pl.DataFrame
) -> dg.AssetCheckResult:
    main = main_precision(context.resources.settings)
    part = training_deviation.filter(
        (pl.col("precision") == main) & (pl.col("metric") == "eval_loss") & pl.col("judged")
    ).sort("step")
    fused_dev, control_dev = part["fused_minus_eager"].to_list(), part["control_minus_eager"].to_list()
    f, c = rms(fused_dev), rms(control_dev)
    meta: dict[str, Any] = {"control_factor": CONTROL_FACTOR, "judged_points": part.height}
    if f is not None:
        meta["fused_rms_dev"] = f
    if c is not None:
        meta["control_rms_dev"] = c
    if f is not None and c:
        meta["fused_over_control"] = f / c
    return finding_result(control_findings(fused_dev, control_dev), meta)
