"""torch.remainder of float64 values whose quotient passes 2**53: eager (like Python's % and NumPy)
returns the exact remainder, which lies between 0 and the divisor; the compiled function (Inductor)
returns 0.0 or a value far outside that range (1e20 % 0.3 gives -16384.0). Eight elements, so that the
compiled kernel takes its vector loop: with three, all in its scalar tail, it returns eager's values.
Exits 1 while they differ."""
import sys
import torch

a = torch.tensor([1e20, 1.7895e129, 8.9153e108, 2.0**60 + 1e3], dtype=torch.float64).repeat(2)
b = torch.tensor([0.3, 1.5152, -0.6759, 0.7], dtype=torch.float64).repeat(2)


def f(a, b):
    return torch.remainder(a, b)


eager = f(a, b)
fused = torch.compile(f)(a, b)
python = torch.tensor([x % y for x, y in zip(a.tolist(), b.tolist())], dtype=torch.float64)
print("eager   ", eager.tolist())
print("python  ", python.tolist())
print("compiled", fused.tolist())
sys.exit(1 if not torch.equal(eager, fused) else 0)
