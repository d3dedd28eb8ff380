"""torch.cov with aweights, compiled with dynamic shapes: eager returns a value, the compile raises
`RuntimeError when making fake tensor call` (the root error: `Cannot call numel() on tensor with
symbolic sizes/strides`). Without weights it compiles. Exits 1 while the compile raises."""
import sys
import torch

x = torch.tensor([0.3, -1.2, 0.7], dtype=torch.float64)
w = torch.tensor([0.5, 0.2, 0.9], dtype=torch.float64)


def f(x, w):
    return torch.cov(x, correction=0, aweights=w)


print("eager", f(x, w).item())
try:
    print("compiled", torch.compile(f, dynamic=True)(x, w).item())
except Exception as exc:  # noqa: BLE001
    print("compiled raised", type(exc).__name__, str(exc).splitlines()[0])
    sys.exit(1)
sys.exit(0)
