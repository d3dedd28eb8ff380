"""The count tails and the ULP histogram the experiments take from precisionkit: pinned to the outputs of the
copies the experiments held before they moved here, and checked against closed forms.

The pinned values were recorded by running, on the same inputs, the functions as they stood at the commit
before 5ba5737: C2's ``sign_test_p`` and ``poisson_two_sided_p`` (reduction_order/checks.py), the regression
comparators' sign test on +-1 arrays, C3's ``_hist`` and C1's histogram counts (HIST_MAX 8 and 4), and
``precisionkit.decide.binomial_tail``. Every value below is that old output, written with ``repr`` (which
round-trips a float exactly), so ``==`` asks for the same bits. The one copy the toolkit does not reproduce
bit for bit is C2's old sign test, which summed the binomial terms in log space; its values are pinned
separately with how far they lie from the exact test that replaced it.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import pytest
import torch

import precisionkit
from precisionkit import binomial_tail, poisson_two_sided, sign_test_counts, ulp_histogram

EPS = sys.float_info.epsilon


def test_the_tails_and_the_histogram_are_public():
    for name in ("binomial_tail", "poisson_two_sided", "sign_test_counts", "ulp_histogram"):
        assert name in precisionkit.__all__
    assert precisionkit.binomial_tail is precisionkit.decide.binomial_tail
    assert precisionkit.ulp_histogram is precisionkit.ulp.ulp_histogram


# (k, n, p) -> P(K >= k), K ~ Binomial(n, p): the old implementation's outputs (k = 0, k = n, k > n, n = 0,
# p at 0 and 1, a tiny p, n up to 10**6).
BINOMIAL_TAIL = {
    (0, 0, 0.3): 1.0,
    (1, 0, 0.3): 0.0,
    (0, 10, 0.3): 1.0,
    (10, 10, 0.3): 5.904899999999995e-06,
    (11, 10, 0.3): 0.0,
    (3, 10, 0.0): 0.0,
    (3, 10, 1.0): 1.0,
    (1, 1000, 1e-06): 0.0009995006661256758,
    (5, 1000, 0.001): 0.003636878029521888,
    (1, 10, 1e-300): 1.0000000000000142e-299,
    (2, 10, 1e-300): 0.0,
    (1, 100_000, 1e-09): 9.999500025547424e-05,
    (3, 100_000, 1e-06): 0.0001546487723345683,
    (1_000_000, 1_000_000, 0.5): 0.0,
    (1_000_000, 1_000_000, 1 - 1e-07): 0.9048374135593988,
    (999_990, 1_000_000, 0.999999): 0.9999999899553598,
    (500, 1000, 0.5): 0.5126125090889674,
}


@pytest.mark.parametrize(("args", "old"), BINOMIAL_TAIL.items(), ids=str)
def test_binomial_tail_gives_the_old_outputs(args, old):
    assert binomial_tail(*args) == old


def _log_space_tolerance(k: int, n: int, p: float, value: float) -> float:
    """Relative error :func:`binomial_tail` may carry: each term's exponent adds three log-factorials of size
    up to lgamma(n + 1) and logs of p and 1 - p weighted by up to n, each rounded with relative error EPS, and
    exp turns an absolute error in the exponent into the same relative error of the term; |log value| covers
    the final rescaling. A factor 4 covers the few roundings per addition."""
    weight = n * max(abs(math.log(p)), abs(math.log1p(-p)))
    return 4 * EPS * (2 * math.lgamma(n + 1) + weight + abs(math.log(value)))


@pytest.mark.parametrize(("n", "p"), [(10, 0.3), (37, 0.9), (1000, 0.999), (1_000_000, 1 - 1e-07)])
def test_binomial_tail_at_k_equal_n_is_p_to_the_n(n, p):
    want = p**n
    assert binomial_tail(n, n, p) == pytest.approx(want, rel=_log_space_tolerance(n, n, p, want), abs=0)


@pytest.mark.parametrize(("n", "p"), [(10, 1e-300), (1000, 1e-06), (100_000, 1e-09), (50, 0.2)])
def test_binomial_tail_at_one_is_one_minus_no_event(n, p):
    want = -math.expm1(n * math.log1p(-p))  # 1 - (1 - p)**n, accurate for tiny p
    assert binomial_tail(1, n, p) == pytest.approx(want, rel=_log_space_tolerance(1, n, p, want), abs=0)


def test_binomial_tail_refuses_a_rate_or_size_out_of_range():
    with pytest.raises(ValueError, match="p must lie in"):
        binomial_tail(1, 10, 1.5)
    with pytest.raises(ValueError, match="n must be non-negative"):
        binomial_tail(1, -1, 0.5)


# (positive, negative) -> the p-value of the regression comparators' old sign test on +-1 arrays, which
# sign_test_counts must give bit for bit (the same integer sum over 2**n).
SIGN_TEST = {
    (0, 0): 1.0,
    (0, 5): 1.0,
    (5, 0): 0.03125,
    (9, 1): 0.0107421875,
    (1, 9): 0.9990234375,
    (20, 0): 9.5367431640625e-07,
    (50, 50): 0.5397946186935894,
    (600, 400): 1.3642320780330092e-10,
    (1100, 0): 0.0,
    (1000, 1000): 0.5089195055729272,
}


@pytest.mark.parametrize(("counts", "old"), SIGN_TEST.items(), ids=str)
def test_sign_test_counts_gives_the_comparators_old_outputs(counts, old):
    r = sign_test_counts(*counts)
    assert (r.positive, r.negative, r.ties, r.p_value) == (*counts, 0, old)


@pytest.mark.parametrize("counts", list(SIGN_TEST))
def test_sign_test_counts_is_the_exact_binomial_tail_at_one_half(counts):
    k, n = counts[0], sum(counts)
    exact = Fraction(sum(math.comb(n, j) for j in range(k, n + 1)), 2**n) if n else Fraction(1)
    assert sign_test_counts(*counts).p_value == float(exact)  # float(Fraction) rounds correctly


# C2's old sign test: binomial_tail(worse, worse + better, 1/2), summed in log space. Where it differed from
# the exact value it now reports, the difference stays inside the log-space rounding bound above.
C2_OLD_SIGN_TEST = {
    (0, 0): 1.0,
    (5, 0): 0.03125,
    (9, 1): 0.01074218750000001,
    (1, 9): 0.9990234374999984,
    (50, 50): 0.5397946186935808,
    (600, 400): 1.3642320780327884e-10,
    (1000, 1000): 0.5089195055725739,
}


@pytest.mark.parametrize(("counts", "old"), C2_OLD_SIGN_TEST.items(), ids=str)
def test_c2_old_sign_test_is_the_log_space_binomial_tail_near_the_exact_one(counts, old):
    k, n = counts[0], sum(counts)
    assert binomial_tail(k, n, 0.5) == old
    exact = sign_test_counts(*counts).p_value
    assert exact == pytest.approx(old, rel=_log_space_tolerance(k, n, 0.5, exact), abs=0)


# (observed, expected) -> twice the smaller Poisson tail: the old C2 copy's outputs.
POISSON_TWO_SIDED = {
    (0, 5.0): 0.013475893998170934,
    (5, 5.0): 1.0,
    (12, 5.0): 0.010906183826019822,
    (0, 0.0): 1.0,
    (1, 0.0): 0.0,
    (0, 1e-12): 1.0,
    (1, 1e-12): 1.999955756559757e-12,
    (3, 1e-12): 0.0,
    (10_000, 10_000.0): 1.0,
    (0, 700.0): 1.971935308751954e-304,
    (2000, 1000.0): 5.029310301551959e-13,
    (1, 40.0): 3.4836504893391072e-16,
    (100, 40.0): 0.0,
}


@pytest.mark.parametrize(("args", "old"), POISSON_TWO_SIDED.items(), ids=str)
def test_poisson_two_sided_gives_the_old_outputs(args, old):
    assert poisson_two_sided(*args) == old


@pytest.mark.parametrize("expected", [5.0, 40.0, 700.0])
def test_poisson_two_sided_at_zero_is_twice_the_zero_probability(expected):
    # the lower tail at 0 is the single term exp(0 * log(expected) - expected - lgamma(1)) = exp(-expected),
    # the same float operations as the closed form, so the same bits
    assert poisson_two_sided(0, expected) == 2 * math.exp(-expected)


def test_poisson_two_sided_lower_tail_at_one():
    # P(X <= 1) = exp(-m) (1 + m), far below one half for m = 40, so it is the smaller tail. Each term is exp
    # of an exponent of size up to m + |log m| rounded with relative error EPS, which exp turns into that much
    # relative error of the term; a factor 4 covers the few roundings of the sum.
    m = 40.0
    tol = 4 * EPS * (m + abs(math.log(m)) + 1)
    assert poisson_two_sided(1, m) == pytest.approx(2 * math.exp(-m) * (1 + m), rel=tol, abs=0)


# The ULP histograms C1 (top 4) and C3 (top 8) computed before they shared ulp_histogram: per input, the
# old (count, fraction) of every bin; both copies binned alike (distances clamped at top, one bin per
# distance below it), so one function with ``top`` as its parameter serves both.
DISTANCES = {
    "zeros": torch.zeros(5, dtype=torch.int64),
    "above": torch.tensor([9, 2**40, 100]),
    "mixed": torch.tensor([[0, 1, 1], [3, 4, 8]]),
    "one": torch.tensor([7]),
    "int32": torch.tensor([0, 2, 5, 5, 9, 1], dtype=torch.int32),
}
SIXTH, THIRD = 1 / 6, 1 / 3
HISTOGRAM = {
    ("zeros", 4): [(5, 1.0), (0, 0.0), (0, 0.0), (0, 0.0), (0, 0.0)],
    ("zeros", 8): [(5, 1.0)] + [(0, 0.0)] * 8,
    ("above", 4): [(0, 0.0)] * 4 + [(3, 1.0)],
    ("above", 8): [(0, 0.0)] * 8 + [(3, 1.0)],
    ("mixed", 4): [(1, SIXTH), (2, THIRD), (0, 0.0), (1, SIXTH), (2, THIRD)],
    ("mixed", 8): [(1, SIXTH), (2, THIRD), (0, 0.0), (1, SIXTH), (1, SIXTH), (0, 0.0), (0, 0.0), (0, 0.0), (1, SIXTH)],
    ("one", 4): [(0, 0.0)] * 4 + [(1, 1.0)],
    ("one", 8): [(0, 0.0)] * 7 + [(1, 1.0), (0, 0.0)],
    ("int32", 4): [(1, SIXTH), (1, SIXTH), (1, SIXTH), (0, 0.0), (3, 0.5)],
    ("int32", 8): [(1, SIXTH), (1, SIXTH), (1, SIXTH), (0, 0.0), (0, 0.0), (2, THIRD), (0, 0.0), (0, 0.0), (1, SIXTH)],
}


@pytest.mark.parametrize(("case", "old"), HISTOGRAM.items(), ids=str)
def test_ulp_histogram_gives_the_old_bins(case, old):
    name, top = case
    rows = ulp_histogram(DISTANCES[name], top, comparison="x")
    assert [(r["count"], r["fraction"]) for r in rows] == old
    assert [r["ulp"] for r in rows] == [str(k) for k in range(top)] + [f">={top}"]
    assert {r["comparison"] for r in rows} == {"x"}


@pytest.mark.parametrize(("n", "k"), [(0, 0), (1, 0), (1, 1), (5, 7), (10, 9), (100, 60), (1001, 500), (2048, 1100)])
def test_the_sign_tests_upper_tail_count_is_the_sum_of_binomial_coefficients(n, k):
    from precisionkit.decide import _upper_tail_count

    assert _upper_tail_count(n, k) == sum(math.comb(n, i) for i in range(k, n + 1))
