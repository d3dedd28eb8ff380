import math

import numpy as np
import pytest

from precisionkit.decide import holm, paired_quantile_test, sign_test


def test_sign_test_exact_binomial_tail():
    # 8 positive, 2 negative, 1 tie: P(K >= 8 | n=10, 1/2) = (45 + 10 + 1) / 1024.
    r = sign_test([2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 1], [1] * 11)
    assert (r.positive, r.negative, r.ties) == (8, 2, 1)
    assert r.p_value == pytest.approx(56 / 1024)
    # The margin shifts what counts as positive.
    assert sign_test([3.0, 1.5], [1.0, 1.0], margin=1.0).positive == 1
    assert sign_test([1.0], [1.0]).p_value == 1.0  # only ties


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
