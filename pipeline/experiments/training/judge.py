"""E's decision rule as pure functions of the curves (:func:`judge_training`), the one-ULP controls'
rank null (:func:`control_rank_test`, a finding) and the rule's simulated power (:func:`power_table`).
The rule's parameters are in :mod:`.rules`."""

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from precisionkit.decide import holm, paired_margin_test, student_t_sf

from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from .rules import (
    CONFIDENCE,
    JUDGED_METRICS,
    MARGIN_ORDER_SDS,
    MIN_ORDERS,
    MIN_ORDERS_TO_CONTRADICT,
    MIN_POINTS,
    POWER_DRAWS,
    POWER_EFFECTS,
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


def curve_statistics(steps: Sequence[float], values: Sequence[float]) -> dict[str, float]:
    """The rule's statistics of one curve at its judged points: ``final`` (last value), ``area`` (mean)
    and ``drift`` (least-squares slope times the span of the steps).

    >>> curve_statistics([10, 20, 30, 40], [0.0, 0.1, 0.2, 0.3])
    {'final': 0.3, 'area': 0.15, 'drift': 0.3}
    """
    t = np.asarray(steps, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    tc = t - t.mean()
    slope = float((tc * (y - y.mean())).sum() / (tc * tc).sum()) if len(t) > 1 and (tc != 0).any() else 0.0
    return {"final": float(y[-1]), "area": float(y.mean()), "drift": round(slope * float(t[-1] - t[0]), 15)}


@dataclass(frozen=True)
class StatisticTest:
    """One metric x statistic of the rule: the paired differences' mean and interval against the margin."""

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

    @property
    def equivalent(self) -> bool:
        return self.margin > 0 and self.p_equivalent <= 1.0 - CONFIDENCE

    def row(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "statistic": self.statistic,
            "orders": self.orders,
            "mean_fused_minus_eager": self.mean,
            "sd": self.sd,
            "lower": self.lower,
            "upper": self.upper,
            "order_sd": self.order_sd,
            "margin": self.margin,
            "p_equivalent": self.p_equivalent,
            "p_beyond": self.p_beyond,
            "p_beyond_holm": self.p_holm,
            "equivalent": self.equivalent,
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
            out[f"{key}.margin"] = t.margin
            out[f"{key}.p_beyond_holm"] = t.p_holm
            out[f"{key}.p_equivalent"] = t.p_equivalent
        return out


#: One metric's curves per data order: ``(eager, fused)`` values at every eval step.
Pairs = Mapping[str, tuple[Sequence[float | None], Sequence[float | None]]]


def _metric_tests(metric: str, steps: list[int], judged: list[int], pairs: Pairs) -> list[StatisticTest]:
    """The three tests of one metric over the data orders whose judged points are all finite."""
    eager_stats, diff_stats = [], []
    for eager, fused in pairs.values():
        e = all_finite([eager[i] for i in judged])
        f = all_finite([fused[i] for i in judged])
        if e is None or f is None:
            continue
        t = [steps[i] for i in judged]
        eager_stats.append(curve_statistics(t, e))
        diff_stats.append(curve_statistics(t, [a - b for a, b in zip(f, e, strict=True)]))
    k = len(diff_stats)
    if k < 2:
        return []
    tests = []
    for stat in STATISTICS:
        base = "final" if stat == "drift" else stat  # a drift is judged against the final value's spread
        order_sd = float(np.std([s[base] for s in eager_stats], ddof=1))
        margin = MARGIN_ORDER_SDS * order_sd
        r = paired_margin_test([s[stat] for s in diff_stats], margin, CONFIDENCE)
        tests.append(
            StatisticTest(metric, stat, k, r.mean, r.sd, r.lower, r.upper, margin, order_sd, r.p_equivalent, r.p_beyond)
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


def judge_training(steps: Sequence[int], metrics: Mapping[str, Pairs]) -> TrainingJudgement:
    """:data:`.rules.RULE` on E's curves: ``metrics`` maps each judged metric to its ``(eager, fused)``
    curves per data order, one value per entry of ``steps``. Step 0 is not judged (one shared init)."""
    steps = [int(s) for s in steps]
    for metric, pairs in metrics.items():
        for order, curves in pairs.items():
            if any(len(c) != len(steps) for c in curves):
                raise ValueError(f"{metric}/{order}: every curve needs one value per eval step ({len(steps)})")
    judged = [i for i, s in enumerate(steps) if s > 0]
    orders = min((len(p) for p in metrics.values()), default=0)
    bad = _nonfinite(steps, judged, metrics)
    tests = [t for m in JUDGED_METRICS if m in metrics for t in _metric_tests(m, steps, judged, metrics[m])]
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
            f"fused - eager {worst.mean:+.4g} over {worst.orders} orders, margin {worst.margin:.4g} "
            f"({MARGIN_ORDER_SDS:g} data-order sd), Holm p {worst.p_holm:.2g}",
        )
    if orders < MIN_ORDERS:
        return result(INCONCLUSIVE, f"{orders} data orders, the rule needs {MIN_ORDERS}")
    if len(judged) < MIN_POINTS:
        return result(INCONCLUSIVE, f"{len(judged)} judged eval points, the rule needs {MIN_POINTS}")
    zero = [f"{t.metric} {t.statistic}" for t in tests if t.margin <= 0]
    if zero:
        return result(INCONCLUSIVE, f"no data-order variation to judge against: margin 0 for {', '.join(zero)}")
    open_ = [t for t in tests if not t.equivalent]
    if len(tests) == len(JUDGED_METRICS) * len(STATISTICS) and not open_:
        widest = max(tests, key=lambda t: max(abs(t.lower), abs(t.upper)) / t.margin)
        return result(
            SUPPORTED,
            f"all {len(tests)} tests equivalent within +-{MARGIN_ORDER_SDS:g} data-order sd; closest to its margin: "
            f"{widest.metric} {widest.statistic}, interval [{widest.lower:+.4g}, {widest.upper:+.4g}] vs margin "
            f"{widest.margin:.4g}",
        )
    names = ", ".join(f"{t.metric} {t.statistic}" for t in open_) or "tests missing"
    return result(INCONCLUSIVE, f"neither beyond the margin nor shown equivalent: {names}")


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


def _t_sf(t: np.ndarray, df: int) -> np.ndarray:
    return np.array([student_t_sf(float(x), df) for x in t])


def power_table(
    paired_sd: Mapping[str, float],
    order_sd: Mapping[str, float],
    orders: int,
    *,
    effects: Sequence[float] = POWER_EFFECTS,
    draws: int = POWER_DRAWS,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Detection rate of the rule, simulated: for each effect (in data-order sds of the final eval loss)
    as a constant shift and as a linear drift from 0, ``orders`` paired eval-loss differences per draw
    with the measured paired noise (``paired_sd`` per statistic) judged against the measured margins
    (``order_sd`` per statistic), the other six tests of the family at their null. Effect 0 gives the
    false-alarm rate. A shift moves final and area by the effect; a drift moves final and drift by it
    and area by half."""
    rng = np.random.default_rng(seed)
    family = len(JUDGED_METRICS) * len(STATISTICS)
    alpha = 1.0 - CONFIDENCE
    out = []
    for shape in ("shift", "drift"):
        for effect in (0.0, *effects):
            delta = effect * order_sd["final"]
            means = {
                "final": delta,
                "area": delta if shape == "shift" else delta / 2,
                "drift": 0.0 if shape == "shift" else delta,
            }
            p = []
            for stat in STATISTICS:
                margin = MARGIN_ORDER_SDS * order_sd["drift" if stat == "drift" else stat]
                x = means[stat] + paired_sd[stat] * rng.standard_normal((draws, orders))
                m, s = x.mean(1), x.std(1, ddof=1)
                se = np.maximum(s / math.sqrt(orders), 1e-300)
                p.append(np.minimum(1.0, 2.0 * _t_sf((np.abs(m) - margin) / se, orders - 1)))
            smallest = np.min(np.stack(p), axis=0)
            out.append(
                {
                    "effect": shape,
                    "size_in_order_sd": effect,
                    "size": delta,
                    "detected": float((smallest * family <= alpha).mean()),
                }
            )
            if effect == 0.0 and shape == "drift":
                out.pop()  # a drift of 0 is the shift of 0
    return out
