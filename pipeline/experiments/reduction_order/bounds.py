"""C2's band: per row and per version, the derived error bound of the version's summation
(:func:`precisionkit.bounds.summation_error_bound`), and the lambda of the probabilistic bound for the
rows judged together.
"""

import math
from typing import Any

import polars as pl
import torch

from precisionkit.bounds import summation_error_bound, unit_roundoff

from .versions import OUTPUTS, TILES, Version

#: Family-wise confidence of the probabilistic ("random error range") part of C2's claims.
PROB_CONFIDENCE = 0.99
#: Reference lambda for the text of the band (the run chooses its own, see :func:`family_lambda`).
LAMBDA = 6.0


def family_lambda(rows: int, terms: int, confidence: float = PROB_CONFIDENCE) -> float:
    """Higham & Mary's lambda for which ``rows`` probabilistic bounds of sums of ``terms`` terms all
    hold with probability at least ``confidence`` under their model (independent, mean-zero
    rounding errors): by a union bound, rows * terms * 2 exp(-lambda^2 (1-u32)^2 / 2) <= 1 - confidence.

    >>> (
    ...     round(family_lambda(9 * 11 * 2, 4096 + 8), 3),
    ...     round(family_lambda(257 * 11 * 2, 16384 + 32), 3),
    ... )  # smoke, default
    (6.149, 6.877)
    """
    u32 = unit_roundoff(torch.float32)
    return math.sqrt(2.0 * math.log(2.0 * rows * terms / (1.0 - confidence))) / (1.0 - u32)


def bound_spec(family: str, tile: int | None) -> dict[str, Any]:
    """The summation model of a version, as keywords of :func:`summation_error_bound`.

    Compiler versions (eager and Inductor) accumulate fp16 sums in fp32 in an order the framework
    chooses, so their chain is the worst case over every order (n - 1). Tiled versions: any order
    inside a tile and among the partials (two separate framework sums), partials kept in fp32 or
    stored in fp16."""
    if family in ("compiler", "framework_tiled"):
        # The framework's tiling (threads, vector lanes, cascade chunks, Triton blocks) is one order
        # among all; with fp32 accumulation the any-order chain bounds every one of them.
        return {"order": "any", "tile": None, "accumulate_dtype": torch.float32, "partial_dtype": None}
    partial = {"tiled_fp32_partials": torch.float32, "tiled_fp16_partials": torch.float16}.get(family)
    if partial is None or tile is None:
        raise ValueError(f"no summation model for family {family!r} with tile {tile}")
    return {"order": "any", "tile": tile, "accumulate_dtype": torch.float32, "partial_dtype": partial}


def row_bounds(
    rows: torch.Tensor,
    ref: torch.Tensor,
    results: dict[str, torch.Tensor],
    version: str,
    family: str,
    tile: int | None,
    output: str,
    lam: float = LAMBDA,
) -> pl.DataFrame:
    """One row per input row: the version's error against fp64 and its derived bounds.

    ``rows`` the fp16 inputs, ``ref`` their fp64 sums, ``results[output]`` the version's values.
    margin = error / deterministic bound; margin_prob = error / probabilistic bound."""
    spec = bound_spec(family, tile)
    b = summation_error_bound(rows.double(), output_dtype=OUTPUTS[output], lam=lam, **spec)
    if b.probabilistic is None:
        raise RuntimeError(f"no probabilistic bound for {version}/{output} although lambda {lam} was given")
    result = results[output].double()
    err = (result - ref).abs()
    nan = torch.full_like(err, float("nan"))
    err = torch.where(torch.isfinite(result), err, nan)  # a non-finite result has no finite margin
    return pl.DataFrame(
        {
            "version": [version] * len(ref),
            "family": [family] * len(ref),
            "output": [output] * len(ref),
            "row": list(range(len(ref))),
            "ref": ref.tolist(),
            "abs_ref": ref.abs().tolist(),
            "abs_sum": b.abs_sum.tolist(),
            "partial_abs_sum": b.partial_abs_sum.tolist() if b.partial_abs_sum is not None else [None] * len(ref),
            "result": result.tolist(),
            "error": err.tolist(),
            "bound": b.deterministic.tolist(),
            "bound_kind": ["deterministic"] * len(ref),
            "margin": (err / b.deterministic).tolist(),
            "bound_prob": b.probabilistic.tolist(),
            "margin_prob": (err / b.probabilistic).tolist(),
            "prob_bound_probability": [b.probability] * len(ref),
            "lambda": [lam] * len(ref),
            "chain": ["+".join(str(c) for c in b.chains)] * len(ref),
            "bound_formula": [b.formula] * len(ref),
        },
        schema_overrides={"partial_abs_sum": pl.Float64},
    )


BAND_WORDS = (
    "Per row and per version, the band is a deterministic forward error bound of that version's summation, "
    "computed from the row's own data: u16*|s| + (1+u16)*gamma_c(u32)*sum|x| + tau16 for fp32 accumulation with "
    "a final fp16 rounding, c the longest accumulation chain (n-1 for an order the framework chooses, "
    "c(b)+c(n/b) for tile b with fp32 partials); fp16-stored partials add E_p = (1+u16)*gamma_c(b)(u32)*sum|x| "
    "+ u16*sum|p_j| + (n/b)*tau16, then gamma_c(n/b)(u32)*(sum|p_j| + E_p) for the sum of the partials. "
    "gamma_k(u) = k*u/(1-k*u), u16 = 2^-11, u32 = 2^-24, tau16 = 2^-25 (underflow). The fp32 accumulator "
    "(acc32) has the same bound without the final rounding terms. Higham, Accuracy and Stability of Numerical "
    f"Algorithms, ch. 3-4. Probabilistic bound: gamma_k replaced by min(gamma_k, exp(lambda*sqrt(k)*u + k*u^2/(1-u)) - 1), "
    f"lambda = sqrt(2 ln(2 R N / (1 - {PROB_CONFIDENCE:g}))) for the R rows judged of N terms each, so that every "
    "row's probabilistic bound holds together with that confidence (Higham & Mary 2019; about 6.9 in the default "
    "profile)."
)


def all_row_bounds(
    rows: torch.Tensor, ref: torch.Tensor, stored: dict[str, torch.Tensor], versions: list[Version]
) -> pl.DataFrame:
    """:func:`row_bounds` of every version and output, with one lambda for every row judged, so that
    all probabilistic bounds hold together at :data:`PROB_CONFIDENCE`."""
    lam = family_lambda(len(ref) * len(versions) * len(OUTPUTS), rows.shape[-1] + rows.shape[-1] // min(TILES))
    return pl.concat(
        [
            row_bounds(
                rows,
                ref,
                {o: stored[f"{v.version}/{o}"] for o in OUTPUTS},
                v.version,
                v.family,
                v.tile,
                output,
                lam,
            )
            for output in OUTPUTS
            for v in versions
        ]
    )
