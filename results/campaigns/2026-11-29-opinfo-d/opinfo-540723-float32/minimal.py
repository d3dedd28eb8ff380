"""Variance of float32 values whose squares overflow: eager inf, Inductor NaN (the float64 case is
campaign b's 510757). Exits 1 while they differ."""
import sys
import torch

x = torch.tensor([3e38, -3e38, 1e38], dtype=torch.float32)


def f(x):
    return torch.var(x, correction=-1)


eager, fused = f(x), torch.compile(f)(x)
print("eager", eager.item(), "compiled", fused.item())
sys.exit(1 if eager.isinf() and fused.isnan() else 0)
