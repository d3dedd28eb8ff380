"""Blind campaigns against planted faults: each family of silent wrong result that the tester was
extended to reach is committed by a backend of its own (``repro_backends``), and a campaign of at most
240 programs, from seeds the generator was not tuned on, must catch it on every seed. The backends run
the graph eagerly around their one fault, so a campaign costs no Inductor build."""

from __future__ import annotations

import dataclasses

import pytest
from repro_backends import FAMILIES, first_catch, register

from precisionkit import difftest

SEEDS = (7001, 8002, 9003)
BUDGET = 240


@pytest.mark.parametrize("family", FAMILIES)
def test_a_blind_campaign_catches_each_planted_family_on_every_seed(family: str) -> None:
    register()
    backend = FAMILIES[family]
    for start in SEEDS:
        hit = first_catch(backend, start, BUDGET)
        assert hit is not None, f"{family}: no mismatch in {BUDGET} programs from seed {start}"
        k, outcome = hit
        assert k <= BUDGET and backend in outcome.message
        # the catch is the fault's: the same program without it (Dynamo's eager backend) is clean
        clean = difftest.run(dataclasses.replace(outcome.case, backend="eager"), "eager")
        assert clean.klass == "ok", (family, start, outcome.case.id, clean.message)


def test_a_campaign_does_not_take_a_compile_error_for_a_catch() -> None:
    """The fp32-keeping backend fails to build some programs (an in-place op of mixed dtypes): those
    are compile errors, and the campaign goes on to a program it gets wrong."""
    register()
    outcomes = [
        difftest.run(difftest.generate(seed, gen), "pk_test_keep_fp32", difftest.threads_for(gen, seed))
        for gen, seed in difftest.plan(BUDGET, start=7001)[:3]
    ]
    assert [o.klass for o in outcomes][2] == "compile_error"
    hit = first_catch("pk_test_keep_fp32", 7001, BUDGET)
    assert hit is not None and hit[0] > 3 and hit[1].klass == "mismatch"
