"""A replicate pad of a repeated-then-sliced tensor, compiled statically: eager runs, Inductor raises
`AssertionError: vr must not be None for symbol q2`. Without the repeat (a slice alone, or a pointwise
op and a slice) it compiles. Exits 1 while the compile raises."""
import sys
import torch
import torch.nn.functional as F

x = torch.randn(125)


def f(x):
    return F.pad(x.repeat(2)[:200].reshape((4, 2, 5, 5)), (2, 1, 4, 6), "replicate")


print("eager", tuple(f(x).shape))
try:
    print("compiled", tuple(torch.compile(f)(x).shape))
except Exception as exc:  # noqa: BLE001
    print("compiled raised", type(exc).__name__, str(exc).splitlines()[0])
    sys.exit(1)
sys.exit(0)
