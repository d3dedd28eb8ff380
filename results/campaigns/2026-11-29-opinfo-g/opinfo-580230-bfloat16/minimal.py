"""adaptive_max_pool1d's index of a NaN that is not first in its window (580230, 580433, 580485).

Output size 3 from length 4: the windows are [0, 2), [1, 3), [2, 4). The middle window holds -0.5 and
NaN: the maximum is NaN in eager and compiled alike, eager's index names the NaN (2), Inductor's
names -0.5 (1). Inductor's adaptive_max_pool2d lowering moves its index only where
``ops.gt(val, maxval)`` holds, which is false for a NaN, while its value is ``ops.maximum``, which
propagates NaN. Exits 1 while it reproduces."""
import sys

import torch
import torch.nn.functional as F


def f(x):
    return F.adaptive_max_pool1d(x, 3, return_indices=True)


x = torch.tensor([[1.0, -0.5, float("nan"), 0.2]])
ev, ei = f(x)
cv, ci = torch.compile(f)(x)
print("values  eager", ev.tolist(), "compiled", cv.tolist())
print("indices eager", ei.tolist(), "compiled", ci.tolist())
sys.exit(int(not torch.equal(ei, ci)))
