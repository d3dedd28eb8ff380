"""Eager's own: torch.masked.normalize of an all-zero float16 row is NaN, where bfloat16, float32 and
float64 give 0 (and Inductor gives 0 in float16 too). Exits 1 while eager's float16 differs."""
import sys
import torch

z = torch.zeros(2, 5, dtype=torch.float16)
eager16 = torch.masked.normalize(z, 2.0, -1)
eager32 = torch.masked.normalize(z.float(), 2.0, -1)
fused16 = torch.compile(lambda z: torch.masked.normalize(z, 2.0, -1))(z)
print("eager float16", eager16[0].tolist(), "\neager float32", eager32[0].tolist(), "\nfused float16", fused16[0].tolist())
sys.exit(int(bool(eager16.isnan().any()) and not bool(eager32.isnan().any())))
