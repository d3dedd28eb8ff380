"""B's rule against simulated faults of a fused kernel (pipeline.experiments.accumulated_error.faults):
each one is contradicted by the part of the rule built for it. Here each row is judged alone with a
short bootstrap, to stay quick; scripts/b_rule_power.py judges them as rows of B's whole table at the
judged size, and counts the healthy fused path's false alarms over several seeds."""

import pytest

from pipeline.experiments.accumulated_error import faults
from pipeline.workloads import WORKLOADS

QUICK = {"family": None, "resamples": 999}


@pytest.mark.parametrize("fault", faults.FAULTS, ids=lambda f: f"{f.name}-{f.chain}-{f.distribution}-{f.dtype}")
def test_each_fault_is_contradicted_by_its_designed_part(fault):
    _, row = faults.simulate(
        fault.chain, fault.distribution, fault.dtype, fault.make(WORKLOADS[fault.chain]), sets=200, seed=5, **QUICK
    )
    assert row["verdict"] == "contradicted"
    assert fault.designed in faults.caught_by(row)


def test_the_rare_input_fault_is_seen_by_the_gross_count_alone():
    # five sets in 1000 sit above the P99 of the sets: no quantile moves, only the gross count sees them
    fault = next(f for f in faults.FAULTS if f.designed == "gross")
    _, row = faults.simulate(
        fault.chain, fault.distribution, fault.dtype, fault.make(WORKLOADS[fault.chain]), sets=1000, **QUICK
    )
    assert faults.caught_by(row) == ["gross"] and row["gross_sets"] == 5 == row["gross_sets_needed"]
    assert abs(row["p99_difference"]) < 0.01


def test_the_healthy_single_rounding_is_not_contradicted():
    """The fp32 single rounding as the fused path is what a healthy fused kernel computes: on the
    rows the faults use, no part of the rule contradicts it."""
    for chain, dist, dtype in {(f.chain, f.distribution, f.dtype) for f in faults.FAULTS}:
        healthy = faults.single_rounding(WORKLOADS[chain].fn)
        _, row = faults.simulate(chain, dist, dtype, lambda args, i, h=healthy: h(*args), sets=100, seed=6, **QUICK)
        assert row["verdict"] != "contradicted", (chain, dist, dtype, faults.caught_by(row))
