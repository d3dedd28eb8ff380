"""E's rule's error rates: measured by running the judge (:func:`.judge.judge_training`) on simulated runs
(:func:`measured_error_rates`): at the declared noise levels once, stored as E's power table (``power.json``,
written by ``python -m pipeline.experiments.training.power_study --write``; :func:`declared_error_rates` reads it
back), and at this run's noise by the claim check (:func:`this_run_error_rates`, stored with the claim as a table
of the same format, :func:`power_table`). :func:`simulate_rule` is a model of the judge (normal statistics, independent
tests), kept to compare: at a paired sd of 0.25 margin it gives a power of 0.64 at 1.5 margins where the judge
itself contradicts 0.43 of the runs.

``python -m pipeline.experiments.training.error_rates`` prints the model's rates at the declared noise levels."""

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from precisionkit.decide import student_t_quantile

from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from .judge import Pairs, TrainingJudgement, judge_training
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
                **counts,
            }
        )
    return out


#: E's power table, in the format every rule's measured power is stored in (``fusion-precision/power-table/1``,
#: :mod:`pipeline.pagekit.power`): running the judge on every simulated run takes minutes, so the declared
#: measurement is made once (``python -m pipeline.experiments.training.power_study --write``) and read back while
#: the rule is unchanged (the table's ``fingerprint``).
MEASURED_TABLE = Path(__file__).with_name("power.json")
#: The claim check the table is for, and the entries of its result the page reads to place a run in it: the data
#: orders (the table's n) and the run's paired noise in margins (the level of its noise conditions).
CHECK = "training_deviation:fused_learns_like_eager"
N_KEY, LEVEL_KEY = "orders", "paired_noise_in_margins"
#: The claim result's entry holding the table measured at this run's noise (the shared format's key for a run's own
#: table, ``pipeline.pagekit.power.RUN_TABLE_KEY``; tests/pipeline/test_e_power.py keeps the two equal).
RUN_POWER_KEY = "power.this_run"
#: Below this many margins an effect is immaterial: a "contradicted" there is a false alarm.
MATERIAL_IN_MARGINS = 1.0


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
            condition = {"noise": f"sd {level:g} margin, {tails}", "noise_in_margins": level, "tails": tails}
            rows += [{**condition, **r, "orders": MIN_ORDERS, "points": MEASURED_POINTS} for r in rates]
    return rows


def _row(condition: Mapping[str, Any], e: Mapping[str, Any]) -> dict[str, Any]:
    """A stored effect of the power table as a row of :func:`measured_error_rates`."""
    draws, c, s = e["replications"], e[CONTRADICTED], e[SUPPORTED]
    pc, ps = c / draws, s / draws
    return {
        "noise": condition["condition"],
        "noise_in_margins": condition.get("level"),
        "tails": condition.get("tails"),
        "effect": e["shape"],
        "size_in_margins": e["size"],
        "size_nats": e["size"] * MARGINS["eval_loss"],
        "p_contradicted": pc,
        "p_supported": ps,
        "se_contradicted": math.sqrt(pc * (1 - pc) / draws),
        "se_supported": math.sqrt(ps * (1 - ps) / draws),
        "draws": draws,
        CONTRADICTED: c,
        INCONCLUSIVE: e[INCONCLUSIVE],
        SUPPORTED: s,
        "orders": condition["n"],
        "points": MEASURED_POINTS,  # the fingerprint's
    }


def declared_error_rates() -> list[dict[str, Any]]:
    """The declared rows: read from the power table :data:`MEASURED_TABLE` when its fingerprint is this rule's,
    else measured again (minutes)."""
    if MEASURED_TABLE.exists():
        tables = json.loads(MEASURED_TABLE.read_text()).get("tables") or [{}]
        if tables[0].get("fingerprint") == rule_fingerprint():
            return [_row(size, e) for size in tables[0]["sizes"] for e in size["effects"]]
    return compute_declared_error_rates()


def _paired_noise(j: TrainingJudgement) -> dict[str, float]:
    """Per metric, the largest sd over the data orders of its statistics, fused's or the controls'."""
    by_metric: dict[str, float] = {}
    for t in j.tests:
        by_metric[t.metric] = max(by_metric.get(t.metric, 0.0), t.sd, t.control_sd or 0.0)
    return by_metric


def paired_noise_in_margins(j: TrainingJudgement) -> float | None:
    """This run's paired noise as the power table's conditions are stated: the largest of :func:`_paired_noise`
    in its metric's margins (None when a metric has no test)."""
    by_metric = _paired_noise(j)
    if set(by_metric) != set(JUDGED_METRICS):
        return None
    return max(by_metric[m] / MARGINS[m] for m in JUDGED_METRICS)


def this_run_error_rates(j: TrainingJudgement, *, draws: int = MEASURED_DRAWS_THIS_RUN) -> list[dict[str, Any]]:
    """:func:`measured_error_rates` at this run's paired noise (per metric, the largest sd of its three statistics
    over the data orders), orders and judged points, for the effects around the margin and the plan's; empty
    when the run has too few tests to say its noise."""
    by_metric = _paired_noise(j)
    level = paired_noise_in_margins(j)
    if level is None or j.orders < 2 or j.judged_points < 2:
        return []
    effects = [("shift", 0.99), ("drift", 0.99), ("shift", 1.0), ("shift", PLAN_EFFECT_IN_MARGINS), ("shift", 2.0)]
    points = min(j.judged_points, 50)
    rates = measured_error_rates(by_metric, effects=effects, draws=draws, orders=j.orders, points=points)
    noise = f"this run's, sd {level:.3g} margin (its noisiest metric), normal"
    condition = {"noise": noise, "noise_in_margins": level, "tails": "normal"}
    return [{**condition, **r, "orders": j.orders, "points": points} for r in rates]


def _power_effect(r: Mapping[str, Any]) -> dict[str, Any]:
    size = float(r["size_in_margins"])
    return {
        "effect": f"{r['effect']} {size:g} margin{'' if size == 1 else 's'} ({size * MARGINS['eval_loss']:g} nats)",
        "shape": r["effect"],
        "size": size,
        "healthy": size < MATERIAL_IN_MARGINS,
        "replications": r["draws"],
        **{v: r[v] for v in (CONTRADICTED, INCONCLUSIVE, SUPPORTED)},
    }


def power_table(
    rows: Sequence[Mapping[str, Any]], *, command: str, date: str, seed: int = POWER_SEED
) -> dict[str, Any]:
    """Measured rows (:func:`compute_declared_error_rates`, :func:`this_run_error_rates`) as one table of the
    shared power format: n the data orders, one condition per noise (its level the sd in margins), the effects in
    margins of the eval loss (those below 1 margin healthy: their "contradicted" are false alarms)."""
    sizes: dict[str, dict[str, Any]] = {}
    for r in rows:
        size = sizes.setdefault(
            r["noise"],
            {"n": r["orders"], "condition": r["noise"], "level": r["noise_in_margins"], "tails": r["tails"]},
        )
        size.setdefault("effects", []).append(_power_effect(r))
    draws = sorted({r["draws"] for r in rows})
    points = "/".join(str(p) for p in sorted({r.get("points", MEASURED_POINTS) for r in rows}))
    return {
        "checks": [CHECK],
        "kind": "measured",
        "unit": "margins",
        "threshold": MATERIAL_IN_MARGINS,
        "power": 0.8,
        "effect": f"on fused's eval loss, a shift at every judged point or a drift growing from 0 at step 0, of the "
        f"given number of margins ({MARGINS['eval_loss']:g} nats each); below 1 margin it is immaterial and a "
        "contradicted is a false alarm; a detection is the judge saying contradicted",
        "sample_size": "data orders, each with an eager, a fused and a one-ULP control run",
        "n_key": N_KEY,
        "level_key": LEVEL_KEY,
        "condition_name": "paired noise",
        "healthy_label": "below the margin",
        "replication_noun": "runs",
        "simulation": "healthy training curves per data order; fused and the one-ULP control each the eager curve "
        "plus paired noise (per order an offset and a drift, each of the condition's sd: at a declared level every "
        "metric's sd is that many of its margins, at a run's own noise each metric's is its largest measured sd; "
        "and per-point noise of half that), normal or heavy-tailed (Student t, 3 degrees of freedom, scaled to the "
        f"same sd); {points} judged eval points; every effect drawn with the same seed (common random numbers)",
        "scope": "pipeline.experiments.training.judge.judge_training, the function the claim check "
        "fused_learns_like_eager calls, on every simulated run: its verdict counted",
        "replications": draws[-1] if draws else 0,
        "seeds": [seed],
        "command": command,
        "date": date,
        "sizes": list(sizes.values()),
    }


if __name__ == "__main__":
    main()
