"""HostTraffic counts every device-to-host read made from Python, with its bytes, exactly."""

import operator

import numpy as np
import pytest
import torch

from precisionkit import HostTraffic, fused
from precisionkit.hosttraffic import HostRead, suspended


def _x():
    return torch.arange(24, dtype=torch.float32).reshape(4, 6)  # 96 bytes


def test_whole_tensor_reads_count_their_bytes():
    x = _x()
    with HostTraffic() as t:
        x.cpu()
        x.numpy()
        x.tolist()
        np.asarray(x)
        x.to("cpu")
        x.to(device="cpu")
        x.to(torch.device("cpu"), torch.float16)
        x.to(torch.empty(0))  # the device of another (CPU) tensor
    assert t.by_op() == {"cpu": (1, 96), "numpy": (1, 96), "tolist": (1, 96), "__array__": (1, 96), "to": (4, 384)}
    assert (t.count, t.bytes) == (8, 8 * 96)
    assert t.reads[0] == HostRead("cpu", 96, "cpu", emulated=True, where="test_hosttraffic:20")
    # Each read names the line that made it; a library's read names the library (NumPy's asarray
    # reads through torch's own __array__).
    wheres = [r.where for r in t.reads[:5]]
    assert wheres[:3] == ["test_hosttraffic:20", "test_hosttraffic:21", "test_hosttraffic:22"]
    assert wheres[3].startswith("torch._tensor:") and wheres[4] == "test_hosttraffic:24"


def test_scalar_reads_count_one_element():
    x = _x()
    h = x.to(torch.float16)
    with HostTraffic() as t:
        x[0, 0].item()
        bool(x[0, 1] > 0)  # a bool tensor: 1 byte
        float(h[0, 0])  # fp16: 2 bytes
        int(x[0, 2])
        complex(x[0, 3])
        operator.index(torch.tensor(3))  # int64: 8 bytes
        if x[1, 0]:  # __bool__ of a float element: 4 bytes
            pass
    assert t.by_op() == {
        "item": (1, 4),
        "__bool__": (2, 5),
        "__float__": (1, 2),
        "__int__": (1, 4),
        "__complex__": (1, 4),
        "__index__": (1, 8),
    }
    assert (t.count, t.bytes) == (7, 27)


def test_comparisons_returning_a_python_bool_are_syncs_of_one_byte():
    x = _x()
    with HostTraffic() as t:
        torch.equal(x, x)
        x.equal(x)
        torch.allclose(x, x)
        torch.is_nonzero(torch.tensor([1.0]))
    assert t.by_op() == {"equal": (2, 2), "allclose": (1, 1), "is_nonzero": (1, 1)}


def test_printing_a_tensor_reads_it():
    x = _x()
    with HostTraffic() as t:
        repr(x)
        str(x[0])  # str goes through __repr__
        f"{x[0, 0]:.1f}"
    assert t.by_op() == {"__repr__": (2, 120), "__format__": (1, 4)}


def test_copy_into_a_cpu_tensor_counts_the_source():
    x = _x()
    dst = torch.empty(4, 6, dtype=torch.float64)
    with HostTraffic() as t:
        dst.copy_(x)
        dst.numpy()  # the copy just arrived on the host: reading it moves nothing more
        dst.sum().item()  # a new tensor computed from it does count (as it would on the device)
    assert t.by_op() == {"copy_": (1, 96), "item": (1, 8)}


def test_a_host_copy_is_read_once_and_the_source_stays_a_device_tensor():
    x = _x()
    with HostTraffic() as t:
        host = x.cpu()
        host.numpy()
        host.tolist()
        x.cpu().numpy()  # another copy of the "device" tensor: counted again
        y = x.to("cpu")
    assert t.by_op() == {"cpu": (2, 192), "to": (1, 96)}
    assert host is not x and host.data_ptr() == x.data_ptr() and torch.equal(host, x)
    assert y is not x and y.data_ptr() == x.data_ptr()


def test_work_that_stays_on_the_device_is_not_counted():
    x = _x()
    with HostTraffic() as t:
        y = (x @ x.T).softmax(-1) + 1
        y.to(torch.float16).clone().sum(0)
        x.shape[0] + x.numel() + x.dim()
        x.dtype, x.device, x.stride()
    assert (t.count, t.bytes) == (0, 0)


def test_cpu_tensors_are_not_counted_when_told_so():
    x = _x()
    with HostTraffic(count_cpu=False) as t:
        x.cpu().numpy()
        x.sum().item()
        bool(x.any())
    assert (t.count, t.bytes) == (0, 0)


def test_reset_and_nesting():
    x = _x()
    with HostTraffic() as outer:
        x.sum().item()
        with HostTraffic() as inner:
            x.cpu()
        outer.reset()
        x.tolist()
    assert inner.by_op() == {"cpu": (1, 96)}
    assert outer.by_op() == {"tolist": (1, 96)}


def test_a_fused_function_under_the_counter_does_not_recompile():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    fn = fused(lambda a, b: torch.nn.functional.gelu(a @ b), "inductor")
    fn(x, w)  # compiled outside the counter
    with HostTraffic() as t:
        out = fn(x, w)
        fn(x, w).cpu()
        with suspended():
            x.cpu()  # stepped aside: not counted
    assert fn.evidence.recompiles == 0
    assert t.by_op() == {"cpu": (1, 128)}
    assert out.shape == (4, 8)


def test_suspended_keeps_other_modes_and_restores_the_stack():
    class Other(torch.overrides.TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Other.calls += 1
            return func(*args, **(kwargs or {}))

    x = _x()
    with HostTraffic() as t, Other():
        with suspended():
            x.cpu()
            assert torch._C._len_torch_function_stack() == 1
        assert torch._C._len_torch_function_stack() == 2
        x.cpu()
    assert Other.calls == 2 and t.by_op() == {"cpu": (1, 96)}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_only_device_tensors_count():
    x = _x().cuda()
    with HostTraffic(count_cpu=False) as t:
        host = x.cpu()
        host.numpy()
        x.sum().item()
        torch.equal(x, x)
        torch.empty(4, 6).copy_(x)
        x.to("cuda")  # stays on the device
    assert t.by_op() == {"cpu": (1, 96), "item": (1, 4), "equal": (1, 1), "copy_": (1, 96)}
    assert all(not r.emulated and r.device.startswith("cuda") for r in t.reads)


def test_suspended_without_torchs_private_mode_stack(monkeypatch):
    """On a torch release without the private mode-stack functions, a compiled call outside any counter
    still runs and a counter that would have to step aside says why instead of miscounting."""
    from precisionkit import hosttraffic

    monkeypatch.setattr(hosttraffic, "_STACK_API", False)
    with suspended():  # no counter active: nothing to step aside
        pass
    with HostTraffic() as t, pytest.raises(RuntimeError, match="cannot step aside on torch"), suspended():
        pass
    assert t.count == 0 and hosttraffic._active_counters == 0
