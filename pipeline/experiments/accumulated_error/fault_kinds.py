"""The parts every simulated fault of B is built from (:mod:`.faults`, :mod:`.library_faults`): the
:class:`Fault` record, and fused paths made from the chain's healthy fp32 computation with one change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from precisionkit import fp64_reference
from precisionkit.stats import round_to_dtype

from ...workloads import Workload
from .per_set import single_rounding

#: A fused output for one set: ``(args, set index) -> output`` in the args' dtype.
FaultFn = Callable[[tuple[torch.Tensor, ...], int], torch.Tensor]


@dataclass(frozen=True)
class Fault:
    name: str
    chain: str
    distribution: str
    dtype: str
    description: str
    #: The part of B's rule built to catch it: "tail", "bias", "element", "gross", "masked" or "nonfinite";
    #: "healthy" for a legitimate computation the rule must not contradict.
    designed: str
    make: Callable[[Workload], FaultFn]
    #: Why the fault is numerically harmless at B's sizes, with the numbers ("" when it must be caught):
    #: its effect lies within the chain's fp32 error bound (a library chain's absolute bound), so no rule
    #: that admits every legitimate reduction order and library boundary can tell it from one.
    harmless: str = ""


def fp32(args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(a.to(torch.float32) for a in args)


def rounded_once(fn: Callable[..., torch.Tensor]) -> Callable[[Workload], FaultFn]:
    """A fault computed in fp32 by ``fn`` and rounded once to the inputs' dtype."""
    return lambda wl: lambda args, i: fn(*fp32(args)).to(args[0].dtype)


def on_output(change: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Workload], FaultFn]:
    """The chain's healthy single rounding with ``change`` applied to its rounded output."""

    def make(wl: Workload) -> FaultFn:
        healthy = single_rounding(wl.fn)
        return lambda args, i: change(healthy(*args)).to(args[0].dtype)

    return make


def amplified(factor: float) -> Callable[[Workload], FaultFn]:
    """The healthy fp32 result's own error against fp64 made ``factor`` times larger."""

    def make(wl: Workload) -> FaultFn:
        def run(args, i):
            ref = fp64_reference(wl.fn, args)
            healthy = single_rounding(wl.fn)(*args).to(torch.float64)
            return round_to_dtype(ref + factor * (healthy - ref), args[0].dtype)

        return run

    return make
