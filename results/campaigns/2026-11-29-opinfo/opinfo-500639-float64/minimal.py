"""opinfo-500639-float64 cut down: layer norm over one element of 1e300 (fp64). The variance of one
value is 0, so rstd is 1 / sqrt(eps) = 316.23 (Inductor's fused kernel returns that); eager returns
NaN, its variance forming 1e300 squared, which overflows. The defect is eager's. Exits 1 while eager
returns NaN there."""

import sys

import torch


def norm(x):
    return torch.native_layer_norm(x, (1,), None, None, 1e-5)[2]


x = torch.tensor([1e300], dtype=torch.float64)
eager, fused = norm(x).item(), torch.compile(norm)(x).item()
print(f"rstd: eager {eager!r}, fused {fused!r}, exact {1e-5 ** -0.5!r}")
sys.exit(1 if eager != eager else 0)
