"""as_strided over a partial view of an intermediate, reaching past the view into its base's storage
(eager reads the base's elements 10..13): Inductor returns values that are not in the base (bits of
unrelated memory). Exits 1 while it reproduces."""
import sys
import torch


def g(a, b):
    v0 = a + b  # a fresh contiguous 5x5 tensor: its storage holds 25 elements
    return torch.as_strided(v0[:2], (2, 2), (1, 2), storage_offset=10) * 2


torch.manual_seed(0)
a, b = torch.randn(5, 5), torch.randn(5, 5)
eager, fused = g(a, b), torch.compile(g)(a, b)
print("eager", eager.flatten().tolist(), "\nfused", fused.flatten().tolist())
sys.exit(int(not torch.equal(eager, fused)))
