"""Faults a fused kernel can have that B's rule must see, simulated on B's own inputs and judged by
B's own functions (:func:`.per_set.per_set_rows`, :func:`.summary.judge`): the power of the rule.

Each :class:`Fault` is the chain computed as a healthy fused kernel computes it (intermediates in
fp32, one rounding to the dtype) with one change: an approximated GELU, flushed subnormals, a wrong
epsilon or variance divisor, a missing upcast, a wrong attention scale, a softmax without its max
subtraction, a few garbled sets. :func:`simulate` draws the sets exactly as S draws them (each from
its own seed, spreads set in the dtype's units where the distribution says so), runs eager, the
fault as the fused path and the fp32 single rounding, and judges the row as one row of B's whole
table (Holm over every test of the table). :mod:`.power_study` prints the table for every fault and the
healthy fused path over several seeds; the tests judge each fault at fewer sets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import torch
import torch.nn.functional as F

from precisionkit import fp64_reference
from precisionkit.stats import round_to_dtype, spacing

from ...workloads import RMS_EPS, WORKLOADS, Workload
from ..toolkit.spec import SIZES
from .fault_kinds import Fault, FaultFn, amplified, fp32, on_output, rounded_once
from .library_faults import LIBRARY_FAULTS, LIBRARY_HEALTHY
from .per_set import SINGLE_ROUNDING, batch_bound, batch_masked_rows, has_element_test, per_set_rows, single_rounding
from .rules import BOOTSTRAP_RESAMPLES, CONFIDENCE, DTYPES_B, JUDGED_PATHS
from .summary import judge

__all__ = ["FAULTS", "Fault", "FaultFn", "caught_by", "draw", "simulate", "single_rounding"]

#: The tests B's whole table adjusts over: every row (chain x distribution x dtype) x judged path x
#: three tests (tail, bias, per element).
TABLE_FAMILY = (
    sum(len(w.distributions) for w in WORKLOADS.values() if w.name != "ffn") * len(DTYPES_B) * len(JUDGED_PATHS) * 3
)


def _gelu_tanh(x, scale, shift, gate):
    return F.gelu(x * scale + shift, approximate="tanh") * gate


def _flush_subnormals(o: torch.Tensor) -> torch.Tensor:
    return torch.where(o.abs() < torch.finfo(o.dtype).tiny, torch.zeros_like(o), o)


def _layernorm_unbiased(x, weight, bias):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + 1e-5) * weight + bias


def _layernorm_eps(x, weight, bias):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps=1e-3)


def _softmax_approx_exp(x):
    """exp with a relative error oscillating within 2^-12 (a sixteenth of a bf16 ULP), the kind a short
    polynomial leaves (a constant factor would cancel in the division)."""
    z = x - x.amax(-1, keepdim=True)
    e = torch.exp(z) * (1.0 + 2.0**-12 * torch.cos(37.0 * z))
    return e / e.sum(-1, keepdim=True)


def _softmax_unsafe(x):
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def _softmax_no_upcast(wl: Workload) -> FaultFn:
    """Softmax's steps each rounded to the dtype (exp, sum, divide), as code that skips the upcast does."""

    def run(args, i):
        (x,) = args
        e = torch.exp((x - x.amax(-1, keepdim=True)).to(x.dtype))
        return (e / e.sum(-1, keepdim=True, dtype=x.dtype)).to(x.dtype)

    return run


def _attention_scale(q, k, v):
    """Scores scaled by 1.01 / sqrt(d): a constant 1% off."""
    scores = (q @ k.transpose(-2, -1)) * (1.01 / math.sqrt(q.shape[-1]))
    return torch.softmax(scores, dim=-1) @ v


#: The sets a rare-input fault garbles: five, in a simulation of 200 sets or of 1000.
GARBLED_SETS = frozenset({3, 41, 97, 130, 188})


def _garbled(wl: Workload) -> FaultFn:
    """The healthy single rounding, with one element of each set in :data:`GARBLED_SETS` moved by 2000
    ULPs of the row's largest value (the other sets are untouched)."""
    healthy = single_rounding(wl.fn)

    def run(args, i):
        out = healthy(*args)
        if i not in GARBLED_SETS:
            return out
        o = out.to(torch.float64)
        step = spacing(o.abs().amax(), out.dtype)
        flat = o.reshape(-1).clone()
        flat[0] += 2000 * step
        return round_to_dtype(flat.reshape(o.shape), out.dtype)

    return run


def _one_set_far(wl: Workload) -> FaultFn:
    """The healthy single rounding, with one element of one set (index 7) moved by 1e5 ULPs of the row's
    largest value."""
    healthy = single_rounding(wl.fn)

    def run(args, i):
        out = healthy(*args)
        if i != 7:
            return out
        o = out.to(torch.float64)
        flat = o.reshape(-1).clone()
        flat[0] += 1e5 * spacing(o.abs().amax(), out.dtype)
        return round_to_dtype(flat.reshape(o.shape), out.dtype)

    return run


#: Share of the sets a partial fault fires on.
PARTIAL_SHARE = 0.4


def _on_some_sets(make: Callable[[Workload], FaultFn]) -> Callable[[Workload], FaultFn]:
    """``make``'s fault on :data:`PARTIAL_SHARE` of the sets (chosen by a fixed hash of the set index),
    the healthy single rounding on the others: a fault that fires only for some shapes or values."""

    def wrapped(wl: Workload) -> FaultFn:
        fault, healthy = make(wl), single_rounding(wl.fn)
        return lambda args, i: fault(args, i) if (i * 2654435761) % 1000 < PARTIAL_SHARE * 1000 else healthy(*args)

    return wrapped


def _round_toward_zero(wl: Workload) -> FaultFn:
    """The chain in fp32, its result rounded toward zero instead of to nearest."""

    def run(args, i):
        y = wl.fn(*fp32(args)).to(torch.float64)
        near = round_to_dtype(y, args[0].dtype)
        toward = torch.nextafter(near, torch.zeros_like(near))  # one step toward zero, in the dtype
        overshot = near.to(torch.float64).abs() > y.abs()
        return torch.where(overshot, toward, near).to(args[0].dtype)

    return run


def _sequential_sum(x: torch.Tensor) -> torch.Tensor:
    """The last dim summed one term at a time in x's dtype (a running sum: the order one thread takes).
    numpy's cumulative sum adds in the array's own dtype, left to right; torch's CPU cumsum accumulates
    fp32 in fp64."""
    running = np.cumsum(x.detach().cpu().numpy(), axis=-1, dtype=np.float32)
    return torch.from_numpy(running[..., -1:].copy()).to(x.device)


def _layernorm_sequential(x, weight, bias):
    n = x.shape[-1]
    mean = _sequential_sum(x) / n
    d = x - mean
    return d * torch.rsqrt(_sequential_sum(d * d) / n + 1e-5) * weight + bias


def _rmsnorm_honouring_cast(wl: Workload) -> FaultFn:
    """RMSNorm in fp32 that keeps the chain's explicit cast: the normalized row rounded to the dtype before
    the weight, as eager rounds it (a fused kernel may do either)."""

    def run(args, i):
        x, weight = args
        h = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + RMS_EPS)
        return (weight.float() * h.to(x.dtype).float()).to(x.dtype)

    return run


def _layernorm_one_pass(x, weight, bias):
    """Layer norm with its variance in one pass, E[x^2] - E[x]^2 in fp32: cancels when the mean is large
    against the spread."""
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var + 1e-5) * weight + bias


def _rmsnorm_sequential(x, weight):
    return weight * x * torch.rsqrt(_sequential_sum(x * x) / x.shape[-1] + 1e-6)


FAULTS: tuple[Fault, ...] = (
    Fault(
        "gelu_tanh",
        "mul_add_gelu_mul",
        "normal",
        "float16",
        "GELU by its tanh approximation",
        "element",
        rounded_once(_gelu_tanh),
    ),
    Fault(
        "gelu_tanh",
        "mul_add_gelu_mul",
        "normal",
        "bfloat16",
        "GELU by its tanh approximation",
        "element",
        rounded_once(_gelu_tanh),
    ),
    Fault(
        "flush_subnormals",
        "softmax",
        "large_logits",
        "float16",
        "fp16 subnormal outputs flushed to zero",
        "element",
        on_output(_flush_subnormals),
    ),
    Fault(
        "flush_subnormals",
        "mul_add_gelu_mul",
        "subnormal_range",
        "float16",
        "fp16 subnormal outputs flushed to zero",
        "element",
        on_output(_flush_subnormals),
    ),
    Fault(
        "zero_below_1e-2",
        "mul_add_gelu_mul",
        "wide_range",
        "float16",
        "outputs below 1e-2 set to zero",
        "element",
        on_output(lambda o: torch.where(o.abs() < 1e-2, torch.zeros_like(o), o)),
    ),
    Fault(
        "unbiased_variance",
        "layernorm",
        "normal",
        "bfloat16",
        "layer norm divides the variance by n - 1",
        "element",
        rounded_once(_layernorm_unbiased),
    ),
    Fault(
        "unbiased_variance",
        "layernorm_long",
        "normal",
        "bfloat16",
        "layer norm divides the variance by n - 1 (16,384 wide: a 3e-5 relative change)",
        "element",
        rounded_once(_layernorm_unbiased),
        harmless="n / (n - 1) moves each output by 3.05e-5 of its size; the fp32 computation's own bound over "
        "16,384 terms is 2.3e-5 of the size plus 3.7e-5 of the row's spread (lambda 6), so for |y| < 4.9 spreads "
        "(every element of normal data) the change is within what a legitimate reduction order may do",
    ),
    Fault(
        "eps_1e-3",
        "layernorm",
        "normal",
        "bfloat16",
        "layer norm with epsilon 1e-3 instead of 1e-5",
        "element",
        rounded_once(_layernorm_eps),
    ),
    Fault(
        "error_times_6",
        "layernorm",
        "normal",
        "float16",
        "fused's own error against fp64 six times larger",
        "element",
        amplified(6.0),
    ),
    Fault(
        "approx_exp",
        "softmax",
        "normal",
        "bfloat16",
        "exp with a relative error within 2^-12",
        "element",
        rounded_once(_softmax_approx_exp),
    ),
    Fault(
        "approx_exp",
        "softmax",
        "normal",
        "float16",
        "exp with a relative error within 2^-12",
        "element",
        rounded_once(_softmax_approx_exp),
    ),
    Fault(
        "no_upcast",
        "softmax",
        "normal",
        "float16",
        "softmax's exp, sum and divide each rounded to fp16",
        "element",
        _softmax_no_upcast,
    ),
    Fault(
        "attention_scale",
        "attention",
        "normal",
        "float16",
        "attention scores scaled by 1.01 / sqrt(d)",
        "tail",
        rounded_once(_attention_scale),
    ),
    Fault(
        "unsafe_softmax",
        "softmax",
        "large_offset",
        "float16",
        "softmax without its max subtraction",
        "nonfinite",
        rounded_once(_softmax_unsafe),
    ),
    Fault(
        "rare_sets",
        "layernorm",
        "normal",
        "float16",
        "five sets in 1000 garbled by 2000 ULPs at the row's scale",
        "gross",
        _garbled,
    ),
    Fault(
        "one_set_far",
        "layernorm",
        "normal",
        "bfloat16",
        "one set in 1000 with one element off by 1e5 ULPs at the row's scale",
        "gross",
        _one_set_far,
    ),
    Fault(
        "gelu_tanh_some_sets",
        "mul_add_gelu_mul",
        "normal",
        "bfloat16",
        "GELU by its tanh approximation on 40% of the sets",
        "element",
        _on_some_sets(rounded_once(_gelu_tanh)),
    ),
    Fault(
        "toward_zero_some_sets",
        "layernorm",
        "normal",
        "float16",
        "the final rounding toward zero instead of to nearest, on 40% of the sets",
        "element",
        _on_some_sets(_round_toward_zero),
    ),
    Fault(
        "eps_1e-3_some_sets",
        "layernorm",
        "normal",
        "bfloat16",
        "layer norm with epsilon 1e-3 on 40% of the sets",
        "element",
        _on_some_sets(rounded_once(_layernorm_eps)),
    ),
    *LIBRARY_FAULTS,
)

#: The row of the review that judged nothing: layernorm_long on near-cancelling inputs in fp16, where no element is
#: decisive (the fp32 bound over 16,384 near-cancelling terms is wider than half an fp16 ULP everywhere).
NO_DECISIVE_ROW = ("layernorm_long", "near_cancellation", "float16")

#: Faults planted on :data:`NO_DECISIVE_ROW` that passed there as "supported" before a row without a decisive
#: element became inconclusive. Each must now be contradicted or leave the row inconclusive; never supported.
NO_DECISIVE_FAULTS: tuple[Fault, ...] = tuple(
    Fault(name, *NO_DECISIVE_ROW, description, "element", make)
    for name, description, make in (
        ("eps_1e-3", "layer norm with epsilon 1e-3 instead of 1e-5", rounded_once(_layernorm_eps)),
        ("one_pass_variance", "variance as E[x^2] - E[x]^2 in fp32", rounded_once(_layernorm_one_pass)),
        ("toward_zero", "the final rounding toward zero instead of to nearest", _round_toward_zero),
        ("error_times_3", "fused's own error against fp64 three times larger", amplified(3.0)),
        ("error_times_6", "fused's own error against fp64 six times larger", amplified(6.0)),
    )
)

#: Legitimate fp32 computations B's rule must not contradict: sums taken one term at a time, the order of
#: a single thread (the one-thread Inductor path and a single-core container reduce this way).
HEALTHY_VARIANTS: tuple[Fault, ...] = (
    Fault(
        "sequential_layernorm",
        "layernorm_long",
        "near_cancellation",
        "float16",
        "layer norm with mean and variance summed sequentially in fp32 over 16,384 near-cancelling values",
        "healthy",
        rounded_once(_layernorm_sequential),
    ),
    Fault(
        "sequential_rmsnorm",
        "rmsnorm_long",
        "normal",
        "bfloat16",
        "RMSNorm with the mean square summed sequentially in fp32 over 16,384 values",
        "healthy",
        rounded_once(_rmsnorm_sequential),
    ),
    Fault(
        "rmsnorm_cast_honoured",
        "rmsnorm_long",
        "normal",
        "bfloat16",
        "RMSNorm in fp32 that rounds the normalized row to bf16 before the weight, as the chain's cast says",
        "healthy",
        _rmsnorm_honouring_cast,
    ),
    *LIBRARY_HEALTHY,
)


#: Chains whose fused code leaves a matmul or attention to a library call on the CPU (the fusion
#: evidence of a default run shows it): B judges them per element by their absolute bound
#: (:mod:`.library_bounds`), not by the rounding test, and the simulation does the same.
LIBRARY_CHAINS = frozenset({"matmul_add_layernorm", "attention", "attention_masked"})


def draw(wl: Workload, distribution: str, dtype: str, sets: int, seed: int) -> list[tuple[torch.Tensor, ...]]:
    """``sets`` input sets of ``wl`` at the default profile's shapes, each from its own seed, in ``dtype``."""
    target = getattr(torch, dtype)
    out = []
    for i in range(sets):
        drawn = wl.sample(SIZES["default"], distribution, 1, seed * 1_000_003 + i, dtype)
        out.append(tuple(drawn[a][0].to(target) for a in wl.arg_names))
    return out


def simulate(
    chain: str,
    distribution: str,
    dtype: str,
    fused_fn: Callable[[tuple[torch.Tensor, ...], int], torch.Tensor],
    *,
    sets: int,
    seed: int = 0,
    family: int | None = TABLE_FAMILY,
    resamples: int = BOOTSTRAP_RESAMPLES,
    whole_chain: bool | None = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Eager, ``fused_fn`` as the fused path and, where the chain has a per-element bound, the fp32 single
    rounding as its check, on ``sets`` drawn sets, judged by B's rule as one row of a table of ``family``
    tests: the per-set rows and the fused row. ``whole_chain``: fused code computes every op (the rounding
    test), by default unless the chain is in :data:`LIBRARY_CHAINS` (the absolute bound)."""
    wl = WORKLOADS[chain]
    inputs = draw(wl, distribution, dtype, sets, seed)
    ref = torch.stack([fp64_reference(wl.fn, args) for args in inputs])
    outputs = {
        "eager": torch.stack([wl.fn(*args) for args in inputs]),
        "fused": torch.stack([fused_fn(args, i) for i, args in enumerate(inputs)]),
    }
    bound, absolute = None, False
    whole = chain not in LIBRARY_CHAINS if whole_chain is None else whole_chain
    if has_element_test(chain, whole):
        predict = single_rounding(wl.fn)
        outputs[SINGLE_ROUNDING] = torch.stack([predict(*args) for args in inputs])
        bound, absolute = batch_bound(chain, inputs, whole_chain=whole)
    masked = batch_masked_rows(chain, inputs)
    rows, _ = per_set_rows(chain, distribution, dtype, 0, outputs, ref, bound, absolute=absolute, masked=masked)
    per_set = pl.DataFrame(rows, infer_schema_length=None)
    verdicts = judge(per_set, paths=("fused",), family=family, resamples=resamples)
    return per_set, verdicts.row(0, named=True)


def caught_by(row: dict[str, Any]) -> list[str]:
    """The parts of B's rule that contradict a judged row."""
    parts = []
    if row["nonfinite_sets"]:
        parts.append("nonfinite")
    if row["gross_contradicts"]:
        parts.append("gross")
    if row["p_holm"] is not None and row["p_holm"] <= 1.0 - CONFIDENCE:
        parts.append("tail")
    if row["bias_contradicts"]:
        parts.append("bias")
    if row["element_contradicts"]:
        parts.append("element")
    if row["masked_contradicts"]:
        parts.append("masked")
    return parts
