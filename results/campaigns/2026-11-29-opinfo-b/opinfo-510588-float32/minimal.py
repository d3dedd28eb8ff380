"""multilabel_margin_loss of a 1-D or 0-d input whose target list ends at a -1: eager 0.8 (one target,
four others, margins of 1, divided by 5) and 0.0 for an empty list; Inductor 4.0 and 1.0.
Exits 1 while it reproduces."""
import sys
import torch
import torch.nn.functional as F

x = torch.tensor([1e-37, -2e-37, 3e-37, 0.5e-37, 1e-37])
t = torch.tensor([2, -1, 4, 1, 3])
f = lambda x: F.multilabel_margin_loss(x, t)  # noqa: E731
e1, f1 = f(x).item(), torch.compile(f)(x).item()
torch._dynamo.reset()
g = lambda x: F.multilabel_margin_loss(x, torch.tensor(-1))  # noqa: E731 - opinfo-510512-bool's form
e2, f2 = g(torch.tensor(0.7)).item(), torch.compile(g)(torch.tensor(0.7)).item()
print("1-D: eager", e1, "fused", f1, "\n0-d, target -1: eager", e2, "fused", f2)
sys.exit(int(abs(e1 - f1) > 1e-6 or abs(e2 - f2) > 1e-6))
