"""native_layer_norm over a single NaN element (580524): the variance of [NaN] is NaN, so rstd is
NaN (eager); Inductor returns 1/sqrt(eps) = 316.2277..., as if the variance were 0 whatever the
value. Exits 1 while it reproduces."""
import sys

import torch


def f(x):
    return torch.native_layer_norm(x, (1,), None, None, 1e-5)[2]


x = torch.tensor([float("nan")], dtype=torch.float64)
e, c = f(x), torch.compile(f)(x)
print("rstd eager", e.tolist(), "compiled", c.tolist())
sys.exit(int(bool(e.isnan().any()) and not bool(c.isnan().any())))
