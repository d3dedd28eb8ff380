"""avg_pool3d of a transposed int64 tensor, then pow(-1, .): the compile raises
`AssertionError: expected size 2==2, stride 2==1 at dim=3` (in aten.pow.Scalar), static and dynamic alike;
eager runs, and each op compiled alone runs. Exits 1 while the compile raises."""
import sys
import torch
import torch.nn.functional as F

x = torch.randint(-100, 100, (2, 3, 3, 4, 4), generator=torch.Generator().manual_seed(0)).transpose(-1, -2)


def f(x):
    return torch.pow(-1, F.avg_pool3d(x, (2, 2, 2)))


eager = f(x)
try:
    fused = torch.compile(f)(x)
except Exception as e:  # noqa: BLE001 - the defect is that the compile raises
    print("compile raises:", type(e).__name__, str(e).splitlines()[0])
    sys.exit(1)
print("compiled runs; equal to eager:", torch.equal(eager, fused))
sys.exit(0)
