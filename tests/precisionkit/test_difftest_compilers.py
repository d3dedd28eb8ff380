"""The differential tester on each compiler beside Inductor, as CI runs it: the first 20 programs of a
campaign's plan, each in a worker interpreter, compiled by OpenVINO and by IREE (skipped with the install
command where the extra is missing). Every program gets an outcome, eager and the fp64 reference run for
each (no ``invalid``), the compiler runs fused code for some, and a wrong result names that compiler's
backend. What each compiler gets wrong is its campaign's business (results/campaigns/2026-11-29-*), not
pinned here: the counts move with the CPU's native 16-bit support (OpenVINO's default precision)."""

from __future__ import annotations

from collections import Counter

import pytest

from precisionkit import difftest
from precisionkit.backends import get_adapter

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["openvino", "iree"])
def test_the_tester_runs_twenty_programs_on_the_compiler(name: str) -> None:
    adapter = get_adapter(name, require_installed=False)
    if (why := adapter.missing()) is not None:
        pytest.skip(why)
    todo = difftest.plan(20)
    outcomes = difftest.fuzz(todo, backend=name, isolated=True)
    assert [o.case.id.rsplit("-", 1)[0] for o in outcomes] == [f"{g}-{s}" for g, s in todo]
    classes = Counter(o.klass for o in outcomes)
    assert set(classes) <= {"ok", "mismatch", "compile_error", "crash"}, classes
    assert classes["ok"] + classes["mismatch"] >= 5, classes  # fused code ran, not only refusals
    for o in outcomes:
        if o.klass == "mismatch":
            assert f"fused ({adapter.dynamo_backend})" in o.message, o.message
