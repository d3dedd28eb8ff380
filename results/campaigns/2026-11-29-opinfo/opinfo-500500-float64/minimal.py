"""opinfo-500500-float64 cut down: bilinear interpolation (align_corners=True) of +inf and +inf with
both weights nonzero. Eager weighs the ends (w0 inf + w1 inf = inf); Inductor on the CPU returns NaN:
its kernel forms b - a, inf - inf. (Where a weight is exactly 0 eager itself returns 0 * inf = NaN;
only the middle is compared.) Exits 1 while it reproduces."""

import sys

import torch
import torch.nn.functional as F


def lerp2d(x):
    return F.interpolate(x, size=(3, 3), mode="bilinear", align_corners=True)


x = torch.full((1, 1, 2, 2), float("inf"), dtype=torch.float64)
eager, fused = lerp2d(x)[0, 0, 1, 1].item(), torch.compile(lerp2d)(x)[0, 0, 1, 1].item()
print(f"middle: eager {eager!r}, fused {fused!r}")
sys.exit(1 if eager == float("inf") and fused != fused else 0)
