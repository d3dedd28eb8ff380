"""Inputs with ``specials`` values: the salting of :mod:`precisionkit.specials`, pasted into the file,
drawing the same bits in the file, in-process and through the device rewrite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from precisionkit import specials
from precisionkit.repro import Case, Input, make_inputs, render, write

_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_INT[t.element_size()]).reshape(-1)


def _case(**changes: object) -> Case:
    inputs = (
        Input("x", (2, 8, 16), "float16", 11, "contiguous", values="specials"),
        Input("y", (3, 40, 24), "bfloat16", 12, "transposed", values="specials"),
        Input("z", (4, 5), "float32", 13),
    )
    return Case("specials", "def graph(x, y, z):\n    return -x, -y, z\n", inputs, backend="eager").with_(**changes)


def test_specials_need_a_floating_dtype() -> None:
    with pytest.raises(ValueError, match="input 'i': specials values need a floating dtype, not int32"):
        Input("i", (4,), "int32", values="specials")


def test_each_stretch_of_64_holds_one_special_value_in_turn() -> None:
    x, y, z = make_inputs(_case())
    for t in (x, y):
        flat = t.transpose(-1, -2).contiguous().reshape(-1) if t is y else t.reshape(-1)  # as drawn
        count = max(7, flat.numel() // 64)  # 256 elements: 7 (one of each value); 2880: 45
        stretch = flat.numel() // count
        special = ~torch.isfinite(flat) | (flat == 0) | (flat.abs() < torch.finfo(t.dtype).smallest_normal)
        where = special.nonzero().reshape(-1)
        assert where.numel() == count and torch.equal(where // stretch, torch.arange(count))
        want = specials.special_values(t.dtype, torch.device("cpu")).to(t.dtype)[torch.arange(count) % 7]
        # NaN's payload after the cast depends on the cast's code path (vectorized or not), so NaN by class
        got, nan = flat[where], want.isnan()
        assert torch.equal(got.isnan(), nan) and torch.equal(_bits(got[~nan]), _bits(want[~nan]))
    assert bool(torch.isfinite(z).all()) and not bool((z == 0).any())  # normal values stay unsalted


def test_the_file_pastes_the_one_salting_and_draws_alike_everywhere(tmp_path: Path) -> None:
    case = _case()
    text = render(case)
    assert specials.SOURCE in text and "precisionkit" not in text
    assert "salt_specials" not in render(_case(inputs=case.inputs[2:], source="def graph(z):\n    return z\n"))
    here = make_inputs(case)
    # the device rewrite (generators and tensors named by device) on a CPU device name draws the same bits
    assert all(
        torch.equal(_bits(a), _bits(b)) for a, b in zip(here, make_inputs(case.with_(device="cpu:0")), strict=True)
    )
    # and so does the file alone, in a fresh interpreter
    script = write(case, tmp_path)
    code = (
        "import runpy, torch\n"
        f"make = runpy.run_path({str(script)!r})['make']\n"
        "for t in make():\n"
        "    print(t.contiguous().view(-1).view({2: torch.int16, 4: torch.int32}[t.element_size()]).tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [repr(_bits(t).tolist()) for t in here]
