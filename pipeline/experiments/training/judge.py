"""E's decision rule as pure functions of the curves (:func:`judge_training`) and the one-ULP controls'
rank null (:func:`control_rank_test`, a finding). The rule's error rates, simulated and measured by running
this judge on simulated runs, are :mod:`.error_rates`; the rule's parameters are in :mod:`.rules`."""

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from precisionkit.decide import holm, paired_margin_test

from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from .rules import (
    CONFIDENCE,
    JUDGED_METRICS,
    MARGINS,
    MIN_ORDERS,
    MIN_ORDERS_TO_CONTRADICT,
    MIN_POINTS,
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
