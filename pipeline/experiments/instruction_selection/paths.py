"""C1's two paths (tensor x Python scalar, tensor x broadcast fp16 tensor), the controls that
separate the route from the value, and the seeded fp16 input they run on.
"""

from collections.abc import Callable

import torch

SCALAR = 0.7


def path_a(x: torch.Tensor) -> torch.Tensor:
    """Tensor x Python scalar: the framework picks its scalar route (``muls`` on an NPU)."""
    return x * SCALAR


def path_b(x: torch.Tensor) -> torch.Tensor:
    """Tensor x broadcast tensor: 0.7 becomes an fp16 tensor first, then a full-size view."""
    return x * torch.tensor(SCALAR, dtype=x.dtype, device=x.device).expand_as(x)


#: 0.7 stored in each float dtype, computed once on the host (a Python float, device-independent;
#: a constant for torch.compile, where a tensor's .item() would break the graph).
_ROUNDED = {
    dt: float(torch.tensor(SCALAR, dtype=dt, device="cpu"))
    for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
}


def rounded_scalar(dtype: torch.dtype) -> float:
    """The value the scalar takes once stored in ``dtype`` (0.7 -> 0.7001953125 in fp16)."""
    return _ROUNDED[dtype]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype path A's multiply runs in: fp32 opmath for fp16/bf16 (eager CPU and CUDA kernels
    and Inductor's generated code upcast), the dtype itself otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def path_a_multiplier(dtype: torch.dtype) -> float:
    """The value path A multiplies by: 0.7 rounded to the compute dtype (fp32: 0.699999988079071)."""
    return rounded_scalar(compute_dtype(dtype))


def control_route_only(x: torch.Tensor) -> torch.Tensor:
    """Path B's route (a broadcast tensor operand) with path A's value (0.7 in the compute dtype)."""
    scalar = torch.tensor(SCALAR, dtype=compute_dtype(x.dtype), device=x.device)
    return (x * scalar.expand_as(x)).to(x.dtype)


def control_value_only(x: torch.Tensor) -> torch.Tensor:
    """Path A's route (a Python scalar) with path B's value (0.7 rounded to the input dtype)."""
    return x * rounded_scalar(x.dtype)


def control_0dim_tensor(x: torch.Tensor) -> torch.Tensor:
    """Path B's rounded fp16 value without the broadcast (a 0-dim tensor takes the scalar route)."""
    return x * torch.tensor(SCALAR, dtype=x.dtype, device=x.device)


def control_fp32_opmath(x: torch.Tensor) -> torch.Tensor:
    """Path A spelled out: upcast to fp32, multiply by fp32(0.7), round once to the input dtype."""
    return (x.float() * torch.tensor(SCALAR, dtype=torch.float32, device=x.device)).to(x.dtype)


PATHS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"A": path_a, "B": path_b}
#: The two controls of the route/value decomposition; they run eager and fused like the paths.
ROUTE_CONTROLS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "control_route_only": control_route_only,
    "control_value_only": control_value_only,
}
#: Further eager controls of the mechanism.
CONTROLS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "control_0dim_tensor": control_0dim_tensor,
    "control_fp32_opmath": control_fp32_opmath,
}
#: Which path each control is meant to reproduce if the route does not matter.
CONTROL_TARGET = {
    "control_route_only": "A",
    "control_value_only": "B",
    "control_0dim_tensor": "B",
    "control_fp32_opmath": "A",
}
#: (route, value) of each path and control, for the route records.
ROUTE_AND_VALUE = {
    "A": ("Python scalar", "0.7 in the compute dtype"),
    "B": ("broadcast tensor", "0.7 rounded to the input dtype"),
    "control_route_only": ("broadcast tensor", "0.7 in the compute dtype"),
    "control_value_only": ("Python scalar", "0.7 rounded to the input dtype"),
}


def selection_input(shape: tuple[int, ...], seed: int, device: torch.device) -> torch.Tensor:
    """fp16 U(-1, 1): drawn in fp64 on the CPU (device-independent), then rounded once."""
    if len(shape) == 0 or any(s <= 0 for s in shape):
        raise ValueError(f"C1 input shape must have positive sizes, got {shape}")
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
    return x.to(torch.float16).to(device)
