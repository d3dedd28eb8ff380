"""opinfo-500493-float32 cut down: bilinear interpolation between 3e38 and -3e38 (both finite fp32).
Eager weighs the two ends (w0 a + w1 b) and returns finite values, 0 in the middle; Inductor on the
CPU returns NaN there: its kernel forms b - a, which overflows. Exits 1 while it reproduces."""

import sys

import torch
import torch.nn.functional as F


def lerp2d(x):
    return F.interpolate(x, size=(1, 3), mode="bilinear", align_corners=True)


x = torch.tensor([[[[3e38, -3e38]]]])
eager, fused = lerp2d(x), torch.compile(lerp2d)(x)
print(f"eager {eager.flatten().tolist()}, fused {fused.flatten().tolist()}")
sys.exit(1 if bool(eager.isfinite().all()) and not bool(fused.isfinite().all()) else 0)
