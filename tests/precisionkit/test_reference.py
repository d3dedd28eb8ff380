"""precisionkit.reference: fp64_reference."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn

from precisionkit import fp64_reference


def test_function_output_is_float64_and_exact():
    x = torch.tensor([0.1, 3.0], dtype=torch.float16)
    out = fp64_reference(lambda v: v * 3, x)
    assert out.dtype == torch.float64
    # the fp16 input is upcast exactly, then multiplied in fp64
    assert out.tolist() == [float(x[0]) * 3, 9.0]
    assert x.dtype == torch.float16 and x.tolist() == [float(torch.tensor(0.1, dtype=torch.float16)), 3.0]


def test_single_tensor_vs_positional_tuple_and_list():
    a = torch.tensor([1.0, 2.0], dtype=torch.float32)
    b = torch.tensor([0.5, 0.25], dtype=torch.bfloat16)
    assert fp64_reference(lambda x, y: x + y, (a, b)).tolist() == [1.5, 2.25]
    assert fp64_reference(lambda x, y: x - y, [a, b]).tolist() == [0.5, 1.75]


def _small_model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_module_runs_in_fp64_and_leaves_caller_unchanged(dtype):
    model = _small_model(dtype)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 8).to(dtype)
    x_before = x.clone()

    out = fp64_reference(model, x)

    assert out.dtype == torch.float64 and out.shape == (4, 16)
    # computed from the exactly upcast parameters and inputs
    lin, ln = model[0], model[1]
    y = x.double() @ lin.weight.double().T + lin.bias.double()
    expected = torch.nn.functional.layer_norm(y, (16,), ln.weight.double(), ln.bias.double(), ln.eps)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    # caller's module and input: same dtype, same values
    for k, v in model.state_dict().items():
        assert v.dtype == dtype, k
        assert torch.equal(v, before[k]), k
    assert next(model.parameters()).dtype == dtype
    assert x.dtype == dtype and torch.equal(x, x_before)


def test_fx_graph_module():
    def f(x, y):
        return torch.relu(x) * y + 1

    gm = torch.fx.symbolic_trace(f)
    assert isinstance(gm, torch.fx.GraphModule)
    x = torch.tensor([-1.0, 2.0], dtype=torch.float16)
    y = torch.tensor([3.0, 0.1], dtype=torch.float32)
    out = fp64_reference(gm, (x, y))
    assert out.dtype == torch.float64
    assert out.tolist() == [1.0, 2.0 * float(y[1]) + 1]


def test_fx_traced_module_parameters_unchanged():
    model = _small_model(torch.float16)
    gm = torch.fx.symbolic_trace(model)
    out = fp64_reference(gm, torch.ones(2, 8, dtype=torch.float16))
    assert out.dtype == torch.float64
    assert all(p.dtype == torch.float16 for p in gm.parameters())


def test_output_structures_are_preserved():
    Pair = collections.namedtuple("Pair", "lo hi")

    def f(x):
        return {"sum": x.sum(), "parts": [x * 2, (x + 1, x.argmax())], "pair": Pair(x.min(), x.max())}

    out = fp64_reference(f, torch.tensor([1.0, 4.0], dtype=torch.float32))
    assert set(out) == {"sum", "parts", "pair"}
    assert out["sum"].dtype == torch.float64 and out["sum"].item() == 5.0
    assert isinstance(out["parts"], list) and isinstance(out["parts"][1], tuple)
    assert out["parts"][0].dtype == torch.float64 and out["parts"][0].tolist() == [2.0, 8.0]
    assert out["parts"][1][0].tolist() == [2.0, 5.0]
    assert out["parts"][1][1].dtype == torch.int64 and out["parts"][1][1].item() == 1
    assert isinstance(out["pair"], Pair) and out["pair"].hi.dtype == torch.float64


def test_integer_inputs_are_untouched():
    table = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=torch.float16)
    index = torch.tensor([2, 0], dtype=torch.int64)
    seen = {}

    def gather(t, i):
        seen["index_dtype"] = i.dtype
        return t[i]

    out = fp64_reference(gather, (table, index))
    assert seen["index_dtype"] == torch.int64
    assert out.dtype == torch.float64 and out.tolist() == [[5.0, 6.0], [1.0, 2.0]]
    assert index.dtype == torch.int64 and index.tolist() == [2, 0]


def test_in_place_graph_does_not_modify_caller_inputs():
    x64 = torch.tensor([1.0, 2.0], dtype=torch.float64)
    i = torch.tensor([1, 2])

    def f(x, idx):
        idx.add_(10)
        return x.mul_(3)

    out = fp64_reference(f, (x64, i))
    assert out.tolist() == [3.0, 6.0]
    assert x64.tolist() == [1.0, 2.0]  # an fp64 input needs no upcast, but is still not shared
    assert i.tolist() == [1, 2]


def test_hard_cast_output_raises_naming_the_output():
    with pytest.raises(TypeError, match=r"output is torch\.float16"):
        fp64_reference(lambda x: x.half(), torch.ones(2))
    with pytest.raises(TypeError, match=r"output\[1\] is torch\.float32"):
        fp64_reference(lambda x: (x, x.float()), torch.ones(2))
    with pytest.raises(TypeError, match=r"output\['b'\]\[0\] is torch\.bfloat16"):
        fp64_reference(lambda x: {"a": x, "b": [x.bfloat16()]}, torch.ones(2))


def test_factory_tensors_without_dtype_are_fp64_and_default_restored():
    default = torch.get_default_dtype()

    def f(x):
        return x + torch.ones(2) * torch.tensor(0.1) + torch.zeros_like(x) + torch.arange(2.0)

    out = fp64_reference(f, torch.tensor([1.0, 2.0], dtype=torch.float16))
    assert out.dtype == torch.float64
    assert out.tolist() == [1.0 + 0.1, 2.0 + 0.1 + 1.0]  # 0.1 is the fp64 0.1, not fp32's
    assert torch.get_default_dtype() == default


def test_runs_without_autograd_and_without_autocast():
    w = torch.ones(2, requires_grad=True)
    out = fp64_reference(lambda x: x * w, torch.ones(2))
    assert out.requires_grad is False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fp64_reference(lambda x: x @ x.T, torch.ones(2, 2))
    assert out.dtype == torch.float64


def test_the_reference_runs_on_the_inputs_device_or_the_one_named():
    x = torch.tensor([0.1, 3.0], dtype=torch.float16)
    assert fp64_reference(lambda v: v * 3, x).device.type == "cpu"  # CPU inputs: the CPU, as always
    # "meta" stands in for an accelerator (this build has none): the graph runs where it is told,
    # and inputs already there stay there.
    on_meta = fp64_reference(lambda v: v * 3, x, device="meta")
    assert (on_meta.device.type, on_meta.dtype, on_meta.shape) == ("meta", torch.float64, x.shape)
    meta_in = torch.empty(2, 8, dtype=torch.float16, device="meta")
    model = _small_model(torch.float16)
    out = fp64_reference(model, meta_in)  # the module's copy follows the inputs; the caller's stays
    assert (out.device.type, out.dtype, out.shape) == ("meta", torch.float64, (2, 16))
    assert next(model.parameters()).device.type == "cpu" and next(model.parameters()).dtype == torch.float16


def test_inputs_on_several_devices_need_the_device_named():
    cpu, meta = torch.ones(2), torch.empty(2, device="meta")
    with pytest.raises(ValueError, match=r"several devices \(cpu, meta\); pass device="):
        fp64_reference(lambda a, b: a + b, (cpu, meta))
    assert fp64_reference(lambda a, b: a + b, (cpu, meta), device="meta").device.type == "meta"


def test_tensors_the_graph_builds_are_on_the_reference_device():
    def f(x):
        return x + torch.ones(2) * torch.tensor(0.1) + torch.arange(2.0)

    out = fp64_reference(f, torch.empty(2, dtype=torch.float16, device="meta"))
    assert (out.device.type, out.dtype) == ("meta", torch.float64)
    assert torch.ones(1).device.type == "cpu"  # torch's default device is back
