"""The opinfo generator writes an op that returns one of the values it compares (fmax, clamp_max, ...) as
``... + 0.0``: +0.0 and -0.0 compare equal, no documentation says which of them such an op returns, and
Inductor's choice was flagged twice in campaign d (540552: fmax, 116 of 500 elements eager +0.0, Inductor
-0.0; 540944: clamp_max of cholesky's zero upper triangle and an input's -0.0). The same holds for an
internal op whose formula is not fixed to a zero's sign (540750: _softmax_backward_data, eager's kernel
out * (grad - sum), Inductor's decomposition grad * out - out * sum), and for softshrink, documented as 0 inside its band,
where eager gives -0.0 for a small negative input (campaign e's 551033), and for cosine_similarity, whose
zero is a sum of -0.0 values (campaign f's 560576: eager +0.0, Inductor -0.0). Adding +0.0 makes both zeros
+0.0 and keeps every other value judged."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest")  # torch's op database needs it

from precisionkit.difftest import generate
from precisionkit.repro import Case, reproduces


def _line_of(case: Case, call: str) -> str:
    return next(line for line in case.source.splitlines() if call in line)


@pytest.mark.parametrize(
    ("seed", "call", "ops"),
    [
        (540552, "torch.fmax(", ["nn.functional.interpolate.bicubic", "masked.logaddexp", "fmax"]),
        (
            540944,
            "torch.clamp_max(",
            ["softmax.with_dtype", "nn.functional.threshold", "linalg.cholesky_ex", "clamp_max"],
        ),
        (540750, "_softmax_backward_data(", ["all", "isnan", "_softmax_backward_data"]),
        (
            551033,
            "F.softshrink(",
            [
                "unbind",
                "lu",
                "special.shifted_chebyshev_polynomial_w",
                "tensordot",
                "nn.functional.tanhshrink",
                "div.floor_rounding",
                "nn.functional.softshrink",
                "div.trunc_rounding",
            ],
        ),
        (
            560576,
            "F.cosine_similarity(",
            [
                "nn.functional.pad.circular",
                "linalg.det",
                "atanh",
                "special.shifted_chebyshev_polynomial_v",
                "nn.functional.cosine_similarity",
                "scatter_reduce.prod",
            ],
        ),
    ],
)
def test_a_choice_between_two_zeros_is_not_judged(seed: int, call: str, ops: list[str]) -> None:
    case = generate(seed, "opinfo")
    assert [o["op"] for o in case.extra["ops"]] == ops
    assert _line_of(case, call).endswith(" + 0.0")
    found, message = reproduces(case)
    assert not found, message


def test_adding_zero_keeps_every_value_but_a_zeros_sign() -> None:
    x = torch.tensor([-0.0, 0.0, float("nan"), -float("inf"), -2.5, 1e-45], dtype=torch.float32)
    y = x + 0.0
    assert [str(v) for v in y.tolist()] == ["0.0", "0.0", "nan", "-inf", "-2.5", str(x[5].item())]
    assert x[5].item() > 0.0  # a subnormal survives
