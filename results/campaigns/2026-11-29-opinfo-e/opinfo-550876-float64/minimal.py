"""elu of small negative values: eager computes expm1(x) (-4.416018243132148e-11 for x = -4.416018243229654e-11,
the exact value), the compiled function (Inductor) a value as exp(x) - 1 gives (-4.4160231027490227e-11, 1.1e-6
relative error in float64; in float32 it returns 0.0 for x = -1e-12). Exits 1 while they differ."""
import sys
import torch
import torch.nn.functional as F

x = torch.tensor([-4.416018243229654e-11, -1e-12, -3e-9, -1e-5] * 4, dtype=torch.float64)
eager = F.elu(x)
fused = torch.compile(F.elu)(x)
print("eager   ", eager[:4].tolist())
print("compiled", fused[:4].tolist())
rel = ((fused - eager).abs() / eager.abs()).max().item()
print("largest relative difference", rel)
sys.exit(1 if rel > 1e-12 else 0)
