"""multilabel_margin_loss of a 1-D input with reduction='none': eager returns a 0-d tensor, the compiled
function (Inductor) a tensor of shape (1,). Exits 1 while the shapes differ."""
import sys
import torch
import torch.nn.functional as F

x = torch.tensor([0.5, 1.0, 2.0, 3.0, 1.0, 1.0, 2.0])
target = torch.tensor([2, 0, 6, -1, 4, -1, 6])


def f(x):
    return F.multilabel_margin_loss(x, target, reduction="none")


eager = f(x)
fused = torch.compile(f)(x)
print("eager", tuple(eager.shape), "compiled", tuple(fused.shape))
sys.exit(1 if eager.shape != fused.shape else 0)
