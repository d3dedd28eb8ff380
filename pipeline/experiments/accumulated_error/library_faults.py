"""Faults of the library chains (a matmul or attention left to a library kernel) that B's absolute bound
(:mod:`.library_bounds`) must see, and the legitimate library computations it must not contradict.

Each fault is the chain's healthy fp32 computation rounded once, with one change: an exp with a small
oscillating relative error, the rounded result's error against fp64 made three times larger, a final
rounding drawn at random instead of to nearest, one row in a hundred moved by two ULPs of its largest
value, zeros returned for the rows a mask masks entirely. The healthy variants take every 16-bit boundary
a library may legitimately have: scores and probabilities rounded to the dtype between two library
matmuls (the route Inductor's CPU ``bmm`` externs take), the unnormalized weights rounded to the dtype
before a flash kernel's second matmul, a matmul's output rounded before the layer norm.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from precisionkit.stats import round_to_dtype, spacing

from ...workloads import Workload
from .fault_kinds import Fault, FaultFn, amplified, fp32, rounded_once
from .library_bounds import fully_masked_rows
from .per_set import single_rounding

#: Amplitudes of the approximate exp's relative error.
EXP_ERRORS = {"2^-12": 2.0**-12, "2^-10": 2.0**-10, "2^-9": 2.0**-9}
#: Share of the output rows the row fault moves, and by how many ULPs of the row's largest value.
ROW_SHARE = 0.01
ROW_SHIFT_ULPS = 2.0


def _softmax(t: torch.Tensor, delta: float = 0.0) -> torch.Tensor:
    """Softmax whose exp has a relative error oscillating within ``delta`` (a constant factor would cancel)."""
    z = t - t.amax(-1, keepdim=True)
    e = torch.exp(z) * (1.0 + delta * torch.cos(37.0 * z))
    return e / e.sum(-1, keepdim=True)


def _heads_first(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.permute(0, 2, 1, 3) for t in ts)


def _approx_exp(chain: str, delta: float) -> Callable[[Workload], FaultFn]:
    def attention(q, k, v):
        return _softmax((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]), delta) @ v

    def attention_masked(query, key, value, attn_mask):
        q, k, v = _heads_first(query, key, value)
        return _softmax((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]) + attn_mask, delta) @ v

    return rounded_once(attention if chain == "attention" else attention_masked)


def _stochastic_rounding(wl: Workload) -> FaultFn:
    """The chain in fp32, rounded to the dtype up or down at random with the chance of each side in
    proportion to its nearness (unbiased, but up to one ULP off where round-to-nearest is half a ULP)."""

    def run(args, i):
        dtype = args[0].dtype
        y = wl.fn(*fp32(args)).to(torch.float64)
        near = round_to_dtype(y, dtype)
        gap = y - near.to(torch.float64)
        other = torch.nextafter(near, torch.where(gap > 0, torch.inf, -torch.inf).to(dtype))
        width = (other.to(torch.float64) - near.to(torch.float64)).abs()
        draw = torch.rand(y.shape, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
        return torch.where(draw * width < gap.abs(), other, near)

    return run


def _rows_off(wl: Workload) -> FaultFn:
    """The healthy single rounding with :data:`ROW_SHARE` of the output rows (drawn per set) moved by
    :data:`ROW_SHIFT_ULPS` ULPs of each row's largest value."""
    healthy = single_rounding(wl.fn)

    def run(args, i):
        out = healthy(*args)
        rows = out.to(torch.float64).reshape(-1, out.shape[-1])
        hit = torch.rand(rows.shape[0], generator=torch.Generator().manual_seed(i)) < ROW_SHARE
        step = ROW_SHIFT_ULPS * spacing(rows.abs().amax(-1, keepdim=True), out.dtype)
        return round_to_dtype(rows + torch.where(hit[:, None], step, 0.0), out.dtype).reshape(out.shape)

    return run


def _zeros_when_fully_masked(wl: Workload) -> FaultFn:
    """The healthy single rounding with zeros on every row whose mask masks every key (what a kernel that
    skips such rows returns)."""
    healthy = single_rounding(wl.fn)

    def run(args, i):
        out = healthy(*args)
        rows = fully_masked_rows(wl.name, args)
        if rows is None:
            raise ValueError(f"{wl.name} has no mask: no row is fully masked")
        flat = out.reshape(rows.numel(), -1)
        return torch.where(rows[:, None], torch.zeros_like(flat), flat).reshape(out.shape)

    return run


def _library_matmul_add_layernorm(wl: Workload) -> FaultFn:
    """The library matmul (fp32 accumulation, bias in its epilogue) rounded to the dtype, then the layer
    norm in fp32 rounded once: Inductor's CPU ``addmm`` route."""

    def run(args, i):
        x, w, b = fp32(args)
        y = (x @ w + b).to(args[0].dtype).to(torch.float32)
        return F.layer_norm(y, y.shape[-1:]).to(args[0].dtype)

    return run


def _library_attention(flash: bool) -> Callable[[Workload], FaultFn]:
    """Attention at a library's 16-bit boundaries: ``flash``: scores, mask and softmax in fp32 with the
    unnormalized weights rounded to the dtype before the second matmul and the division by their fp32 sum
    after it; otherwise the scores and the probabilities each rounded to the dtype between two library
    matmuls."""

    def make(wl: Workload) -> FaultFn:
        def run(args, i):
            dtype = args[0].dtype
            q, k, v, *mask = fp32(args)
            if wl.name == "attention_masked":
                q, k, v = _heads_first(q, k, v)
            s = q @ k.transpose(-2, -1)
            if not flash:
                s = s.to(dtype).float()
            t = s / math.sqrt(q.shape[-1]) + (mask[0] if mask else 0.0)
            e = torch.exp(t - t.amax(-1, keepdim=True))
            if flash:
                return ((e.to(dtype).float() @ v) / e.sum(-1, keepdim=True)).to(dtype)
            return ((e / e.sum(-1, keepdim=True)).to(dtype).float() @ v).to(dtype)

        return run

    return make


def _fault(name: str, chain: str, dist: str, dtype: str, what: str, designed: str, make, harmless: str = "") -> Fault:
    return Fault(name, chain, dist, dtype, what, designed, make, harmless)


#: Why the faults the absolute bound cannot see are numerically harmless at B's sizes. The figures of
#: "most of the bound used" are the largest |fused - fp64| / bound over every element of two runs of
#: :func:`.faults.simulate` (50 sets, seed 0; 30 sets, seeds 0 to 2); :mod:`.power_study` prints them
#: at any size, beside the healthy compiled path's.
_SMALL_EXP = (
    "the exp's relative error (2^-12 = u16 / 2 of fp16; 2^-10 = 2 u16) moves each weight by less than the library may "
    "legitimately: the scores rounded to fp16 (u16 |s| / sqrt(d), 1 to 3 u16 on these rows) and the probabilities "
    "rounded to fp16 before the second matmul (u16). The bound is a median 20 half-ULPs of each output wide; the "
    "fault used at most 0.31 (2^-12) and 0.63 (2^-10) of it, the healthy compiled path 0.44 and a legitimate bmm "
    "route 0.59. At 2^-9 (4 u16) it leaves the bound (up to 1.37 of it) and is contradicted"
)
_TIMES_3 = (
    "the rounded result's error is at most half a ULP, so three times it is at most 3 half-ULPs of the element; the "
    "bound is a median 6.5 (matmul_add_layernorm: the library's bf16 rounding of x @ w + b, carried through the "
    "layer norm's 1 / sigma), 21 (attention: scores and probabilities rounded to the dtype) and 130 (peaked masked "
    "attention: the scores' rounding at |s| near 90) half-ULPs wide, and the fault used at most 0.85, 0.81 and 0.13 "
    "of it; a legitimate library route used 0.54 (addmm) to 0.59 (bmm)"
)
_STOCHASTIC = (
    "a stochastic final rounding is at most one ULP (2 half-ULPs) from the fp32 value, and the bound is a median "
    "6.7 (matmul_add_layernorm), 130 (peaked attention) and 20 (masked attention) half-ULPs wide because a "
    "library's 16-bit output and probabilities are legitimate; the fault used at most 0.53, 0.05 and 0.50 of it"
)


LIBRARY_FAULTS: tuple[Fault, ...] = (
    *(
        _fault(
            f"approx_exp_{label}",
            chain,
            dist,
            "float16",
            f"softmax's exp with a relative error within {label}",
            "element",
            _approx_exp(chain, delta),
            "" if delta >= 2.0**-9 else _SMALL_EXP,
        )
        for label, delta in EXP_ERRORS.items()
        for chain, dist in (("attention", "normal"), ("attention_masked", "normal"))
    ),
    *(
        _fault(
            "error_times_3",
            chain,
            dist,
            dtype,
            "the rounded result's error against fp64 three times larger",
            "element",
            amplified(3.0),
            _TIMES_3,
        )
        for chain, dist, dtype in (
            ("matmul_add_layernorm", "normal", "bfloat16"),
            ("attention", "normal", "float16"),
            ("attention_masked", "peaked", "bfloat16"),
        )
    ),
    *(
        _fault(
            "stochastic_rounding",
            chain,
            dist,
            dtype,
            "the final rounding stochastic instead of to nearest",
            "element",
            _stochastic_rounding,
            _STOCHASTIC,
        )
        for chain, dist, dtype in (
            ("matmul_add_layernorm", "normal", "float16"),
            ("attention", "peaked", "bfloat16"),
            ("attention_masked", "normal", "float16"),
        )
    ),
    *(
        _fault(
            "rows_off_2_sulp",
            chain,
            dist,
            dtype,
            "1% of the output rows moved by 2 ULPs of the row's largest value",
            "element",
            _rows_off,
        )
        for chain, dist, dtype in (
            ("matmul_add_layernorm", "normal", "bfloat16"),
            ("attention", "normal", "bfloat16"),
            ("attention_masked", "peaked", "float16"),
        )
    ),
    *(
        _fault(
            "zeros_fully_masked",
            "attention_masked",
            "fully_masked",
            dtype,
            "zeros on every fully masked row",
            "masked",
            _zeros_when_fully_masked,
        )
        for dtype in ("bfloat16", "float16")
    ),
)

LIBRARY_HEALTHY: tuple[Fault, ...] = (
    _fault(
        "library_addmm",
        "matmul_add_layernorm",
        "wide_range",
        "bfloat16",
        "the matmul rounded to bf16 by the library, then the layer norm in fp32",
        "healthy",
        _library_matmul_add_layernorm,
    ),
    _fault(
        "library_bmm",
        "attention",
        "peaked",
        "bfloat16",
        "scores and probabilities rounded to bf16 between two library matmuls",
        "healthy",
        _library_attention(False),
    ),
    _fault(
        "library_bmm",
        "attention_masked",
        "peaked",
        "float16",
        "scores and probabilities rounded to fp16 between two library matmuls",
        "healthy",
        _library_attention(False),
    ),
    _fault(
        "library_flash",
        "attention_masked",
        "fully_masked",
        "bfloat16",
        "a flash kernel's weights rounded to bf16 before its second matmul",
        "healthy",
        _library_attention(True),
    ),
)
