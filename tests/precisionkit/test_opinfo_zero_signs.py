"""The ``diff`` rule and the sign of a zero that an op sums or maximises inside: an average or max
pool, bilinear interpolation (a weighted sum), a norm's mean, a loss's mean. Whether such a zero is
+0 or -0 is its accumulator's and its order's (eager's pool of one -0 starts from +0 and returns +0;
Inductor's returns the -0), as for sum and mean, so it is not judged. A zero that a pointwise op
makes from such an op's nonzero result is still judged.

The programs are the opinfo campaign's false alarms opinfo-500465-float64 (adaptive_avg_pool2d),
opinfo-500482-float32 (bilinear interpolation) and opinfo-500492-bfloat16 (native_layer_norm's mean)
cut to their ops, and their kin."""

from __future__ import annotations

import pytest
from repro_backends import SETUP, register

from precisionkit.repro import Case, Input, reproduces

register()

X = Input("x", (2, 3, 4, 4), "float32", 7)
NEGATIVE_ZEROS = "    x = -(x.abs() * 0.0)\n"  # every element -0

PROGRAMS = {
    "adaptive_avg_pool2d": "F.adaptive_avg_pool2d(x, (None, None))",
    "avg_pool2d": "F.avg_pool2d(x, 2)",
    "max_pool2d": "F.max_pool2d(torch.cat([x, -x], -1), 2)",
    "bilinear": "F.interpolate(torch.cat([x, -x], -1), scale_factor=1.7, mode='bilinear')",
    "layer_norm_mean": "torch.native_layer_norm(x.flatten()[:1], (1,), None, None, 1e-5)[1]",
    "huber_loss": "F.huber_loss(x, x * 0.5, reduction='mean') * 2.0",
}


@pytest.mark.parametrize("op", sorted(PROGRAMS))
def test_a_zero_an_op_sums_or_maximises_inside_is_not_judged(op: str) -> None:
    # the backend turns every +0 of the outputs into -0
    source = f"def graph(x):\n{NEGATIVE_ZEROS}    return {PROGRAMS[op]}\n"
    case = Case("z", source, (X,), backend="pk_test_negative_zero", rule="diff", setup=SETUP)
    assert reproduces(case) == (False, "every output agrees with eager and fp64 (pk_test_negative_zero)")


def test_a_pointwise_zero_made_from_a_pools_nonzero_result_is_still_judged() -> None:
    source = "def graph(x):\n    return F.avg_pool2d(x.abs() + 1.0, 2) * 0.0\n"
    case = Case("z", source, (X,), backend="pk_test_negative_zero", rule="diff", setup=SETUP)
    hit, msg = reproduces(case)
    assert (
        hit
        and msg.startswith("output 0: 24 of 24 elements wrong; at (0, 0, 0, 0): eager 0.0, ")
        and msg.endswith("fused (pk_test_negative_zero) -0.0, fp64 0.0")
    )
