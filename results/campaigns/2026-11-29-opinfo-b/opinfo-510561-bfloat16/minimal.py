"""softshrink of NaN: eager NaN, Inductor 0.0 (in float32 and bfloat16). Exits 1 while it reproduces."""
import sys
import torch
import torch.nn.functional as F

x = torch.tensor([float("nan"), 1.0, -2.0])
eager, fused = F.softshrink(x), torch.compile(F.softshrink)(x)
print("eager", eager.tolist(), "\nfused", fused.tolist())
sys.exit(int(bool(eager[0].isnan()) and not bool(fused[0].isnan())))
