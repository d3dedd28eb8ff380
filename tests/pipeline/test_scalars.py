import math

import polars as pl
import pytest

from pipeline.scalars import as_float, as_int


def test_numbers_from_polars_reductions():
    s = pl.Series([3, 1, 2])
    assert as_int(s.max(), "max") == 3 and as_float(s.mean(), "mean") == 2.0
    assert as_int(4.0, "runs") == 4 and as_float(True, "flag") == 1.0
    assert math.isnan(as_float(float("nan"), "margin"))  # a NaN is a number: callers decide what it means


def test_missing_or_non_numeric_values_name_what_was_read():
    with pytest.raises(ValueError, match=r"margin_max: expected a number, got None"):
        as_float(pl.Series([], dtype=pl.Float64).max(), "margin_max")
    with pytest.raises(ValueError, match=r"version: expected a number, got 'eager'"):
        as_float("eager", "version")
    with pytest.raises(ValueError, match=r"ulp_max: expected an integer, got 1.5"):
        as_int(1.5, "ulp_max")
    with pytest.raises(ValueError, match=r"ulp_max: expected an integer, got inf"):
        as_int(float("inf"), "ulp_max")


def test_docstring_examples_run():
    import doctest

    import pipeline.scalars

    result = doctest.testmod(pipeline.scalars)
    assert result.attempted == 3 and result.failed == 0
