"""The variance of float64 values whose squares overflow: eager inf (the variance is beyond float64),
Inductor NaN; batch and group norm over such values follow it (eager finite, Inductor NaN: findings
510952 and 511001). Exits 1 while it reproduces."""
import sys
import torch

x = torch.tensor([5.3e302, -4e302, 1e302, 2e301, -3e302], dtype=torch.float64)
f = lambda x: torch.var(x, False)  # noqa: E731
eager, fused = f(x).item(), torch.compile(f)(x).item()
print("eager", eager, "fused", fused)
sys.exit(int(eager == float("inf") and fused != fused))
