"""Planted bugs: deliberately faulty ``torch.compile`` backends for mutation testing of the harness.

Each backend wraps Inductor and injects one realistic *silent* numerical fault, so the fused path
still compiles and still shows generated kernels (fusion evidence stays plausible) while its
numbers are wrong. Running the experiments with ``settings.backend = <bug name>`` must turn at
least one check to ERROR (a contradicted claim or an invalid run); :mod:`pipeline.instruments.regression.harness`
measures that (the ``planted_bug_matrix`` asset).

Faults come in three kinds:

* output faults: Inductor compiles the graph unchanged and the wrapper damages what the compiled
  code returns (dropped channel, layout swap, one-ULP rounding change, per-call perturbation,
  stale lanes in the tail of a vectorized row);
* graph faults: the Dynamo graph is traced to ATen (softmax / layer norm decomposed into their
  reductions), an FX pass rewrites the reductions, and Inductor compiles the rewritten graph
  (wrong reduction axis, fp16 accumulation, a bf16 split-K workspace switched on only for long
  rows, reduction results parked in a bf16 scratch buffer);
* input faults: the compiled code is handed damaged inputs, as a kernel with a wrong indexing
  scheme would read them (non-contiguous inputs indexed with contiguous strides).

Some faults fire only where real kernels go wrong: long reductions (C2's 4096-element rows, not
B's 32-wide ones), strided inputs (D's transposed views), row lengths that are not a multiple of
the vector width (D's odd shapes such as (1, 7, 24)). The unit tests show each fires where it
should and leaves the other inputs alone.

``planted_fallback_to_eager`` is the exception: it never calls Inductor, so precisionkit's
``FusedFunction`` raises ``FusionError`` (no generated code) instead of returning numbers.

This module is the catalogue (:data:`PLANTED_BUGS`) and its registration with ``torch.compile``;
the faults themselves are :mod:`.planted_faults` (output and input faults) and
:mod:`.planted_graph_faults` (FX passes). Nothing registers the backends at import: whatever runs
with a planted backend calls :func:`register_planted_backends` (idempotent) first, in the process
that compiles (the matrix harness and its workers do).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .planted_faults import (
    VECTOR_WIDTH,
    contiguous_only_backend,
    drop_channel_backend,
    fallback_to_eager_backend,
    layout_swap_backend,
    nondeterministic_reduction_backend,
    off_by_one_ulp_backend,
    vector_tail_backend,
)
from .planted_graph_faults import (
    LONG_REDUCTION_THRESHOLD,
    SPLIT_CHUNK,
    THREAD_PARTIALS,
    THREAD_SPLIT_THRESHOLD,
    bf16_scratch_backend,
    dropped_mask_backend,
    fp16_accumulation_backend,
    long_reduction_backend,
    thread_split_backend,
    wrong_axis_backend,
)


@dataclass(frozen=True)
class PlantedBug:
    """One faulty backend: its registered name, what it does wrong and which fault class it models."""

    name: str
    fault_class: str
    description: str
    compiler: Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]
    #: What catches the fault where no experiment's claim is built for it: a prefix of the invalid-run
    #: reason any experiment's run gives (no generated code at all). Every other bug is declared by the
    #: experiment whose claim is built to catch it (``Experiment.planted``: the bug's name to that claim's
    #: ``asset:check`` prefix), read by :func:`.matrix_runs.designed`.
    caught_by_any_run: str = ""

    @property
    def rewrites_graph(self) -> bool:
        """Whether the bug rewrites the graph before Inductor compiles it (an FX pass of
        :mod:`.planted_graph_faults`): its runs compile graphs of their own, where an output or input fault
        compiles the healthy graphs and finds them in a warm Inductor cache."""
        return self.compiler.__module__.endswith(".planted_graph_faults")


# --- the catalogue and its registration ------------------------------------------------------

PLANTED_BUGS: dict[str, PlantedBug] = {
    bug.name: bug
    for bug in (
        PlantedBug(
            "planted_drop_channel",
            "fused kernel drops a channel",
            "last element of the last dim of every floating graph output set to 0",
            drop_channel_backend,
        ),
        PlantedBug(
            "planted_wrong_axis",
            "reduction over the wrong axis",
            "FX pass: sum/amax/mean/var_mean over the last dim of [..., A, B] read the input column-major "
            "(softmax and layer norm included, via their ATen decomposition)",
            wrong_axis_backend,
        ),
        PlantedBug(
            "planted_layout_swap",
            "NCHW/NHWC-style layout swap",
            "outputs of rank >= 2: the last two dims' data permuted (buffer read transposed), shape kept",
            layout_swap_backend,
        ),
        PlantedBug(
            "planted_fp16_accumulation",
            "fp16 accumulation in a long reduction",
            "FX pass: sum/mean over the last dim round their input to fp16 precision and accumulate sequentially "
            "(up to 64 steps) with the running sum rounded to fp16 precision after each add (softmax's "
            "denominator included)",
            fp16_accumulation_backend,
        ),
        PlantedBug(
            "planted_off_by_one_ulp",
            "off-by-one-ULP rounding change",
            "every nonzero finite output moved one ULP away from zero (nextafter)",
            off_by_one_ulp_backend,
        ),
        PlantedBug(
            "planted_fallback_to_eager",
            "fused path silently falls back to eager",
            "backend returns gm.forward without calling Inductor (no generated code)",
            fallback_to_eager_backend,
            caught_by_any_run="(invalid run: FusionError",
        ),
        PlantedBug(
            "planted_nondeterministic_reduction",
            "non-deterministic reduction order",
            "outputs of graphs with a reduction or matmul get -1/0/+1 ULP per element from a per-call RNG",
            nondeterministic_reduction_backend,
        ),
        PlantedBug(
            "planted_long_reduction_bf16",
            "precision lost only in long reductions (split-K workspace)",
            f"FX pass: sum/mean over a last dim longer than {LONG_REDUCTION_THRESHOLD} elements switch to a "
            f"split-K path: {SPLIT_CHUNK}-element chunks summed in fp32, then the partials stored and added in "
            "order at bf16 precision; shorter reductions compile unchanged",
            long_reduction_backend,
        ),
        PlantedBug(
            "planted_contiguous_only",
            "kernel correct only for contiguous inputs (stride bug)",
            "every dense non-contiguous floating input (a transposed or permuted view) is indexed with "
            "contiguous strides: its storage read in memory order as if it were row-major; contiguous "
            "inputs are unaffected",
            contiguous_only_backend,
        ),
        PlantedBug(
            "planted_bf16_scratch",
            "intermediate rounded against the graph's dtype (bf16 scratch buffer)",
            "FX pass: every fp32 or fp16 reduction result (sum, mean, var, var_mean: softmax's denominator, "
            "layer norm's mean and variance) is rounded to bf16 precision before its consumers read it",
            bf16_scratch_backend,
        ),
        PlantedBug(
            "planted_vector_tail",
            "wrong result only in the odd tail of a vectorized loop",
            f"outputs whose last dim is longer than {VECTOR_WIDTH} and not a multiple of it: the last "
            f"(length % {VECTOR_WIDTH}) elements of every row take the values {VECTOR_WIDTH} positions "
            "earlier (stale lanes of the previous full vector)",
            vector_tail_backend,
        ),
        PlantedBug(
            "planted_attention_mask_dropped",
            "attention rewrite drops the additive mask",
            "FX pass: scores + mask feeding a softmax, the mask a graph input broadcast over the scores, become the "
            "scores alone (an attention kernel substituted without its mask); every other add is unchanged",
            dropped_mask_backend,
        ),
        PlantedBug(
            "planted_thread_partials_bf16",
            "per-thread partials combined in bf16, only in very long reductions",
            f"FX pass: sum/mean over a last dim longer than {THREAD_SPLIT_THRESHOLD} elements split into "
            f"{THREAD_PARTIALS} per-thread ranges summed in fp32, whose partials are stored and added in order at "
            "bf16 precision; shorter reductions compile unchanged",
            thread_split_backend,
        ),
    )
}

_registered_lock = threading.Lock()


def register_planted_backends() -> list[str]:
    """Register every planted bug as a ``torch.compile`` backend (idempotent); returns the names."""
    from torch._dynamo import list_backends, register_backend

    with _registered_lock:
        known = set(list_backends(exclude_tags=()))
        for bug in PLANTED_BUGS.values():
            if bug.name not in known:
                register_backend(compiler_fn=bug.compiler, name=bug.name, tags=("planted_bug",))
    return list(PLANTED_BUGS)
