"""The opinfo generator keeps ``_unsafe_masked_index``'s own mask: the mask says where the indices
are in bounds (where it is false, the result is the fill value and the index is never read). Seed
500673 fed a seeded mask instead, true where an index was 5 on a row of 5: eager clamps such an index,
Inductor reads past the row (eager 0, fused 2**60), which the op leaves undefined: a false alarm of
the campaign's segment 4. The op stays judged: a compiler that drops the mask is caught."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("expecttest")  # torch's op database needs it

from precisionkit.difftest import generate
from precisionkit.difftest.opinfo_samples import templates
from precisionkit.repro import reproduces


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_the_mask_is_the_samples_and_true_only_where_every_index_is_in_bounds(dtype: str) -> None:
    found = templates("_unsafe_masked_index", dtype)
    assert found
    for t in found:
        head, mask, *indices = t.slots
        assert mask.role == "literal" and mask.dtype == "bool"
        where = torch.tensor(mask.values).expand(torch.Size(mask.shape))
        for d, index in enumerate(indices):
            rows = torch.tensor(index.values).expand_as(where)
            assert bool(((rows >= 0) & (rows < head.shape[d]))[where].all()), (t, d)


def _mask_dropped(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """A broken compiler: reads every (clamped) index, as if the mask were all true."""

    def ignore_mask(x: torch.Tensor, mask: torch.Tensor, indices: list[torch.Tensor], fill: Any) -> torch.Tensor:
        return x[tuple(i.clamp(0, n - 1) for i, n in zip(indices, x.shape, strict=False))]

    for node in gm.graph.nodes:
        if node.target is torch._unsafe_masked_index:
            node.target = ignore_mask
    gm.recompile()
    return gm.forward


def test_seed_500673_is_clean_and_a_compiler_that_drops_the_mask_is_caught() -> None:
    case = generate(500673, "opinfo")
    assert "torch._unsafe_masked_index(" in case.source and "b1" not in case.source
    assert reproduces(case, "inductor")[0] is False
    torch._dynamo.register_backend(_mask_dropped, name="pk_test_mask_dropped")
    hit, message = reproduces(case.with_(backend="pk_test_mask_dropped"))
    assert hit, message
    assert "eager -8, fused" in message
