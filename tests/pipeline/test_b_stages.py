"""B's chains op by op (pipeline/experiments/accumulated_error/stages.py): the staged form computes the chain."""

import pytest
import torch

from pipeline.experiments.accumulated_error.stages import CHAIN_STAGES, chain_without_fusing
from pipeline.experiments.toolkit.spec import SIZES
from pipeline.workloads import CHAINS, WORKLOADS, set_args

SMOKE = SIZES["smoke"]


def _args(chain: str) -> tuple[torch.Tensor, ...]:
    workload = WORKLOADS[chain]
    pool = workload.sample(SMOKE, next(iter(workload.distributions)), 2, seed=3)
    return tuple(t.float() for t in set_args(pool, workload, 1))


def test_every_chain_has_its_stages_and_nothing_else():
    assert set(CHAIN_STAGES) == set(CHAINS)


@pytest.mark.parametrize("chain", sorted(CHAIN_STAGES))
def test_the_plain_hook_computes_the_chain_bit_for_bit(chain):
    ops, build = CHAIN_STAGES[chain]
    seen: list[int] = []

    def hook(i, fn, *args):
        seen.append(i)
        return fn(*args)

    args = _args(chain)
    staged = build(hook)(*args)
    assert torch.equal(staged, WORKLOADS[chain].fn(*args))
    assert sorted(seen) == list(range(len(ops)))  # every op passes through the hook once


def test_an_op_kept_out_of_the_fused_region_keeps_the_values_and_its_range_is_checked():
    args = _args("mul_add_gelu_mul")
    eager = WORKLOADS["mul_add_gelu_mul"].fn(*args)
    assert torch.equal(chain_without_fusing("mul_add_gelu_mul", 2)(*args), eager)
    with pytest.raises(ValueError, match=r"chain 'mul_add_gelu_mul' has ops 0\.\.3 \(mul, add, gelu, mul\), not 4"):
        chain_without_fusing("mul_add_gelu_mul", 4)
