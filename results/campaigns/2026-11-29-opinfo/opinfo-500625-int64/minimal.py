"""opinfo-500625-int64 cut down: the mean that torch.var_mean returns for a row of +inf. torch.mean
gives +inf (as fp64 and the mathematics do); eager var_mean gives NaN (its running-mean update
forms inf - inf), in fp16 and fp64 alike. The fused program returned +inf: the defect is eager's.
Exits 1 while eager's var_mean disagrees with its own mean."""

import sys

import torch

bad = []
for dtype in (torch.float16, torch.float64):
    x = torch.full((5,), float("inf"), dtype=dtype)
    mean, from_var_mean = x.mean().item(), torch.var_mean(x, correction=2)[1].item()
    print(f"{dtype}: mean {mean!r}, var_mean's mean {from_var_mean!r}")
    if mean == float("inf") and from_var_mean != from_var_mean:
        bad.append(dtype)
sys.exit(1 if bad else 0)
