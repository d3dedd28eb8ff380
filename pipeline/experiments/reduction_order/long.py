"""C2's long reductions: ``sum`` of fp32 rows of 2^24 terms (default; 2^27 in the seed profile) by
eager, by the fused default (every thread) and by the fused path on one thread, judged against the
fp64 sum by the derived bounds of :mod:`precisionkit.bounds`.

Accumulation defects of compiled reductions (per-lane or per-thread partial sums that are not
cascaded, a partial stored at lower precision) grow with the number of terms per accumulator, so
they show at millions of terms, not at C2's 16,384. The rows are drawn from U(-1, 1) and from
U(0, 1): with non-negative terms every partial sum grows, so a lost low-order bit is never
cancelled later.

For n terms the worst-case chain of an order the framework chooses is n - 1 additions, and
gamma_(n-1)(u32) is undefined once (n - 1) u32 >= 1 (2^24 terms and more): the deterministic bound
says nothing there, and the claim rests on the probabilistic bound of Higham & Mary (2019),
gamma~_(n-1)(lambda) * sum|x|, with lambda chosen for every row and version judged together.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl
import torch

from precisionkit import FusedFunction, bit_equal, fused
from precisionkit.backends import ONE_THREAD
from precisionkit.bounds import gamma, gamma_tilde, unit_roundoff
from precisionkit.evidence import evidence_fields

from ...intents import adapter_of, intent_options
from ...resources import ExperimentSettings
from .bounds import PROB_CONFIDENCE, family_lambda
from .versions import fused_base, options_label

#: The input distributions of the long rows.
LONG_DISTRIBUTIONS = ("uniform_symmetric", "uniform_nonnegative")
#: Terms summed in fp64 per chunk for the reference (its own error: at most n * 2^-53 * sum|x|).
_REF_CHUNK = 2**22


def long_sum(x: torch.Tensor) -> torch.Tensor:
    """The operation: an fp32 ``sum`` over the last dim."""
    return x.sum(-1)


def make_long_rows(distribution: str, rows: int, length: int, seed: int, device: torch.device) -> torch.Tensor:
    """fp32 rows drawn on the CPU from a seeded generator (device-independent values)."""
    if distribution not in LONG_DISTRIBUTIONS:
        raise ValueError(f"unknown long-row distribution {distribution!r}; expected one of {LONG_DISTRIBUTIONS}")
    if rows < 1 or length < 2:
        raise ValueError(f"long reductions need rows >= 1 and length >= 2, got rows={rows}, length={length}")
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, length, generator=g, dtype=torch.float32)
    if distribution == "uniform_symmetric":
        x = x * 2 - 1  # exact in fp32: a power-of-two scale and a subtraction of 1 from [0, 2)
    return x.to(device)


def fp64_sums(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the fp64 sum and the fp64 sum of |x|, chunk by chunk (bounded memory), on the device
    ``x`` is on (a device without float64, MPS, sums on the host): no row crosses to the host, only the
    two sums per row do, where the caller reads them."""
    where = torch.device("cpu") if x.device.type == "mps" else x.device
    total = torch.zeros(x.shape[0], dtype=torch.float64, device=where)
    abs_total = torch.zeros(x.shape[0], dtype=torch.float64, device=where)
    for start in range(0, x.shape[-1], _REF_CHUNK):
        chunk = x[:, start : start + _REF_CHUNK].to(where).to(torch.float64)
        total += chunk.sum(-1)
        abs_total += chunk.abs().sum(-1)
    return total, abs_total


def long_bounds(abs_sum: torch.Tensor, n: int, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic and probabilistic bounds of an fp32 sum of ``n`` terms in any order (chain
    n - 1): gamma_(n-1)(u32) * sum|x| (+inf where gamma is undefined) and
    min(gamma, gamma~_(n-1)(lambda)) * sum|x|."""
    u = unit_roundoff(torch.float32)
    k = n - 1
    g = gamma(k, u) if k * u < 1 else math.inf
    return abs_sum * g, abs_sum * min(g, gamma_tilde(k, u, lam))


@dataclass(frozen=True)
class LongVersion:
    version: str
    threads: str
    options: str
    fn: Callable[[torch.Tensor], torch.Tensor]


def long_versions(settings: ExperimentSettings, device: torch.device) -> list[LongVersion]:
    """Eager, the fused default (every thread) and the fused path on one thread (one block on CUDA): the
    compiler's answer to the intent ``one_thread`` (Inductor: ``cpp.threads=1`` on a CPU,
    ``split_reductions=False`` on CUDA), left out where it has none (:func:`one_thread_not_applicable`)."""
    base = fused_base(settings, device)
    one, _ = intent_options(settings.backend, base, ONE_THREAD, device)
    versions = [
        LongVersion("eager", "all", "", long_sum),
        LongVersion("fused_default", "all", "", fused(long_sum, settings.backend, base)),
    ]
    if one is not None:
        text = options_label(adapter_of(settings.backend).intent(ONE_THREAD, str(device)) or {})
        versions.append(LongVersion("fused_one_thread", "one", text, fused(long_sum, settings.backend, one)))
    return versions


def one_thread_not_applicable(backend: str, device: torch.device) -> str | None:
    """Why the compiler of ``backend`` has no one-thread version on ``device`` ("not applicable to <compiler>:
    <why>"), or None when it has one."""
    options, why = intent_options(backend, {}, ONE_THREAD, device)
    return why if options is None else None


def planned_compiles(device_type: str, backend: str = "inductor") -> int:
    """Fused versions :func:`long_versions` makes for ``device_type``, one compile each (every row of every
    distribution has one shape): the fused default, and the one-thread version where the compiler has one."""
    return 1 + (adapter_of(backend).intent(ONE_THREAD, device_type) is not None)


def run_long(
    versions: list[LongVersion],
    rows: int,
    length: int,
    seed_of: Callable[[str], int],
    device: torch.device,
    log: Callable[[str], None] | None = None,
) -> pl.DataFrame:
    """Every version on every long row: result, error against fp64, both bounds and margins, and
    whether the result's bits equal eager's and the one-thread version's."""
    lam = family_lambda(rows * len(LONG_DISTRIBUTIONS) * len(versions), length)
    out: list[dict[str, Any]] = []
    for dist in LONG_DISTRIBUTIONS:
        x = make_long_rows(dist, rows, length, seed_of(dist), device)
        ref, abs_sum = (t.cpu() for t in fp64_sums(x))  # two fp64 values per row to the host
        det, prob = long_bounds(abs_sum, length, lam)
        results: dict[str, torch.Tensor] = {}
        for v in versions:
            start = time.perf_counter()
            results[v.version] = v.fn(x).cpu()
            seconds = time.perf_counter() - start
            ev = (
                evidence_fields(v.fn.evidence, ("kernel_count", "code_sha256"))
                if isinstance(v.fn, FusedFunction)
                else {}
            )
            err = (results[v.version].double() - ref).abs()
            err = torch.where(torch.isfinite(results[v.version]), err, torch.full_like(err, math.nan))
            for r in range(rows):
                out.append(
                    {
                        "distribution": dist,
                        "row": r,
                        "terms": length,
                        "version": v.version,
                        "family": "compiler",
                        "output": "acc32",
                        "threads": v.threads,
                        "options": v.options,
                        "ref": float(ref[r]),
                        "abs_ref": float(ref[r].abs()),
                        "abs_sum": float(abs_sum[r]),
                        "result": float(results[v.version][r]),
                        "error": float(err[r]),
                        "relative_error": float(err[r] / abs_sum[r]),
                        "bound": float(det[r]),
                        "margin": float(err[r] / det[r]),
                        "bound_prob": float(prob[r]),
                        "margin_prob": float(err[r] / prob[r]),
                        "lambda": lam,
                        "prob_bound_probability": PROB_CONFIDENCE,
                        "bit_equal_eager": bool(bit_equal(results[v.version][r], results["eager"][r])),
                        "seconds": seconds,
                        "kernel_count": ev.get("kernel_count"),
                        "code_sha256": ev.get("code_sha256"),
                    }
                )
            if log:
                log(f"C2 long: {dist} {v.version}: max margin_prob {float((err / prob).max()):.3g} in {seconds:.2f} s")
        if "fused_one_thread" in results:
            for row in out[-len(versions) * rows :]:
                row["bit_equal_one_thread"] = bool(
                    bit_equal(results[row["version"]][row["row"]], results["fused_one_thread"][row["row"]])
                )
    table = pl.DataFrame(out, infer_schema_length=None)
    if "bit_equal_one_thread" not in table.columns:
        table = table.with_columns(pl.lit(None, dtype=pl.Boolean).alias("bit_equal_one_thread"))
    return table
