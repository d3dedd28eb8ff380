"""A typed differential tester for ``torch.compile``: random programs over float, integer and bool
tensors, run eagerly, fused and in fp64, judged by the ``diff`` rule of :mod:`precisionkit.repro`.

Every program is a :class:`~precisionkit.repro.Case`, so a mismatch is already a standalone
reproducer, and :mod:`precisionkit.minimize` and :mod:`precisionkit.bisect` apply to it unchanged.

Generators (``generate(seed, generator)``):

* ``typed``: a random DAG over 2-D values of three kinds (float, int, bool) where real
  wrong-result bugs of compilers live: arg-reductions and min/max (values and indices), cumulative
  ops, explicit casts (float <-> int <-> bool, 16-bit round trips), where / masked_fill / clamp,
  exp/log/pow/rsqrt/reciprocal near their edges, rounding (ceil, floor, round, trunc, frac,
  floor_divide, remainder), integer arithmetic and bit ops, gather / scatter_add / index_select /
  index_add / index_put with duplicate indices, flip, roll, permute and views, in-place ops on
  views of a fresh buffer, constants across many binades; then (:mod:`.typed_int`) integer and
  bool reductions (argmin/argmax/min/max/amin/amax over bool, int8, uint8, int32 and int64 inputs
  with many ties) and isinf / isnan / isfinite with ``where`` on their masks; then (:mod:`.typed_wide`)
  softmax / log_softmax over any dim, sin / cos / tan, exp and log at the ends of the exponent
  range, inputs and constants from subnormals to 1e30, strided views (transpose of a reshape, step
  slices, overlapping as_strided windows), cat / stack, rows of a few hundred elements with odd
  lengths, and values of only +-0, only ties or only huge numbers; then (:mod:`.typed_range`) large
  computed values (products or trig of views, scaled) into softmax / log_softmax / logsumexp /
  layer and RMS norm, signed zeros through contiguous min / max / clamp / where, arg-reductions
  over transposed or strided inputs, and integer and bool reductions over either dim. Inputs come in every layout of
  :data:`~precisionkit.repro.LAYOUTS` and with edge values (+-0, +-inf, NaN, subnormals, huge)
  where the program tests their handling; shapes sit around vector widths (tails) and tiles.
* ``attention``: scaled dot-product attention in the forms models write it (heads permuted from
  [B, S, H, D], scores multiplied or divided by the scale, an additive mask, softmax, matmul),
  the forms Inductor's attention pattern matcher rewrites.
* ``norm``: layer norm (``F.layer_norm`` or written out, biased variance, eps inside the root) and
  RMSNorm variants over rows that end in a vector tail.
* ``gelu``: GELU written as ``F.gelu`` (exact or tanh), with ``erf``, or with ``tanh``.
* ``reduction``: long sums and means (up to 2^20 terms in one program) on one thread or many.
* ``gpu``: what Triton code generation does differently (:mod:`.gpu`); drawn by :func:`plan` on
  CUDA runs, generatable and runnable on the CPU too.
* ``opinfo``: chains of 2 to 8 ops drawn from PyTorch's own op database (``op_db``), with their
  own sample arguments, in fp32/fp64/fp16/bf16/int64/int32/bool, under range modes (tiny, huge,
  domain edges, signed zeros, NaN and inf, integers near their width) and compiled statically or
  dynamically (:mod:`.opinfo`, :mod:`.compile_modes`); not in :func:`plan`'s mix, run by
  ``benchmarks/difftest_opinfo.py``.

Every program carries the run's device (``device=``): inputs are drawn there from the program's
seed, eager and the fused path run there (Inductor's Triton code on CUDA), and the fp64 reference
runs there where the device has the op in fp64 (on the host otherwise; the outcome says which).

The package's modules: :mod:`.program` (the builder), :mod:`.typed` (with its stages
:mod:`.typed_int`, :mod:`.typed_wide` and :mod:`.typed_range`) and :mod:`.structured` (the CPU generators), :mod:`.gpu`
(the GPU vocabulary), :mod:`.generator` (``generate``, ``plan``), :mod:`.runner` (one program, a campaign), :mod:`.isolation` (worker interpreters) and
:mod:`.features` (the corpus vocabulary of a program).
"""

from __future__ import annotations

from .campaign import fuzz
from .features import _FEATURE_PATTERNS, VOCABULARY, features_of
from .generator import generate, plan, threads_for
from .isolation import Isolated, WorkerPool
from .program import CLASSES, FLOAT_DTYPES, GENERATORS, Program
from .runner import Outcome, run

__all__ = [
    "CLASSES",
    "FLOAT_DTYPES",
    "GENERATORS",
    "VOCABULARY",
    "_FEATURE_PATTERNS",
    "Isolated",
    "Outcome",
    "Program",
    "WorkerPool",
    "features_of",
    "fuzz",
    "generate",
    "plan",
    "run",
    "threads_for",
]
