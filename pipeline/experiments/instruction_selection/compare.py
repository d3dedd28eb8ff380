"""C1's comparisons of outputs: the ULP = 0 / 1 / >= 2 distribution and histogram between paths,
modes and controls (``c1_ulp_distribution``, ``c1_ulp_histogram``), and each output's error against
the fp64 reference (``c1_error_vs_fp64``).
"""

from typing import Any

import polars as pl
import torch

from precisionkit import bit_equal, error_stats, ulp_diff
from precisionkit.ulp import ulp_histogram

#: Histogram bins of the ULP distance between two paths; the last bin collects everything above.
HIST_MAX = 4


def ulp_row(name: str, a: torch.Tensor, b: torch.Tensor) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """ULP = 0 / = 1 / >= 2 shares of one comparison, and its histogram rows."""
    d = ulp_diff(a, b).reshape(-1).cpu()
    n = d.numel()
    hist = ulp_histogram(d, HIST_MAX, comparison=name)
    row = {
        "comparison": name,
        "n": n,
        "bit_equal": bool(bit_equal(a, b)),
        "ulp0_pct": 100.0 * hist[0]["count"] / n,
        "ulp1_pct": 100.0 * hist[1]["count"] / n,
        "ulp_ge2_pct": 100.0 * sum(h["count"] for h in hist[2:]) / n,
        "ulp_max": int(d.max()),
    }
    return row, hist


#: The comparisons of the distribution table, per mode: (label, output a, output b).
def _comparisons(mode: str) -> list[tuple[str, str, str]]:
    return [
        (f"{mode} A vs B", f"{mode}_A", f"{mode}_B"),
        (f"{mode} route only: control_route_only vs A", f"{mode}_control_route_only", f"{mode}_A"),
        (f"{mode} value only: control_value_only vs A", f"{mode}_control_value_only", f"{mode}_A"),
        (f"{mode} route at B's value: B vs control_value_only", f"{mode}_B", f"{mode}_control_value_only"),
    ]


def all_comparisons() -> dict[str, tuple[str, str]]:
    """Every comparison of the distribution table: label -> (output a, output b)."""
    comparisons = {label: (a, b) for mode in ("eager", "fused") for label, a, b in _comparisons(mode)}
    comparisons.update(
        {
            "A eager vs fused": ("eager_A", "fused_A"),
            "B eager vs fused": ("eager_B", "fused_B"),
            "eager control_0dim_tensor vs B": ("eager_control_0dim_tensor", "eager_B"),
            "eager control_fp32_opmath vs A": ("eager_control_fp32_opmath", "eager_A"),
        }
    )
    return comparisons


def ulp_tables(outputs: dict[str, torch.Tensor]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The ULP distribution (one row per comparison) and the long-format histogram."""
    rows, hist = [], []
    for label, (a, b) in all_comparisons().items():
        row, h = ulp_row(label, outputs[a], outputs[b])
        rows.append(row)
        hist += h
    return pl.DataFrame(rows), pl.DataFrame(hist)


#: The outputs judged against fp64 in ``c1_error_vs_fp64``, in table order.
ERROR_KEYS = (
    "eager_A",
    "eager_B",
    "fused_A",
    "fused_B",
    "eager_control_route_only",
    "eager_control_value_only",
    "fused_control_route_only",
    "fused_control_value_only",
)


def error_table(outputs: dict[str, torch.Tensor], ref: torch.Tensor) -> pl.DataFrame:
    """Each path's and route control's error against the fp64 reference (``None`` statistics dropped)."""
    rows = []
    for key in ERROR_KEYS:
        stats = error_stats(outputs[key], ref)
        rows.append({"path": key, **{k: v for k, v in stats.items() if v is not None}})
    return pl.DataFrame(rows)
