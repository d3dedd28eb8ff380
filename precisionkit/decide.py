"""Decision statistics for paired comparisons of two execution paths on the same inputs.

Eager and fused results on the same input set are paired: these functions compare per-set
errors ``fused[i]`` and ``eager[i]`` (e.g. each set's worst error against fp64) without
assuming any distribution.

* :func:`sign_test`: exact one-sided binomial test that ``d_i = x_i - y_i`` is positive more
  often than negative (ties dropped); :func:`sign_test_counts` is the same test from the counts.
* :func:`paired_quantile_test`: bootstrap (sets resampled with replacement, pairs kept together)
  of ``Q_q(x) - Q_q(y)``, the difference of the q-quantiles across sets, with a one-sided
  confidence interval and the p-value of "the difference is at most ``margin``".
* :func:`binomial_tail`: P(K >= k) for K ~ Binomial(n, p), exact and stable for tiny ``p`` (a count of
  rare events against the rate a model allows).
* :func:`poisson_two_sided`: twice the smaller Poisson tail of an observed count against its
  expected value (a count of rare events far above or below a model's prediction).
* :func:`holm`: Holm–Bonferroni step-down adjustment, so a family of rows judged at once keeps
  its family-wise error rate at ``alpha``.
* :func:`paired_margin_test`: for a few paired runs (training curves under several data orders),
  the t-based equivalence test (TOST) of "the mean difference lies within +-margin" and the test of
  "it lies beyond the margin"; :func:`student_t_sf` and :func:`student_t_quantile` underneath.

Percentiles use numpy's default linear interpolation, as :func:`precisionkit.stats.error_stats` does.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np


def _paired(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    b = np.asarray(y, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"paired samples must have the same length: x has {a.size}, y has {b.size}")
    if a.size == 0:
        raise ValueError("paired samples are empty")
    bad = ~(np.isfinite(a) & np.isfinite(b))
    if bad.any():
        raise ValueError(
            f"paired samples must be finite: {int(bad.sum())} pair(s) hold NaN or inf (count those separately)"
        )
    return a, b


@dataclass(frozen=True)
class SignTest:
    """Result of :func:`sign_test`: counts and the exact one-sided p-value."""

    positive: int
    negative: int
    ties: int
    p_value: float


def sign_test(x: Any, y: Any, margin: float = 0.0) -> SignTest:
    """Exact one-sided sign test of ``x_i - y_i > margin`` happening more often than ``< margin``.

    Under "no difference" the count of positive differences among the non-tied ones is
    Binomial(n, 1/2); the p-value is P(K >= positive).

    >>> r = sign_test([3, 3, 3, 3, 3, 3, 3, 3, 3, 3], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    >>> r.positive, r.negative, round(r.p_value, 6)
    (10, 0, 0.000977)
    """
    a, b = _paired(x, y)
    d = a - b - margin
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    return sign_test_counts(pos, neg, int(d.size) - pos - neg)


def sign_test_counts(positive: int, negative: int, ties: int = 0) -> SignTest:
    """The exact one-sided sign test of :func:`sign_test` from its counts: ``positive`` pairs one way,
    ``negative`` the other, ``ties`` dropped. The p-value is P(K >= positive), K ~ Binomial(positive +
    negative, 1/2), and 1 when every pair is tied.

    >>> r = sign_test_counts(9, 1)
    >>> r.positive, r.negative, round(r.p_value, 6), sign_test_counts(0, 0, ties=4).p_value
    (9, 1, 0.010742, 1.0)
    """
    for name, count in (("positive", positive), ("negative", negative), ("ties", ties)):
        if count < 0 or int(count) != count:
            raise ValueError(f"sign_test_counts: {name} must be a count (a non-negative integer), got {count}")
    n = int(positive) + int(negative)
    # Integer numerator and 2**n: exact at any n (a float 2.0**n raises OverflowError past n = 1023),
    # and int / int rounds once, correctly.
    p = _upper_tail_count(n, int(positive)) / 2**n if n else 1.0
    return SignTest(int(positive), int(negative), int(ties), float(p))


def _upper_tail_count(n: int, k0: int) -> int:
    """sum of C(n, k) for k = k0..n in exact integers, each term from the one before it
    (C(n, k + 1) = C(n, k) (n - k) / (k + 1), an exact division): the same integer as summing
    ``math.comb`` per term, in linear rather than quadratic work (n = 30,000 took 296 s that way)."""
    if k0 > n:
        return 0
    term = total = math.comb(n, k0)
    for k in range(k0, n):
        term = term * (n - k) // (k + 1)
        total += term
    return total


@dataclass(frozen=True)
class QuantileTest:
    """Result of :func:`paired_quantile_test`.

    ``estimate`` is ``Q_q(x) - Q_q(y)`` on the sample; ``lower``/``upper`` are one-sided bounds at
    ``confidence`` (each its own one-sided statement); ``p_value`` is the bootstrap p-value of
    "the difference is at most ``margin``" (small: x's quantile exceeds y's by more than margin).
    """

    q: float
    margin: float
    n: int
    resamples: int
    confidence: float
    estimate: float
    lower: float
    upper: float
    p_value: float
    x_quantile: float
    y_quantile: float


def paired_quantile_test(
    x: Any,
    y: Any,
    q: float = 0.99,
    margin: float = 0.0,
    confidence: float = 0.99,
    resamples: int = 9999,
    seed: int = 0,
    clusters: Any = None,
) -> QuantileTest:
    """Bootstrap test of the difference of q-quantiles of paired samples ``x`` and ``y``.

    Sets are resampled with replacement (the same indices for both, so pairs stay together);
    the percentile bootstrap gives one-sided bounds of ``Q_q(x) - Q_q(y)`` at ``confidence`` and
    the p-value ``(1 + #{T* <= margin}) / (1 + resamples)``. Deterministic for a given ``seed``.

    ``clusters``: one label per pair, when pairs are not independent (the rows of one image or sequence):
    then the labels are resampled with replacement, each drawn label bringing all its pairs, so the interval
    is as wide as the independent units make it (:func:`_clustered_quantile_test`).

    >>> r = paired_quantile_test([5.0] * 50, [1.0] * 50, q=0.99, margin=1.0, resamples=999)
    >>> r.estimate, r.lower, r.p_value
    (4.0, 4.0, 0.001)
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")
    if resamples < 99:
        raise ValueError(f"resamples must be at least 99, got {resamples}")
    a, b = _paired(x, y)
    if clusters is not None:
        return _clustered_quantile_test(a, b, clusters, q, margin, confidence, resamples, seed)
    n = a.size
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples, dtype=np.float64)
    # A resample is a count per set. Its value at ascending rank r is its (n - r)-th largest, read off
    # each sample sorted once (descending): the first value whose cumulative count reaches n - r.
    # For a tail quantile only the top few values matter, so only they are scanned; rows of a
    # resample the top does not cover fall back to scanning every value.
    rank = q * (n - 1)
    lo, hi, frac = int(np.floor(rank)), int(np.ceil(rank)), rank - np.floor(rank)
    top = min(n, 4 * (n - lo) + 64)
    desc_a, desc_b = np.argsort(-a, kind="stable"), np.argsort(-b, kind="stable")

    def resampled_quantile(counts: np.ndarray, desc: np.ndarray, values: np.ndarray) -> np.ndarray:
        def read(cum: np.ndarray, order: np.ndarray) -> np.ndarray:
            v_lo = values[order[(cum >= n - lo).argmax(axis=1)]]
            v_hi = values[order[(cum >= n - hi).argmax(axis=1)]]
            # numpy's linear interpolation, term for term, so results equal np.quantile's bit for bit.
            quantile: np.ndarray = v_hi - (v_hi - v_lo) * (1 - frac) if frac >= 0.5 else v_lo + (v_hi - v_lo) * frac
            return quantile

        cum = counts[:, desc[:top]].cumsum(axis=1)
        out = read(cum, desc[:top])
        short = cum[:, -1] < n - lo
        if short.any():
            out[short] = read(counts[short][:, desc].cumsum(axis=1), desc)
        return out

    chunk = max(1, (1 << 21) // n)  # bound each working matrix at ~16 MiB
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        k = stop - start
        idx = rng.integers(0, n, size=(k, n)) + (np.arange(k) * n)[:, None]
        counts = np.bincount(idx.ravel(), minlength=k * n).reshape(k, n)
        stats[start:stop] = resampled_quantile(counts, desc_a, a) - resampled_quantile(counts, desc_b, b)
    return _quantile_test(a, b, q, margin, confidence, stats)


def _weighted_quantiles(counts: np.ndarray, values: np.ndarray, desc: np.ndarray, q: float) -> np.ndarray:
    """Per row of ``counts`` (how often each value is drawn), the ``q`` quantile of the drawn values with
    numpy's linear interpolation, for rows of different totals."""
    total = counts.sum(axis=1)
    rank = q * (total - 1)
    lo, hi = np.floor(rank), np.ceil(rank)
    frac = rank - lo
    cum = counts[:, desc].cumsum(axis=1)
    v_lo = values[desc[(cum >= (total - lo)[:, None]).argmax(axis=1)]]
    v_hi = values[desc[(cum >= (total - hi)[:, None]).argmax(axis=1)]]
    out: np.ndarray = np.where(frac >= 0.5, v_hi - (v_hi - v_lo) * (1 - frac), v_lo + (v_hi - v_lo) * frac)
    return out


def _clustered_quantile_test(
    a: np.ndarray,
    b: np.ndarray,
    clusters: Any,
    q: float,
    margin: float,
    confidence: float,
    resamples: int,
    seed: int,
) -> QuantileTest:
    """:func:`paired_quantile_test` resampling clusters: each resample draws as many labels as there are, with
    replacement, and takes every pair of each drawn label (so a resample's size varies with the clusters drawn).

    >>> r = _clustered_quantile_test(
    ...     np.array([5.0] * 8), np.array([1.0] * 8), [0, 0, 1, 1, 2, 2, 3, 3], 0.99, 1.0, 0.99, 999, 0
    ... )
    >>> r.estimate, r.lower, r.p_value
    (4.0, 4.0, 0.001)
    """
    labels = np.asarray(clusters).reshape(-1)
    if labels.size != a.size:
        raise ValueError(f"clusters must label every pair: {labels.size} labels for {a.size} pairs")
    _, member = np.unique(labels, return_inverse=True)
    c, n = int(member.max()) + 1, a.size
    rng = np.random.default_rng(seed)
    desc_a, desc_b = np.argsort(-a, kind="stable"), np.argsort(-b, kind="stable")
    stats = np.empty(resamples, dtype=np.float64)
    chunk = max(1, (1 << 21) // max(n, c))
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        k = stop - start
        idx = rng.integers(0, c, size=(k, c)) + (np.arange(k) * c)[:, None]
        drawn = np.bincount(idx.ravel(), minlength=k * c).reshape(k, c)
        counts = drawn[:, member]
        stats[start:stop] = _weighted_quantiles(counts, a, desc_a, q) - _weighted_quantiles(counts, b, desc_b, q)
    return _quantile_test(a, b, q, margin, confidence, stats)


def resamples_for_family(tests: int, alpha: float, base: int) -> int:
    """The bootstrap resamples a test needs so that its smallest p-value, ``1 / (1 + resamples)``, can pass
    Holm's first step over ``tests`` tests at ``alpha`` (``tests x p <= alpha``) with room to spare: ``base``,
    or enough that the floor is half of ``alpha / tests``, whichever is larger. With 1999 resamples the floor is
    1/2000, which Holm over 21 rows at 0.01 cannot reject (21/2000 = 0.0105).

    >>> resamples_for_family(7, 0.01, 1999), resamples_for_family(21, 0.01, 1999), resamples_for_family(40, 0.01, 1999)
    (1999, 4199, 7999)
    """
    if tests < 1:
        raise ValueError(f"tests must be at least 1, got {tests}")
    return max(int(base), math.ceil(2 * tests / alpha - 1e-9) - 1)


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(K >= k) for K ~ Binomial(n, p): the p-value of seeing ``k`` or more events among ``n`` trials
    that each happen with probability at most ``p``. Summed in log space, so a ``p`` of 1e-9 over a
    thousand trials keeps its digits.

    >>> binomial_tail(0, 10, 0.3), f"{binomial_tail(1, 1000, 1e-6):.5g}", f"{binomial_tail(5, 1000, 1e-3):.4g}"
    (1.0, '0.0009995', '0.003637')
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    if k <= 0:
        return 1.0
    if k > n or p == 0.0:
        return 0.0
    if p == 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_p + (n - j) * log_q
        for j in range(k, n + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def poisson_two_sided(observed: int, expected: float) -> float:
    """Twice the smaller tail of Poisson(``expected``) at ``observed``, capped at 1: the p-value of a count
    far above or far below its prediction. A sum of independent Bernoulli counts has a variance at most its
    mean, so the Poisson tails are the wider and the test is conservative for such counts. An ``expected``
    of 0 admits only a count of 0.

    >>> round(poisson_two_sided(0, 5.0), 4), round(poisson_two_sided(5, 5.0), 4), poisson_two_sided(0, 0.0)
    (0.0135, 1.0, 1.0)
    """
    if observed < 0 or int(observed) != observed:
        raise ValueError(f"observed must be a count (a non-negative integer), got {observed}")
    if not expected >= 0 or math.isinf(expected):
        raise ValueError(f"expected must be finite and non-negative, got {expected}")
    if expected == 0:
        return 1.0 if observed == 0 else 0.0

    def pmf(k: int) -> float:
        return math.exp(k * math.log(expected) - expected - math.lgamma(k + 1))

    lower = sum(pmf(k) for k in range(observed + 1))
    upper = 1.0 - sum(pmf(k) for k in range(observed))
    return min(1.0, 2.0 * min(lower, max(upper, 0.0)))


def holm(p_values: Any, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Holm–Bonferroni: which hypotheses to reject at family-wise level ``alpha``, and the
    adjusted p-values (monotone, capped at 1).

    >>> rejected, adjusted = holm([0.001, 0.02, 0.04], alpha=0.035)
    >>> rejected.tolist(), adjusted.round(3).tolist()
    ([True, False, False], [0.003, 0.04, 0.04])
    """
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    if ((p < 0) | (p > 1) | np.isnan(p)).any():
        raise ValueError("p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return adjusted <= alpha, adjusted


def student_t_sf(t: float, df: int) -> float:
    """P(T > t) for Student's t with ``df`` (a positive integer) degrees of freedom, exact.

    Uses the closed forms of P(|T| <= t) for integer ``df`` (a finite sum in cos(theta),
    theta = atan(t / sqrt(df))), so no special-function library is needed.

    >>> round(student_t_sf(2.776445, 4), 6), round(student_t_sf(0.0, 7), 6), round(student_t_sf(-1.0, 1), 6)
    (0.025, 0.5, 0.75)
    """
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a positive integer, got {df}")
    if math.isnan(t):
        raise ValueError("t is NaN")
    if t < 0:
        return 1.0 - student_t_sf(-t, df)
    if math.isinf(t):
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    c, s = math.cos(theta), math.sin(theta)
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(2, df, 2):  # (1*3*...*(k-1)) / (2*4*...*k) * cos^k
            term *= (k - 1) / k * c * c
            total += term
        inside = s * total
    elif df == 1:
        inside = 2.0 * theta / math.pi
    else:
        term, total = c, c
        for k in range(1, df - 2, 2):  # cos + (2/3) cos^3 + (2*4)/(3*5) cos^5 + ... up to cos^(df-2)
            term *= (k + 1) / (k + 2) * c * c
            total += term
        inside = 2.0 / math.pi * (theta + s * total)
    return max(0.0, (1.0 - inside) / 2.0)


@functools.lru_cache(maxsize=1024)
def student_t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`student_t_sf`).

    >>> round(student_t_quantile(0.95, 4), 4), round(student_t_quantile(0.975, 10), 4)
    (2.1318, 2.2281)
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while student_t_sf(hi, df) > 1.0 - p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if student_t_sf(mid, df) > 1.0 - p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class MarginTest:
    """Result of :func:`paired_margin_test`: the mean paired difference, its two one-sided bounds at
    ``confidence`` (together the 1 - 2(1 - confidence) interval of the TOST), the p-value of
    equivalence (small: within +-margin) and the p-value of "beyond the margin" (small: |mean| > margin)."""

    n: int
    margin: float
    confidence: float
    mean: float
    sd: float
    lower: float
    upper: float
    p_equivalent: float
    p_beyond: float


def paired_margin_test(differences: Any, margin: float, confidence: float = 0.95) -> MarginTest:
    """t-based tests of the mean of paired ``differences`` against ``+-margin``.

    * Equivalence (TOST): both one-sided tests, of "mean <= -margin" and of "mean >= margin", reject;
      ``p_equivalent`` is the larger of their p-values.
    * Beyond: "|mean| <= margin" is rejected in the direction the mean lies; ``p_beyond`` is twice
      that one-sided p-value (capped at 1), so choosing the direction from the data costs nothing.

    With zero spread the tests are exact: a mean strictly inside the margin is equivalent (p 0),
    strictly outside is beyond (p 0).

    >>> r = paired_margin_test([0.01, -0.02, 0.0, 0.015, -0.005], margin=0.1)
    >>> abs(r.mean) < 1e-12, r.p_equivalent < 0.001, r.p_beyond
    (True, True, 1.0)
    >>> r = paired_margin_test([0.31, 0.29, 0.30, 0.32, 0.28], margin=0.1)
    >>> r.p_beyond < 0.001, r.p_equivalent > 0.99
    (True, True)
    """
    d = np.asarray(differences, dtype=np.float64).reshape(-1)
    if d.size < 2:
        raise ValueError(f"paired_margin_test needs at least 2 differences, got {d.size}")
    if not np.isfinite(d).all():
        raise ValueError("differences must be finite")
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")
    n = int(d.size)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    df = n - 1
    if se == 0.0:
        inside, outside = abs(mean) < margin, abs(mean) > margin
        return MarginTest(n, margin, confidence, mean, sd, mean, mean, 0.0 if inside else 1.0, 0.0 if outside else 1.0)
    half = student_t_quantile(confidence, df) * se
    p_low = student_t_sf((mean + margin) / se, df)  # H0: mean <= -margin
    p_high = 1.0 - student_t_sf((mean - margin) / se, df)  # H0: mean >= margin
    p_beyond = min(1.0, 2.0 * student_t_sf((abs(mean) - margin) / se, df))
    return MarginTest(n, margin, confidence, mean, sd, mean - half, mean + half, max(p_low, p_high), p_beyond)


def holm_binomial_tails(events: Any, trials: Any, p: float, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A family of exact one-sided binomial tests judged together: for each row ``i``, the p-value
    :func:`binomial_tail` of ``events[i]`` or more events among ``trials[i]`` at a rate of at most ``p``,
    then :func:`holm` over the rows at family-wise level ``alpha``. Returns the raw p-values, the rows
    rejected and the adjusted p-values. With ``p`` = 1/2 and ``trials[i]`` the non-tied pairs, row ``i``
    is the one-sided sign test of ``events[i]`` positive differences.

    >>> raw, rejected, adjusted = holm_binomial_tails([9, 1], [9, 2], 0.5, alpha=0.01)
    >>> raw.round(5).tolist(), rejected.tolist(), adjusted.round(5).tolist()
    ([0.00195, 0.75], [True, False], [0.00391, 0.75])
    """
    k = [int(v) for v in np.asarray(events).reshape(-1)]
    n = [int(v) for v in np.asarray(trials).reshape(-1)]
    if len(k) != len(n):
        raise ValueError(f"events and trials must have the same length: {len(k)} and {len(n)}")
    raw = np.array([binomial_tail(ki, ni, p) for ki, ni in zip(k, n, strict=True)], dtype=np.float64)
    rejected, adjusted = holm(raw, alpha)
    return raw, rejected, adjusted


def _quantile_test(
    a: np.ndarray, b: np.ndarray, q: float, margin: float, confidence: float, stats: np.ndarray
) -> QuantileTest:
    """The test's record from the samples and the resampled differences of their ``q`` quantiles:
    the interval's ends at ``confidence`` and the p-value of "the difference exceeds ``margin``"."""
    qa, qb = float(np.quantile(a, q)), float(np.quantile(b, q))
    resamples = len(stats)
    return QuantileTest(
        q=q,
        margin=float(margin),
        n=len(a),
        resamples=resamples,
        confidence=confidence,
        estimate=qa - qb,
        lower=float(np.quantile(stats, 1.0 - confidence)),
        upper=float(np.quantile(stats, confidence)),
        p_value=float((1 + np.count_nonzero(stats <= margin)) / (1 + resamples)),
        x_quantile=qa,
        y_quantile=qb,
    )
