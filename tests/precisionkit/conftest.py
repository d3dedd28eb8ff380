"""Fixtures shared by the precisionkit tests."""

from __future__ import annotations

import pytest
from pk_testlib import DTYPE_NAMES


@pytest.fixture(params=DTYPE_NAMES)
def dtype_name(request) -> str:
    return request.param
