"""E's decision rule as a pure function of the eval points (:func:`judge_fused_curve`), and the
control finding (:func:`control_findings`). The rule's parameters are in :mod:`.rules`."""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from .rules import (
    CONTROL_FACTOR,
    ENVELOPE_WIDENING,
    FINAL_SPREAD_MULTIPLE,
    MAX_OUTSIDE_FRACTION,
    MIN_POINTS,
    REPLICATE_ORDERS,
)


@dataclass(frozen=True)
class CurveJudgement:
    """:data:`.rules.RULE` applied to one eval-loss curve: the verdict and the numbers it rests on."""

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


def is_finite(v: object) -> TypeGuard[float]:
    """Whether ``v`` is a finite number (not None, NaN or infinite)."""
    return isinstance(v, (int, float)) and math.isfinite(v)


def all_finite(values: Sequence[float | None]) -> list[float] | None:
    """``values`` when every one is a finite number, else None."""
    finite = [v for v in values if is_finite(v)]
    return finite if len(finite) == len(values) else None


def outside_widened(value: float | None, lo: float, hi: float, spread: float, widening: float) -> bool:
    """Whether ``value`` is non-finite or outside ``[lo, hi]`` widened by ``widening`` spreads."""
    return not is_finite(value) or value < lo - widening * spread or value > hi + widening * spread


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
        vals = all_finite([r[i] for r in replicates])
        if vals is None:
            spreads.append(None)
            continue
        lo, hi = min(vals), max(vals)
        spreads.append(hi - lo)
        if outside_widened(fused[i], lo, hi, hi - lo, widening):
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
    """:data:`.rules.RULE` on one curve: a pure function of the eval points (``replicates`` holds one
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
    if last is not None and is_finite(f_last := fused[last]) and is_finite(e_last := eager[last]):
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
    vals = [v for v in values if is_finite(v)]
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
