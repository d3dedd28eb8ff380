"""A reproducer of a D row draws the row's own inputs (seeds, special values, dtypes, layout), so it
reproduces what D's check table saw: a fault on a special value (here a negation that loses the
sign of +0, as Triton's unary minus computed as ``0 - x`` does) shows in the reproducer too."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline.experiments.data_movement.assets import combination_inputs
from pipeline.experiments.data_movement.movement import CATALOGUE
from pipeline.experiments.data_movement.repro_cases import case as d_case
from pipeline.resources import ExperimentSettings
from precisionkit.repro import make_inputs, reproduces, run_script, write

_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}

#: A torch.compile backend whose negation is ``0 - x``: the same bits as eager's ``-x`` everywhere
#: except +0, which it returns as +0 where negation gives -0. Idempotent: the case's file runs it,
#: and so does every in-process run of the case.
ZERO_MINUS_SETUP = """import operator
from torch._dynamo import list_backends, register_backend

def zero_minus(a):
    return 0 - a

def zero_minus_neg(gm, example_inputs):
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in (operator.neg, torch.neg):
            node.target = zero_minus
    gm.recompile()
    return gm.forward

if "pk_test_zero_minus_neg" not in list_backends(exclude_tags=()):
    register_backend(compiler_fn=zero_minus_neg, name="pk_test_zero_minus_neg")
"""


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_INT[t.element_size()]).reshape(-1)


def _same_tensor(mine: torch.Tensor, theirs: torch.Tensor) -> bool:
    return (
        mine.dtype == theirs.dtype
        and mine.shape == theirs.shape
        and mine.stride() == theirs.stride()
        and torch.equal(_bits(mine), _bits(theirs))
    )


@pytest.mark.parametrize(
    ("subgraph", "dtype", "shape", "layout"),
    [
        ("rope_rotate_half", "float16", (2, 8, 16), "contiguous"),  # salted, the row of the H200 finding
        ("transpose_concat", "bfloat16", (1, 7, 24), "transposed_view"),  # salted, strided, odd sizes
        ("scaled_add_concat", "float32", (2, 8, 16), "contiguous"),  # a counterexample: unsalted
        ("promote_broadcast_concat", "float16", (1, 7, 24), "transposed_view"),  # unsalted, y read wider
    ],
)
@pytest.mark.parametrize("seed", [None, 7])
def test_d_case_draws_the_bits_d_draws_for_the_row(
    subgraph: str, dtype: str, shape: tuple[int, ...], layout: str, seed: int | None
) -> None:
    settings = ExperimentSettings(device="cpu", backend="inductor", **({} if seed is None else {"seed": seed}))
    # no derived_seed given: the default run's, which is what settings without a seed derive
    derived = None if seed is None else settings.derived_seed
    case = d_case(subgraph, dtype, shape, layout, derived_seed=derived)
    x, y = make_inputs(case)
    d_x, d_y = combination_inputs(CATALOGUE[subgraph], dtype, shape, layout, settings.derived_seed, torch.device("cpu"))
    assert _same_tensor(x, d_x) and _same_tensor(y, d_y)
    salted = not CATALOGUE[subgraph].has_implicit_computation
    assert bool(x.isnan().any()) == salted and bool((_bits(x) == 0).any()) == salted  # NaN and +0 only salted


def test_another_base_seed_gives_other_inputs() -> None:
    default = make_inputs(d_case("rope_rotate_half", "float16", (2, 8, 16), "contiguous"))
    seven = ExperimentSettings(device="cpu", backend="inductor", seed=7).derived_seed
    other = make_inputs(d_case("rope_rotate_half", "float16", (2, 8, 16), "contiguous", derived_seed=seven))
    assert not torch.equal(_bits(default[0]), _bits(other[0]))


def _positive_zeros_negated(case_inputs: list[torch.Tensor]) -> int:
    """+0 elements in the halves rope_rotate_half negates (the last half of the hidden dim)."""
    return sum(int((_bits(t[..., t.shape[-1] // 2 :]) == 0).sum()) for t in case_inputs)


def test_a_rope_row_reproduces_under_a_negation_that_loses_the_sign_of_zero(tmp_path: Path) -> None:
    case = d_case("rope_rotate_half", "float16", (2, 8, 16), "contiguous").with_(
        backend="pk_test_zero_minus_neg", setup=ZERO_MINUS_SETUP
    )
    # each +0 the graph negates is one element whose sign differs (-0 and NaN negate alike both ways)
    expected = _positive_zeros_negated(make_inputs(case))
    assert expected >= 1  # the row's salting puts a +0 where the graph negates: what D's table saw
    message = f"{expected} of 512 elements differ in their bits between eager and fused (pk_test_zero_minus_neg)"
    assert reproduces(case) == (True, message)
    assert reproduces(case, "eager") == (
        False,
        "0 of 512 elements differ in their bits between eager and fused (eager)",
    )
    run = run_script(write(case, tmp_path / "rope"))
    assert run.status == "reproduces" and run.last_line == "REPRODUCES: " + message
