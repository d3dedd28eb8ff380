"""precisionkit.ulp: the ULP-distance histogram both C1 and C3 store."""

from __future__ import annotations

import pytest
import torch

from precisionkit import ulp_diff
from precisionkit.ulp import ulp_histogram


def test_histogram_counts_every_distance_once_and_collects_the_tail():
    a = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float16)
    steps = torch.tensor([0, 1, 1, 3, 200], dtype=torch.int16)
    b = (a.view(torch.int16) + steps).view(torch.float16)
    rows = ulp_histogram(ulp_diff(a, b), 2, comparison="a vs b", mode="eager")
    assert [(r["ulp"], r["count"]) for r in rows] == [("0", 1), ("1", 2), (">=2", 2)]
    assert [r["fraction"] for r in rows] == [0.2, 0.4, 0.4]
    # the labels lead every row, in the order given, before the bin's own columns
    assert list(rows[0]) == ["comparison", "mode", "ulp", "count", "fraction"]
    assert {r["comparison"] for r in rows} == {"a vs b"}


def test_histogram_refuses_what_is_not_an_integer_distance():
    with pytest.raises(ValueError, match="non-negative integer"):
        ulp_histogram(torch.tensor([0.5, 1.0]), 4)
    with pytest.raises(ValueError, match="non-negative integer"):
        ulp_histogram(torch.tensor([-1, 2]), 4)
    with pytest.raises(ValueError, match="no distances"):
        ulp_histogram(torch.tensor([], dtype=torch.int64), 4)
    with pytest.raises(ValueError, match="at least one bin"):
        ulp_histogram(torch.tensor([0]), 0)
