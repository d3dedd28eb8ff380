"""floor_divide by the Python scalar 0.001: 8.0 / 0.001 is just below 8000 (0.001 is slightly above
1/1000 in binary), so eager and Python (8.0 // 0.001 == 7999.0) give 7999; Inductor gives 8000.
Exits 1 while it reproduces."""
import sys
import torch

x = torch.tensor([8.0, 4.0, 2.0, 0.5, 16.0], dtype=torch.float64)
f = lambda x: torch.floor_divide(x, 0.001)  # noqa: E731
eager, fused = f(x), torch.compile(f)(x)
print("eager", eager.tolist(), "python", [v // 0.001 for v in x.tolist()], "\nfused", fused.tolist())
sys.exit(int(not torch.equal(eager, fused)))
