"""Why 580334's compile error is a false alarm: linalg.cond of a matrix holding +inf.

Eager's linalg.cond (2-norm) calls svdvals, which asks LAPACK for singular values only
(compute_uv=False when the input does not require grad) and gets NaN without an error. Traced by
torch.compile, ``_may_require_fw_or_bw_grad`` is true for the fake tensor, so the graph calls
``aten._linalg_svd`` with compute_uv=True; gesdd then reports non-convergence and torch raises
_LinAlgError. Eager raises the same error on the same matrix as soon as it requires grad. The SVD
of a non-finite matrix has no defined result. Exits 1 while the difference reproduces."""
import sys

import torch

inf = float("inf")
m = torch.tensor([[0.09, 0.08, 0.10, 0.13, 0.0], [inf, 0, 0, 0.02, inf], [0, inf, 0.17, 0.24, 0.016],
                  [0.1, inf, inf, inf, 0], [inf, 0, inf, inf, inf]])


def outcome(fn, x):
    try:
        return f"value {fn(x).tolist()}"
    except Exception as exc:  # noqa: BLE001
        return f"raises {type(exc).__name__}"


with torch.no_grad():
    eager = outcome(torch.linalg.cond, m)
    compiled = outcome(torch.compile(torch.linalg.cond, backend="aot_eager"), m)
    inductor = outcome(torch.compile(torch.linalg.cond), m)
grad = outcome(lambda x: torch.linalg.cond(x.clone().requires_grad_()), m)
print("eager (no grad):", eager)
print("eager, input requires grad:", grad)
print("aot_eager:", compiled)
print("inductor:", inductor)
sys.exit(int(eager.startswith("value") and inductor.startswith("raises")))
