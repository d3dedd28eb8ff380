"""adaptive_avg_pool2d alone, compiled with dynamic shapes: eager runs, Inductor raises
`LoweringException: TypeError: cannot determine truth value of Relational: 2*(((2*s.. + 1)//s..)) > 25`.
Exits 1 while the compile raises."""
import sys
import torch
import torch.nn.functional as F

x = torch.randn(8, 4, 3)


def f(x):
    return F.adaptive_avg_pool2d(x, (5, None))


print("eager", tuple(f(x).shape))
try:
    print("compiled", tuple(torch.compile(f, dynamic=True)(x).shape))
except Exception as exc:  # noqa: BLE001
    print("compiled raised", type(exc).__name__, str(exc).splitlines()[0])
    sys.exit(1)
sys.exit(0)
