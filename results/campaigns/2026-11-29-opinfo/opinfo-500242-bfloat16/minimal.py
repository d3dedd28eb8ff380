"""opinfo-500242-bfloat16 cut down: the standard deviation of identical values whose square overflows
fp32. Eager returns 0 (in float32 and bfloat16); Inductor on the CPU returns NaN. Exits 1 while it
reproduces."""

import sys

import torch


def std(x):
    return torch.std(x, True)


bad = []
for dtype in (torch.float32, torch.bfloat16):
    x = torch.full((5,), 1e20, dtype=dtype)  # 1e20 ** 2 is beyond fp32's 3.4e38
    torch._dynamo.reset()
    eager, fused = std(x).item(), torch.compile(std)(x).item()
    print(f"{dtype}: eager {eager!r}, fused {fused!r}")
    if eager == eager and fused != fused:
        bad.append(dtype)
sys.exit(1 if bad else 0)
