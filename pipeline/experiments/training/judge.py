"""E's decision rule as pure functions of the curves (:func:`judge_training`), the one-ULP controls'
rank null (:func:`control_rank_test`, a finding) and the rule's error rates measured by running the judge on
simulated runs (:func:`measured_error_rates`; the page's table: :func:`declared_error_rates` and
:func:`this_run_error_rates`). :func:`simulate_rule` is a model of the judge (normal statistics, independent
tests), kept to compare: at a paired sd of 0.25 margin it gives a power of 0.64 at 1.5 margins where the judge
itself contradicts 0.43 of the runs. The rule's parameters are in :mod:`.rules`.

``python -m pipeline.experiments.training.judge`` prints the model's rates at the declared noise levels;
``--write`` measures the declared table again and stores it in ``error_rates.json`` (minutes)."""

import itertools
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from precisionkit.decide import holm, paired_margin_test, student_t_quantile

from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from .rules import (
    CONFIDENCE,
    JUDGED_METRICS,
    MARGINS,
    MEASURED_DRAWS,
    MEASURED_DRAWS_THIS_RUN,
    MEASURED_EFFECTS,
    MEASURED_POINTS,
    MIN_ORDERS,
    MIN_ORDERS_TO_CONTRADICT,
    MIN_POINTS,
    PLAN_EFFECT_IN_MARGINS,
    POWER_DRAWS,
    POWER_EFFECTS,
    POWER_NOISE_IN_MARGINS,
    POWER_SEED,
    RELATIVE_METRICS,
    STATISTICS,
)


def is_finite(v: object) -> TypeGuard[float]:
    """Whether ``v`` is a finite number (not None, NaN or infinite)."""
    return isinstance(v, (int, float)) and math.isfinite(v)


def all_finite(values: Sequence[float | None]) -> list[float] | None:
    """``values`` when every one is a finite number, else None."""
    finite = [v for v in values if is_finite(v)]
    return finite if len(finite) == len(values) else None


def rms(values: Sequence[float | None]) -> float | None:
    """Root mean square of the finite values (None when there are none)."""
    vals = [v for v in values if is_finite(v)]
    return math.sqrt(sum(v * v for v in vals) / len(vals)) if vals else None


def paired_difference(metric: str, other: float, eager: float) -> float:
    """``other - eager`` in the metric's unit, or relative to eager for :data:`.rules.RELATIVE_METRICS`
    (NaN when eager is 0 there).

    >>> paired_difference("eval_loss", 2.51, 2.5) == 2.51 - 2.5, paired_difference("grad_norm", 1.1, 1.0)
    (True, 0.10000000000000009)
    """
    if metric in RELATIVE_METRICS:
        return other / eager - 1.0 if eager != 0 else math.nan
    return other - eager


def curve_statistics(steps: Sequence[float], values: Sequence[float]) -> dict[str, float]:
    """The rule's statistics of one curve at its judged points: ``final`` (last value), ``area`` (mean)
    and ``drift`` (least-squares slope times the span of the steps).

    >>> curve_statistics([10, 20, 30, 40], [0.0, 0.25, 0.5, 0.75])
    {'final': 0.75, 'area': 0.375, 'drift': 0.75}
    """
    t = np.asarray(steps, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    tc = t - t.mean()
    slope = float((tc * (y - y.mean())).sum() / (tc * tc).sum()) if len(t) > 1 and (tc != 0).any() else 0.0
    return {"final": float(y[-1]), "area": float(y.mean()), "drift": round(slope * float(t[-1] - t[0]), 15)}


@dataclass(frozen=True)
class StatisticTest:
    """One metric x statistic of the rule: the paired differences' mean and interval against the
    pre-registered margin, and the same test of the one-ULP controls (``control_*``; None without them).
    ``order_sd`` (the eager runs' sd over data orders) is shown for scale and decides nothing."""

    metric: str
    statistic: str
    orders: int
    mean: float
    sd: float
    lower: float
    upper: float
    margin: float
    order_sd: float
    p_equivalent: float
    p_beyond: float
    p_holm: float = 1.0
    control_orders: int = 0
    control_mean: float | None = None
    control_sd: float | None = None
    control_p_equivalent: float | None = None

    @property
    def equivalent(self) -> bool:
        return self.p_equivalent <= 1.0 - CONFIDENCE

    @property
    def control_equivalent(self) -> bool:
        return self.control_p_equivalent is not None and self.control_p_equivalent <= 1.0 - CONFIDENCE

    def row(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "statistic": self.statistic,
            "orders": self.orders,
            "mean_fused_minus_eager": self.mean,
            "sd": self.sd,
            "lower": self.lower,
            "upper": self.upper,
            "margin": self.margin,
            "p_equivalent": self.p_equivalent,
            "p_beyond": self.p_beyond,
            "p_beyond_holm": self.p_holm,
            "equivalent": self.equivalent,
            "control_mean": self.control_mean,
            "control_sd": self.control_sd,
            "control_equivalent": self.control_equivalent,
            "order_sd": self.order_sd,
        }


@dataclass(frozen=True)
class TrainingJudgement:
    """:data:`.rules.RULE` applied to E's curves: the verdict, why, and every test it rests on."""

    verdict: str
    reason: str
    orders: int
    judged_points: int
    tests: list[StatisticTest] = field(default_factory=list)

    def test(self, metric: str, statistic: str) -> StatisticTest | None:
        return next((t for t in self.tests if (t.metric, t.statistic) == (metric, statistic)), None)

    def metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {"orders": self.orders, "judged_points": self.judged_points}
        for t in self.tests:
            key = f"{t.metric}.{t.statistic}"
            out[f"{key}.mean_fused_minus_eager"] = t.mean
            out[f"{key}.sd"] = t.sd
            out[f"{key}.margin"] = t.margin
            out[f"{key}.p_beyond_holm"] = t.p_holm
            out[f"{key}.p_equivalent"] = t.p_equivalent
            if t.control_sd is not None:
                out[f"{key}.control_sd"] = t.control_sd
        return out


#: One metric's curves per data order: ``(eager, other)`` values at every eval step, ``other`` being the
#: fused run (or, for the controls, the one-ULP control run) on that order.
Pairs = Mapping[str, tuple[Sequence[float | None], Sequence[float | None]]]


def _difference_statistics(
    metric: str, steps: list[int], judged: list[int], pairs: Pairs
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Per data order whose judged points are all finite: the eager curve's statistics and those of
    the paired difference curve (:func:`paired_difference` at every judged point)."""
    eager_stats, diff_stats = [], []
    t = [steps[i] for i in judged]
    for eager, other in pairs.values():
        e = all_finite([eager[i] for i in judged])
        o = all_finite([other[i] for i in judged])
        if e is None or o is None:
            continue
        d = [paired_difference(metric, a, b) for a, b in zip(o, e, strict=True)]
        if not all(math.isfinite(v) for v in d):
            continue
        eager_stats.append(curve_statistics(t, e))
        diff_stats.append(curve_statistics(t, d))
    return eager_stats, diff_stats


def _metric_tests(
    metric: str, steps: list[int], judged: list[int], pairs: Pairs, controls: Pairs | None
) -> list[StatisticTest]:
    """The three tests of one metric over the data orders whose judged points are all finite, each with
    the same test of the controls' differences where at least two controls are finite."""
    eager_stats, diff_stats = _difference_statistics(metric, steps, judged, pairs)
    _, control_stats = _difference_statistics(metric, steps, judged, controls or {})
    k = len(diff_stats)
    if k < 2:
        return []
    margin = MARGINS[metric]
    tests = []
    for stat in STATISTICS:
        base = "final" if stat == "drift" else stat  # a drift is put beside the final value's spread
        order_sd = float(np.std([s[base] for s in eager_stats], ddof=1))
        r = paired_margin_test([s[stat] for s in diff_stats], margin, CONFIDENCE)
        c = paired_margin_test([s[stat] for s in control_stats], margin, CONFIDENCE) if len(control_stats) > 1 else None
        tests.append(
            StatisticTest(
                metric,
                stat,
                k,
                r.mean,
                r.sd,
                r.lower,
                r.upper,
                margin,
                order_sd,
                r.p_equivalent,
                r.p_beyond,
                control_orders=len(control_stats),
                control_mean=c.mean if c else None,
                control_sd=c.sd if c else None,
                control_p_equivalent=c.p_equivalent if c else None,
            )
        )
    return tests


def _nonfinite(steps: list[int], judged: list[int], metrics: Mapping[str, Pairs]) -> list[str]:
    """Where fused is non-finite while eager is finite, as ``metric/order@step``."""
    out = []
    for metric, pairs in metrics.items():
        for order, (eager, fused) in pairs.items():
            bad = [steps[i] for i in judged if is_finite(eager[i]) and not is_finite(fused[i])]
            if bad:
                out.append(f"{metric}/{order}@{bad[0]}")
    return out


def judge_training(
    steps: Sequence[int], metrics: Mapping[str, Pairs], controls: Mapping[str, Pairs] | None = None
) -> TrainingJudgement:
    """:data:`.rules.RULE` on E's curves: ``metrics`` maps each judged metric to its ``(eager, fused)``
    curves per data order, ``controls`` to its ``(eager, one-ULP control)`` curves, one value per entry
    of ``steps``. Step 0 is not judged (one shared init)."""
    steps = [int(s) for s in steps]
    controls = controls or {}
    for metric, pairs in (*metrics.items(), *controls.items()):
        for order, curves in pairs.items():
            if any(len(c) != len(steps) for c in curves):
                raise ValueError(f"{metric}/{order}: every curve needs one value per eval step ({len(steps)})")
    judged = [i for i, s in enumerate(steps) if s > 0]
    orders = min((len(p) for p in metrics.values()), default=0)
    bad = _nonfinite(steps, judged, metrics)
    tests = [
        t for m in JUDGED_METRICS if m in metrics for t in _metric_tests(m, steps, judged, metrics[m], controls.get(m))
    ]
    if tests:
        rejected, adjusted = holm([t.p_beyond for t in tests], alpha=1.0 - CONFIDENCE)
        tests = [StatisticTest(**{**t.__dict__, "p_holm": float(p)}) for t, p in zip(tests, adjusted, strict=True)]
    else:
        rejected = np.zeros(0, dtype=bool)

    def result(verdict: str, reason: str) -> TrainingJudgement:
        return TrainingJudgement(verdict, reason, orders, len(judged), tests)

    if bad:
        return result(CONTRADICTED, f"fused non-finite where eager is finite: {', '.join(bad[:5])}")
    beyond = [t for t, r in zip(tests, rejected, strict=True) if r]
    if beyond and orders >= MIN_ORDERS_TO_CONTRADICT:
        worst = min(beyond, key=lambda t: t.p_holm)
        return result(
            CONTRADICTED,
            f"{len(beyond)} of {len(tests)} tests beyond the margin; worst {worst.metric} {worst.statistic}: mean "
            f"fused - eager {worst.mean:+.4g} (sd {worst.sd:.2g}) over {worst.orders} orders, margin "
            f"{worst.margin:g}, Holm p {worst.p_holm:.2g}",
        )
    if orders < MIN_ORDERS:
        return result(INCONCLUSIVE, f"{orders} data orders, the rule needs {MIN_ORDERS}")
    if len(judged) < MIN_POINTS:
        return result(INCONCLUSIVE, f"{len(judged)} judged eval points, the rule needs {MIN_POINTS}")
    open_ = [t for t in tests if not t.equivalent]
    if len(tests) < len(JUDGED_METRICS) * len(STATISTICS) or open_:
        names = ", ".join(f"{t.metric} {t.statistic}" for t in open_) or "tests missing"
        return result(INCONCLUSIVE, f"neither beyond the margin nor shown equivalent: {names}")
    loud = [t for t in tests if not t.control_equivalent]
    if loud:
        names = ", ".join(
            f"{t.metric} {t.statistic}" + (f" (control sd {t.control_sd:.2g})" if t.control_sd is not None else "")
            for t in loud
        )
        return result(
            INCONCLUSIVE,
            f"fused is within the margin, but the one-ULP controls are not shown within it (rounding alone moves "
            f"training by about the margin, or the controls are missing): {names}",
        )
    widest = max(tests, key=lambda t: max(abs(t.lower), abs(t.upper)) / t.margin)
    return result(
        SUPPORTED,
        f"all {len(tests)} tests equivalent within their margins and so are the one-ULP controls; closest to its "
        f"margin: {widest.metric} {widest.statistic}, interval [{widest.lower:+.4g}, {widest.upper:+.4g}] vs margin "
        f"{widest.margin:g}",
    )


def control_rank_test(fused_dev: Sequence[float], control_dev: Sequence[float]) -> tuple[float, float]:
    """Exact rank test of |fused - eager| against |control - eager| (one per data order): the
    Mann-Whitney U of fused's sizes over the controls' and P(U >= observed) over every split of the
    pooled sizes. Small: fusion moves training further than a one-ULP perturbation of the weights.

    >>> control_rank_test([0.5, 0.6, 0.7], [0.1, 0.2, 0.3])
    (9.0, 0.05)
    """
    f = [abs(v) for v in fused_dev]
    c = [abs(v) for v in control_dev]

    def u(xs: Sequence[float], ys: Sequence[float]) -> float:
        return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in xs for y in ys)

    observed = u(f, c)
    pooled = f + c
    splits = list(itertools.combinations(range(len(pooled)), len(f)))
    hits = 0
    for chosen in splits:
        xs = [pooled[i] for i in chosen]
        ys = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += u(xs, ys) >= observed - 1e-12
    return observed, hits / len(splits)


# --- the rule's error rates, simulated -------------------------------------------------------------

#: Every test of the rule, in family order: (metric, statistic).
TESTS = tuple((m, s) for m in JUDGED_METRICS for s in STATISTICS)


def _effect_means(shape: str, delta: float) -> dict[str, float]:
    """What an eval-loss effect of ``delta`` does to the three statistics: a constant ``shift`` moves the
    final value and the area by it; a ``drift`` growing linearly from 0 moves the final value and the
    drift by it and the area by half."""
    if shape == "shift":
        return {"final": delta, "area": delta, "drift": 0.0}
    return {"final": delta, "area": delta / 2, "drift": delta}


def simulate_rule(
    fused_sd: Mapping[tuple[str, str], float],
    control_sd: Mapping[tuple[str, str], float],
    orders: int,
    *,
    effects: Sequence[float] = POWER_EFFECTS,
    draws: int = POWER_DRAWS,
    seed: int = POWER_SEED,
) -> list[dict[str, Any]]:
    """The verdicts a normal model of the rule gives (not the page's figures: :func:`measured_error_rates`
    runs the judge itself). Per draw, each of the nine tests gets ``orders`` normal
    paired differences with the given sd (fused) and so does each control test (true mean 0); the rule
    sees only those draws: their mean, and their sd with ``orders - 1`` degrees of freedom, exactly as
    :func:`judge_training` estimates it. The eval loss carries an effect of ``effects`` margins (as a
    shift and as a drift, :func:`_effect_means`); the other metrics are at 0.

    "contradicted" is Holm's first step (any p <= alpha / 9 rejects, the same event as Holm rejecting
    anything); "supported" needs all nine fused TOSTs and all nine control TOSTs. The tests are drawn
    independently: the statistics of one curve are positively correlated in a real run, which makes
    "any of nine rejects" rarer, so the false-alarm rates here are upper bounds in that respect.
    Common random numbers across effects keep the rows comparable."""
    k = orders
    family = len(TESTS)
    alpha = 1.0 - CONFIDENCE
    t_beyond = student_t_quantile(1.0 - alpha / (2 * family), k - 1)
    t_equiv = student_t_quantile(CONFIDENCE, k - 1)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((2, family, draws, k))
    zm, zs = z.mean(axis=-1), z.std(axis=-1, ddof=1) / math.sqrt(k)  # standardized mean and its se
    margins = np.array([MARGINS[m] for m, _ in TESTS])[:, None]
    f_sd = np.array([fused_sd[t] for t in TESTS])[:, None]
    c_sd = np.array([control_sd[t] for t in TESTS])[:, None]
    c_mean, c_se = c_sd * zm[1], c_sd * zs[1]
    controls_within = (np.abs(c_mean) + t_equiv * c_se < margins).all(axis=0)
    out = []
    for shape in ("shift", "drift"):
        for effect in effects:
            if shape == "drift" and effect == 0.0:
                continue  # a drift of 0 is the shift of 0
            delta = effect * MARGINS["eval_loss"]
            shift = _effect_means(shape, delta)
            mu = np.array([shift[s] if m == "eval_loss" else 0.0 for m, s in TESTS])[:, None]
            mean, se = mu + f_sd * zm[0], f_sd * zs[0]
            contradicted = ((np.abs(mean) - margins) > t_beyond * se).any(axis=0)
            supported = ~contradicted & (np.abs(mean) + t_equiv * se < margins).all(axis=0) & controls_within
            out.append(
                {
                    "effect": shape,
                    "size_in_margins": effect,
                    "size_nats": delta,
                    "p_contradicted": float(contradicted.mean()),
                    "p_supported": float(supported.mean()),
                }
            )
    return out


def rule_error_rates(
    j: TrainingJudgement,
    *,
    noise_in_margins: Sequence[float] = POWER_NOISE_IN_MARGINS,
    draws: int = POWER_DRAWS,
    seed: int = POWER_SEED,
) -> list[dict[str, Any]]:
    """:func:`simulate_rule` at this run's measured paired noise (each test's sd over data orders, fused
    and control; only when all nine tests and their controls were computed) and at each declared noise
    level (every sd that many margins), with ``j.orders`` data orders (at least :data:`.rules.MIN_ORDERS`
    for the declared levels). One row per noise x effect, with a ``noise`` label."""
    rows: list[dict[str, Any]] = []
    by_test = {(t.metric, t.statistic): t for t in j.tests}
    if set(by_test) == set(TESTS) and j.orders >= 2 and all(t.control_sd is not None for t in j.tests):
        fused = {k: t.sd for k, t in by_test.items()}
        control = {k: float(t.control_sd or 0.0) for k, t in by_test.items()}
        rows += [{"noise": "this run", **r} for r in simulate_rule(fused, control, j.orders, draws=draws, seed=seed)]
    for level in noise_in_margins:
        sd = {(m, s): level * MARGINS[m] for m, s in TESTS}
        orders = max(j.orders, MIN_ORDERS)
        rows += [{"noise": f"sd {level:g} margin", **r} for r in simulate_rule(sd, sd, orders, draws=draws, seed=seed)]
    return rows


def error_rate_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per noise level of :func:`rule_error_rates`: the largest false-alarm rate (contradicted below the
    margin), the largest rate of "supported" at or beyond it, and the power at 1, 1.5 and 2 margins
    (smallest over the effect shapes), as flat ``<noise>.<name>`` entries."""
    out: dict[str, float] = {}
    for noise in dict.fromkeys(r["noise"] for r in rows):
        part = [r for r in rows if r["noise"] == noise]
        key = noise.replace(" ", "_")
        below = [r["p_contradicted"] for r in part if r["size_in_margins"] < 1.0]
        at_or_beyond = [r["p_supported"] for r in part if r["size_in_margins"] >= 1.0]
        out[f"{key}.false_alarm_below_margin"] = max(below) if below else math.nan
        out[f"{key}.supported_at_or_beyond_margin"] = max(at_or_beyond) if at_or_beyond else math.nan
        for size in (1.0, 1.5, 2.0):
            hits = [r["p_contradicted"] for r in part if r["size_in_margins"] == size]
            if hits:
                out[f"{key}.power_at_{size:g}_margin"] = min(hits)
    return out


def main() -> None:
    """Print the rule's simulated error rates at the declared noise levels (no run needed)."""
    empty = TrainingJudgement(INCONCLUSIVE, "", MIN_ORDERS, MIN_POINTS)
    print(f"{'noise':<16} {'effect':<6} {'margins':>7} {'P(contradicted)':>16} {'P(supported)':>13}")
    for r in rule_error_rates(empty):
        print(
            f"{r['noise']:<16} {r['effect']:<6} {r['size_in_margins']:>7g} {r['p_contradicted']:>16.4f} "
            f"{r['p_supported']:>13.4f}"
        )


# --- the rule's error rates, measured by running the judge on simulated curves ---------------------------

#: The shapes of paired noise the measurement draws: normal, and Student t with 3 degrees of freedom scaled to
#: the same sd (heavy tails: a data order now and then far off, as a loss spike makes one).
NOISE_TAILS = ("normal", "heavy")


def _noise(rng: np.random.Generator, tails: str, shape: tuple[int, ...]) -> np.ndarray:
    if tails == "normal":
        return rng.standard_normal(shape)
    if tails == "heavy":
        return rng.standard_t(3, shape) / math.sqrt(3.0)  # t3 has variance 3
    raise ValueError(f"tails must be one of {NOISE_TAILS}, got {tails!r}")


def _healthy_curve(metric: str, t: np.ndarray, order_shift: float) -> np.ndarray:
    """A healthy training curve of ``metric`` at steps ``t`` (a loss decaying toward 2 nats, a gradient norm
    decaying toward 0.5), moved by the data order's own ``order_shift``."""
    decay = np.exp(-t / max(float(t[-1]), 1.0) * 3.0)
    if metric == "grad_norm":
        return 0.5 + 0.5 * decay + 0.05 * order_shift
    return 2.0 + 3.0 * decay + 0.05 * order_shift


def simulated_curves(
    rng: np.random.Generator,
    noise: Mapping[str, float],
    *,
    tails: str = "normal",
    effect: tuple[str, float] = ("shift", 0.0),
    orders: int = MIN_ORDERS,
    points: int = 10,
) -> tuple[list[int], dict[str, Pairs], dict[str, Pairs]]:
    """One simulated E run, as :func:`judge_training` takes it: ``points`` judged eval points after step 0 and,
    per metric and data order, a healthy eager curve, the fused curve and the one-ULP control. Fused - eager on
    an order (relative to eager for the grad norm) is that order's offset plus its drift across the run plus
    per-point noise: the offset and the drift each with sd ``noise[metric]``, the per-point noise with half of
    it, drawn with ``tails``; the control's the same with no effect. ``effect`` (``("shift", d)``: ``d`` nats on
    the eval loss at every point; ``("drift", d)``: growing linearly from 0 at step 0 to ``d`` at the last)
    is added to fused's eval loss only."""
    steps = [15 * i for i in range(points + 1)]
    t = np.asarray(steps, dtype=np.float64)
    ramp = t / t[-1]
    shape, size = effect
    planted = np.full(t.shape, size) if shape == "shift" else size * ramp
    planted[0] = 0.0
    metrics: dict[str, Pairs] = {}
    controls: dict[str, Pairs] = {}
    for metric in JUDGED_METRICS:
        sd = noise[metric]
        fused_pairs, control_pairs = {}, {}
        for o in range(orders):
            eager = _healthy_curve(metric, t, float(rng.standard_normal()))
            curves = []
            for with_effect in (True, False):
                offset, drift = _noise(rng, tails, (2,)) * sd
                d = offset + drift * (ramp - 0.5) + _noise(rng, tails, t.shape) * sd / 2
                d[0] = 0.0  # one shared initialization: no difference at step 0
                if with_effect and metric == "eval_loss":
                    d = d + planted
                curves.append(eager * (1.0 + d) if metric in RELATIVE_METRICS else eager + d)
            key = "ABCDEFGHIJ"[o] if o < 10 else f"o{o}"
            fused_pairs[key] = (eager.tolist(), curves[0].tolist())
            control_pairs[key] = (eager.tolist(), curves[1].tolist())
        metrics[metric], controls[metric] = fused_pairs, control_pairs
    return steps, metrics, controls


def measured_error_rates(
    noise: Mapping[str, float],
    *,
    tails: str = "normal",
    effects: Sequence[tuple[str, float]],
    draws: int,
    seed: int = POWER_SEED,
    orders: int = MIN_ORDERS,
    points: int = 10,
) -> list[dict[str, Any]]:
    """The rule's verdict rates measured by running :func:`judge_training` itself on ``draws`` simulated runs
    (:func:`simulated_curves`) per effect, at paired noise ``noise`` (sd per metric in its unit) with ``tails``.
    Each effect is ``(shape, size in margins of the eval loss)``. One row per effect: how often the judge said
    contradicted and supported, with their Monte-Carlo standard errors. Each effect's draws are seeded the same
    (common random numbers), so the rows are comparable."""
    out = []
    for shape, size in effects:
        rng = np.random.default_rng(seed)
        counts = {CONTRADICTED: 0, SUPPORTED: 0, INCONCLUSIVE: 0}
        for _ in range(draws):
            steps, metrics, controls = simulated_curves(
                rng,
                noise,
                tails=tails,
                effect=(shape, size * MARGINS["eval_loss"]),
                orders=orders,
                points=points,
            )
            counts[judge_training(steps, metrics, controls).verdict] += 1
        pc, ps = counts[CONTRADICTED] / draws, counts[SUPPORTED] / draws
        out.append(
            {
                "effect": shape,
                "size_in_margins": size,
                "size_nats": size * MARGINS["eval_loss"],
                "p_contradicted": pc,
                "p_supported": ps,
                "se_contradicted": math.sqrt(pc * (1 - pc) / draws),
                "se_supported": math.sqrt(ps * (1 - ps) / draws),
                "draws": draws,
            }
        )
    return out


#: Where the declared table is kept: running the judge on every simulated run takes minutes, so it is computed
#: once (``python -m pipeline.experiments.training.judge --write``) and read back while the rule is unchanged.
MEASURED_TABLE = Path(__file__).with_name("error_rates.json")


def rule_fingerprint() -> dict[str, Any]:
    """What the declared table depends on: the rule's parameters and the simulation's. A stored table whose
    fingerprint differs is not used."""
    return {
        "margins": dict(MARGINS),
        "confidence": CONFIDENCE,
        "min_orders": MIN_ORDERS,
        "min_orders_to_contradict": MIN_ORDERS_TO_CONTRADICT,
        "min_points": MIN_POINTS,
        "tests": [list(t) for t in TESTS],
        "effects": [list(e) for e in MEASURED_EFFECTS],
        "noise_in_margins": list(POWER_NOISE_IN_MARGINS),
        "tails": list(NOISE_TAILS),
        "draws": MEASURED_DRAWS,
        "points": MEASURED_POINTS,
        "seed": POWER_SEED,
    }


def compute_declared_error_rates(draws: int = MEASURED_DRAWS, seed: int = POWER_SEED) -> list[dict[str, Any]]:
    """:func:`measured_error_rates` at every declared noise level (every sd that many margins) and tail shape,
    with :data:`.rules.MIN_ORDERS` data orders and :data:`.rules.MEASURED_POINTS` judged points."""
    rows: list[dict[str, Any]] = []
    for level in POWER_NOISE_IN_MARGINS:
        noise = {m: level * MARGINS[m] for m in JUDGED_METRICS}
        for tails in NOISE_TAILS:
            rates = measured_error_rates(
                noise, tails=tails, effects=MEASURED_EFFECTS, draws=draws, seed=seed, points=MEASURED_POINTS
            )
            rows += [{"noise": f"sd {level:g} margin, {tails}", **r} for r in rates]
    return rows


def declared_error_rates() -> list[dict[str, Any]]:
    """The declared table: read from :data:`MEASURED_TABLE` when its fingerprint is this rule's, else computed."""
    if MEASURED_TABLE.exists():
        stored = json.loads(MEASURED_TABLE.read_text())
        if stored.get("fingerprint") == rule_fingerprint():
            return list(stored["rows"])
    return compute_declared_error_rates()


def this_run_error_rates(j: TrainingJudgement, *, draws: int = MEASURED_DRAWS_THIS_RUN) -> list[dict[str, Any]]:
    """:func:`measured_error_rates` at this run's paired noise (per metric, the largest sd of its three statistics
    over the data orders), orders and judged points, for the effects around the margin and the plan's; empty
    when the run has too few tests to say its noise."""
    by_metric: dict[str, float] = {}
    for t in j.tests:
        by_metric[t.metric] = max(by_metric.get(t.metric, 0.0), t.sd, t.control_sd or 0.0)
    if set(by_metric) != set(JUDGED_METRICS) or j.orders < 2 or j.judged_points < 2:
        return []
    effects = [("shift", 0.99), ("drift", 0.99), ("shift", 1.0), ("shift", PLAN_EFFECT_IN_MARGINS), ("shift", 2.0)]
    rates = measured_error_rates(
        by_metric, effects=effects, draws=draws, orders=j.orders, points=min(j.judged_points, 50)
    )
    return [{"noise": "this run", **r} for r in rates]


def smallest_detected_effect(rows: Sequence[Mapping[str, Any]], power: float = 0.8) -> dict[str, float | None]:
    """Per noise of ``rows``: the smallest shift (in margins) the judge contradicted in at least ``power`` of the
    simulated runs; None where no size measured reaches it."""
    out: dict[str, float | None] = {}
    for noise in dict.fromkeys(r["noise"] for r in rows):
        hits = sorted(
            r["size_in_margins"]
            for r in rows
            if r["noise"] == noise and r["effect"] == "shift" and r["p_contradicted"] >= power
        )
        out[noise] = hits[0] if hits else None
    return out


def measured_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per noise of the measured rows: the largest false-alarm rate below the margin (and the effect it is at),
    the largest rate of "supported" at or beyond it, and the power at the plan's effect (smallest over shapes),
    as flat ``<noise>.<name>`` entries."""
    out: dict[str, float] = {}
    for noise in dict.fromkeys(r["noise"] for r in rows):
        part = [r for r in rows if r["noise"] == noise]
        key = noise.replace(" ", "_").replace(",", "")
        below = [r["p_contradicted"] for r in part if r["size_in_margins"] < 1.0]
        beyond = [r["p_supported"] for r in part if r["size_in_margins"] >= 1.0]
        plan = [r["p_contradicted"] for r in part if r["size_in_margins"] == PLAN_EFFECT_IN_MARGINS]
        out[f"{key}.false_alarm_below_margin"] = max(below) if below else math.nan
        out[f"{key}.supported_at_or_beyond_margin"] = max(beyond) if beyond else math.nan
        if plan:
            out[f"{key}.power_at_plan_effect"] = min(plan)
    return out


def low_power_note(rows: Sequence[Mapping[str, Any]]) -> str:
    """A sentence for the verdict when the judge's measured power at the plan's effect, at this run's noise, is
    below one half; empty otherwise (or when not measured)."""
    plan = [
        r["p_contradicted"] for r in rows if r["noise"] == "this run" and r["size_in_margins"] == PLAN_EFFECT_IN_MARGINS
    ]
    if not plan or min(plan) >= 0.5:
        return ""
    return (
        f" The rule has low power here: at this run's paired noise it contradicts a {PLAN_EFFECT_IN_MARGINS:g}-margin "
        f"shift of the eval loss in {min(plan):.0%} of simulated runs (measured by running the judge)."
    )


def write_declared_error_rates() -> None:
    rows = compute_declared_error_rates()
    MEASURED_TABLE.write_text(json.dumps({"fingerprint": rule_fingerprint(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write_declared_error_rates()
    else:
        main()
