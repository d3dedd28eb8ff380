"""B's ablation (main document §6.1 by measurement): each op of a chain kept out of the fused region
in turn, re-run on the sets where fused is worst relative to eager, and the op whose removal helps
most. Computation only; the asset is :func:`.assets.fusion_ablation`.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import torch

from precisionkit.batched import error_stats_per_set

from ...workloads import WORKLOADS
from .stages import CHAIN_STAGES, chain_without_fusing

ABLATION_SCHEMA = {
    "chain": pl.String,
    "distribution": pl.String,
    "dtype": pl.String,
    "verdict": pl.String,
    "op_index": pl.Int64,
    "op": pl.String,
    "sets": pl.Int64,
    "eager_mean": pl.Float64,
    "fused_mean": pl.Float64,
    "ablated_mean": pl.Float64,
    "fused_nonfinite_sets": pl.Int64,
    "ablated_nonfinite_sets": pl.Int64,
    "improvement": pl.Float64,
    "share_of_gap": pl.Float64,
    "responsible": pl.Boolean,
}


def ablate(
    chain: str,
    dtype: str,
    pool: dict[str, torch.Tensor],
    ref: torch.Tensor,
    set_indices: list[int],
    dist: str,
    fused_errors: np.ndarray,
    eager_errors: np.ndarray,
    fused_nonfinite: int,
    compiled: dict[tuple[str, str, int], Callable[..., torch.Tensor]],
    make_fused: Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]],
    device: torch.device,
) -> list[dict[str, Any]]:
    """For each op of ``chain``: the chain compiled with that op kept out of the fused region, run
    on ``set_indices``; its mean per-set scale-aware error against the fused and eager means.

    ``improvement`` = fused mean - ablated mean (positive: keeping the op out helps), and
    ``share_of_gap`` its share of fused - eager. An ablation that turns non-finite sets finite
    counts those as improved. ``compiled`` caches one compiled variant per (chain, dtype, op)."""
    workload = WORKLOADS[chain]
    ops = CHAIN_STAGES[chain][0]
    args = [pool[f"{dist}/{dtype}/{a}"][set_indices].to(device) for a in workload.arg_names]
    refs = ref[set_indices]
    out: list[dict[str, Any]] = []
    for i, op in enumerate(ops):
        key = (chain, dtype, i)
        if key not in compiled:
            compiled[key] = make_fused(chain_without_fusing(chain, i))
        fn = compiled[key]
        outputs = torch.stack([fn(*(a[j] for a in args)) for j in range(len(set_indices))])
        stats = error_stats_per_set(outputs, refs)
        nonfinite = int((~torch.isfinite(outputs)).reshape(len(set_indices), -1).any(dim=1).sum())
        ablated = np.nan_to_num(stats["sulp_max"], nan=0.0)
        out.append(
            {
                "op_index": i,
                "op": op,
                "sets": len(set_indices),
                "eager_mean": float(eager_errors.mean()),
                "fused_mean": float(fused_errors.mean()),
                "ablated_mean": float(ablated.mean()),
                "fused_nonfinite_sets": fused_nonfinite,
                "ablated_nonfinite_sets": nonfinite,
            }
        )
    for r in out:
        r["improvement"] = r["fused_mean"] - r["ablated_mean"]
        gap = r["fused_mean"] - r["eager_mean"]
        r["share_of_gap"] = r["improvement"] / gap if gap > 0 else None
    return out


def mark_responsible(rows: list[dict[str, Any]]) -> None:
    """Mark the op whose removal helps most: fewer non-finite sets first, then the largest
    improvement, which must exceed a tenth of a scale-aware ULP to count as measured."""
    if not rows:
        return
    best = max(rows, key=lambda r: (r["fused_nonfinite_sets"] - r["ablated_nonfinite_sets"], r["improvement"]))
    fixed_nonfinite = best["ablated_nonfinite_sets"] < best["fused_nonfinite_sets"]
    for r in rows:
        r["responsible"] = r is best and (fixed_nonfinite or r["improvement"] > 0.1)
