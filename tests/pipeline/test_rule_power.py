"""B's rule against simulated faults of a fused kernel (pipeline.experiments.accumulated_error.faults):
each one is contradicted by the part of the rule built for it. Here each row is judged alone with a
short bootstrap, to stay quick; scripts/b_rule_power.py judges them as rows of B's whole table at the
judged size, and counts the healthy fused path's false alarms over several seeds."""

import pytest

from pipeline.experiments.accumulated_error import faults
from pipeline.workloads import WORKLOADS

QUICK = {"family": None, "resamples": 999}


def _ids(f: faults.Fault) -> str:
    return f"{f.name}-{f.chain}-{f.distribution}-{f.dtype}"


@pytest.mark.parametrize("fault", [f for f in faults.FAULTS if not f.harmless], ids=_ids)
def test_each_fault_is_contradicted_by_its_designed_part(fault):
    _, row = faults.simulate(
        fault.chain, fault.distribution, fault.dtype, fault.make(WORKLOADS[fault.chain]), sets=200, seed=5, **QUICK
    )
    assert row["verdict"] == "contradicted"
    assert fault.designed in faults.caught_by(row)


@pytest.mark.parametrize("fault", [f for f in faults.FAULTS if f.harmless], ids=_ids)
def test_a_harmless_fault_stays_within_the_fp32_bound(fault):
    """A fault declared harmless changes no decisive element: its effect lies within the chain's fp32
    error bound, where a legitimate reduction order may land as well."""
    _, row = faults.simulate(
        fault.chain, fault.distribution, fault.dtype, fault.make(WORKLOADS[fault.chain]), sets=100, seed=5, **QUICK
    )
    assert row["misrounded_sets"] == 0 and row["decisive_elements"] > 0 and not row["element_contradicts"]


@pytest.mark.parametrize("variant", faults.HEALTHY_VARIANTS, ids=_ids)
def test_a_sequential_fp32_reduction_is_not_contradicted(variant):
    """The order one thread takes (every sum one term at a time in fp32) misrounds no decisive element
    and is not contradicted, on the rows where a margin-based rule flipped with the thread count."""
    _, row = faults.simulate(
        variant.chain,
        variant.distribution,
        variant.dtype,
        variant.make(WORKLOADS[variant.chain]),
        sets=100,
        seed=7,
        **QUICK,
    )
    assert row["verdict"] != "contradicted" and row["misrounded_sets"] == 0, faults.caught_by(row)


def test_the_rare_input_faults_leave_every_quantile_and_are_gross():
    # five sets in 1000, or one, sit above the P99 of the sets: no quantile moves, the gross test sees them
    for name, garbled in (("rare_sets", 5), ("one_set_far", 1)):
        fault = next(f for f in faults.FAULTS if f.name == name)
        _, row = faults.simulate(
            fault.chain, fault.distribution, fault.dtype, fault.make(WORKLOADS[fault.chain]), sets=1000, **QUICK
        )
        assert "gross" in faults.caught_by(row) and row["gross_sets"] == garbled and row["gross_sets_needed"] == 1
        assert abs(row["p99_difference"]) < 0.01 and row["verdict"] == "contradicted"


def test_the_healthy_single_rounding_is_not_contradicted():
    """The fp32 single rounding as the fused path is what a healthy fused kernel computes: on the
    rows the faults use, no part of the rule contradicts it."""
    for chain, dist, dtype in {(f.chain, f.distribution, f.dtype) for f in faults.FAULTS}:
        healthy = faults.single_rounding(WORKLOADS[chain].fn)
        _, row = faults.simulate(chain, dist, dtype, lambda args, i, h=healthy: h(*args), sets=100, seed=6, **QUICK)
        assert row["verdict"] != "contradicted", (chain, dist, dtype, faults.caught_by(row))
