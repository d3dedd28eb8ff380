"""The variance of a float16 tensor cast to float64: the compile raises
`AssertionError: Welford reduction does not support VectorizedN (N>2)` (Inductor's CPU code for a float64
Welford reduction over float16 loads); eager runs. Exits 1 while the compile raises."""
import sys
import torch

x = torch.randn(256, generator=torch.Generator().manual_seed(0)).to(torch.float16)


def f(x):
    return torch.var(x.to(torch.float64))


eager = f(x)
try:
    fused = torch.compile(f)(x)
except Exception as e:  # noqa: BLE001 - the defect is that the compile raises
    print("compile raises:", type(e).__name__, str(e).splitlines()[0])
    sys.exit(1)
print("compiled runs; equal to eager:", torch.equal(eager, fused))
sys.exit(0)
