import math

import numpy as np
import pytest

from precisionkit import decide
from precisionkit.decide import holm, paired_quantile_test, poisson_two_sided, sign_test, sign_test_counts


def test_sign_test_exact_binomial_tail():
    # 8 positive, 2 negative, 1 tie: P(K >= 8 | n=10, 1/2) = (45 + 10 + 1) / 1024.
    r = sign_test([2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 1], [1] * 11)
    assert (r.positive, r.negative, r.ties) == (8, 2, 1)
    assert r.p_value == pytest.approx(56 / 1024)
    # The margin shifts what counts as positive.
    assert sign_test([3.0, 1.5], [1.0, 1.0], margin=1.0).positive == 1
    assert sign_test([1.0], [1.0]).p_value == 1.0  # only ties


def test_sign_test_counts_equals_the_test_on_pairs():
    assert sign_test_counts(0, 0).p_value == 1.0
    assert sign_test_counts(9, 0).p_value == 1 / 512
    assert sign_test_counts(2, 0).p_value == 0.25 and sign_test_counts(0, 3).p_value == 1.0
    assert sign_test_counts(5, 5).p_value == sum(math.comb(10, k) for k in range(5, 11)) / 1024
    # the same counts from pairs give the same result, ties included
    assert sign_test_counts(8, 2, ties=1) == sign_test([2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 1], [1] * 11)
    # exact past the range of a float 2**n
    assert sign_test_counts(1100, 0).p_value == 2.0**-1100
    with pytest.raises(ValueError, match="negative must be a count"):
        sign_test_counts(3, -1)


def test_poisson_two_sided_tails():
    # observed 0 of expected 5: lower tail e^-5, doubled
    assert poisson_two_sided(0, 5.0) == pytest.approx(2 * math.exp(-5.0), rel=1e-12)
    # observed 12 of expected 5: upper tail 1 - P(K <= 11), doubled
    upper = 1.0 - sum(math.exp(-5.0) * 5.0**k / math.factorial(k) for k in range(12))
    assert poisson_two_sided(12, 5.0) == pytest.approx(2 * upper, rel=1e-9)
    assert poisson_two_sided(5, 5.0) == 1.0  # both tails exceed one half: capped
    assert poisson_two_sided(0, 0.0) == 1.0 and poisson_two_sided(1, 0.0) == 0.0
    with pytest.raises(ValueError, match="expected must be finite"):
        poisson_two_sided(1, -1.0)


def test_paired_quantile_test_is_deterministic_and_pairs_sets():
    rng = np.random.default_rng(3)
    y = rng.uniform(0, 1, 500)
    x = y + 0.25
    a = paired_quantile_test(x, y, q=0.99, margin=0.0, resamples=499, seed=7)
    b = paired_quantile_test(x, y, q=0.99, margin=0.0, resamples=499, seed=7)
    assert a == b
    assert a.estimate == pytest.approx(0.25)
    assert a.lower <= a.estimate <= a.upper
    assert a.p_value == pytest.approx(1 / 500)  # every resample is above the margin
    # Against a margin above the shift the test finds nothing.
    assert paired_quantile_test(x, y, margin=1.0, resamples=499).p_value == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"q": 1.5}, "q must be"), ({"confidence": 0.4}, "confidence"), ({"resamples": 10}, "resamples")],
)
def test_paired_quantile_test_rejects_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        paired_quantile_test([1.0, 2.0], [1.0, 2.0], **kwargs)


def test_paired_samples_must_match_and_be_finite():
    with pytest.raises(ValueError, match="same length"):
        sign_test([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="NaN or inf"):
        paired_quantile_test([1.0, math.nan], [1.0, 1.0])
    with pytest.raises(ValueError, match="empty"):
        sign_test([], [])


def test_holm_step_down():
    rejected, adjusted = holm([0.01, 0.04, 0.03, 0.5], alpha=0.05)
    # sorted: 0.01*4=0.04, 0.03*3=0.09, 0.04*2=0.08 -> max-accumulated 0.09, 0.5*1 -> 0.5
    assert adjusted.tolist() == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert rejected.tolist() == [True, False, False, False]
    with pytest.raises(ValueError, match="p-values"):
        holm([1.2], alpha=0.05)


# --- t tests against a margin (few paired runs) ------------------------------------------------


@pytest.mark.parametrize(
    ("df", "t95"),
    [(1, 6.3138), (2, 2.9200), (3, 2.3534), (4, 2.1318), (5, 2.0150), (6, 1.9432), (9, 1.8331), (30, 1.6973)],
)
def test_student_t_matches_the_tabulated_95_percent_quantiles(df, t95):
    assert decide.student_t_quantile(0.95, df) == pytest.approx(t95, abs=1e-4)
    assert decide.student_t_sf(t95, df) == pytest.approx(0.05, abs=2e-5)
    assert decide.student_t_sf(-t95, df) == pytest.approx(0.95, abs=2e-5)


def test_paired_margin_test_equivalence_beyond_and_zero_spread():
    inside = decide.paired_margin_test([0.01, 0.012, 0.009, 0.011, 0.010], margin=0.05)
    assert inside.p_equivalent < 0.001 and inside.p_beyond == 1.0 and inside.lower < 0.01 < inside.upper
    beyond = decide.paired_margin_test([-0.2, -0.21, -0.19, -0.2, -0.2], margin=0.05)
    assert beyond.p_beyond < 0.001 and beyond.p_equivalent > 0.99 and beyond.mean == pytest.approx(-0.2)
    exact = decide.paired_margin_test([0.02, 0.02, 0.02], margin=0.05)
    assert (exact.p_equivalent, exact.p_beyond, exact.sd) == (0.0, 1.0, 0.0)
    assert decide.paired_margin_test([0.07, 0.07], margin=0.05).p_beyond == 0.0
    with pytest.raises(ValueError, match="at least 2"):
        decide.paired_margin_test([0.1], margin=0.05)
    with pytest.raises(ValueError, match="finite"):
        decide.paired_margin_test([0.1, float("nan")], margin=0.05)
    with pytest.raises(ValueError, match="positive integer"):
        decide.student_t_sf(1.0, 0)
