"""E's curves against the baseline: bit for bit where the same inputs ran on a deterministic device,
and always against the data-order noise band of the eager replicates (the ``curves`` method of
:mod:`pipeline.instruments.regression.comparators`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from ...experiment import BaselineTable
from .rows import Row, row


def noise_band(curves: Sequence[Sequence[float | None]], half_width: int = 1) -> list[float | None]:
    """Per evaluation point, the replicate spread (max - min over the data-order replicates'
    curves) at its widest within +-half_width points; None where fewer than two replicates have a
    value. With the four replicates E runs, the range estimates the data-order noise far more
    steadily than one difference of two runs does."""
    spread: list[float | None] = []
    for values in zip(*curves, strict=False):
        have = [v for v in values if v is not None]
        spread.append(max(have) - min(have) if len(have) >= 2 else None)
    out = []
    for i in range(len(spread)):
        window = [v for v in spread[max(0, i - half_width) : i + half_width + 1] if v is not None]
        out.append(max(window) if window else None)
    return out


def _curve(df: pl.DataFrame, run: str) -> tuple[list[int], list[float]]:
    """Steps and eval losses of ``run``'s evaluation points (rows without an eval loss left out), by step."""
    part = df.filter((pl.col("run") == run) & pl.col("eval_loss").is_not_null()).sort("step")
    return part["step"].to_list(), part["eval_loss"].to_list()


def _band_of(df: pl.DataFrame) -> tuple[dict[int, float], int]:
    """The noise band of the first run family with data-order replicates (``<main>_eager`` and its
    ``<main>_eager_order_<X>`` runs on the same steps), by step, and how many replicates made it."""
    runs = set(df["run"].unique().to_list())
    for main in sorted(r for r in runs if r.endswith("_eager")):
        names = [main, *sorted(r for r in runs if r.startswith(f"{main}_order_"))]
        curves = [_curve(df, r) for r in names]
        steps = curves[0][0]
        same = [c for _, c in (cv for cv in curves if cv[0] == steps)]
        if len(same) < 2:
            continue
        band = {s: v for s, v in zip(steps, noise_band(same), strict=False) if v is not None}
        return band, len(same)
    return {}, 0


#: Device types whose training runs are bit-for-bit reproducible from the same seeds (a resumed CPU run
#: reproduces every float; GPU kernels may reduce in a different order from run to run). Like the other
#: bit-exact comparators, this holds the environment fixed: another torch, thread count or CPU ISA can
#: change the bits too, and the provenance rows beside the ERROR name such a change.
DETERMINISTIC_DEVICES = ("cpu",)
#: Curve columns compared bit for bit when the inputs are the same on a deterministic device.
EXACT_CURVE_COLUMNS = ("eval_loss", "train_loss", "grad_norm")
#: Per-run columns that name a run's inputs: when both sides record them, they must match too.
CURVE_INPUT_COLUMNS = ("data_seed", "init_seed", "init_ulp_nudge")


def _devices(df: pl.DataFrame) -> list[str]:
    """The devices the curves record (empty when they record none)."""
    if "device" not in df.columns:
        return []
    return sorted(str(d) for d in df["device"].unique().to_list())


def curves_exact_reason(base: pl.DataFrame, cur: pl.DataFrame, same_inputs: bool) -> str | None:
    """None when the two curve tables must agree bit for bit (same inputs, every run of both sides on a
    deterministic device), else why they need not."""
    if not same_inputs:
        return "different inputs"
    devices = {"baseline": _devices(base), "current": _devices(cur)}
    for side, found in devices.items():
        if not found:
            return f"the {side} curves record no device"
        loose = [d for d in found if d.split(":")[0] not in DETERMINISTIC_DEVICES]
        if loose:
            return f"the {side} curves ran on {', '.join(loose)}, not bit-for-bit reproducible"
    return None


def _run_inputs(df: pl.DataFrame, run: str) -> tuple[Any, ...] | None:
    """The recorded inputs of ``run`` (None when the table does not record them)."""
    cols = [c for c in CURVE_INPUT_COLUMNS if c in df.columns]
    if len(cols) != len(CURVE_INPUT_COLUMNS):
        return None
    part = df.filter(pl.col("run") == run).select(cols).unique()
    return tuple(tuple(r) for r in part.iter_rows())


def _threads_reason(base: pl.DataFrame, cur: pl.DataFrame, run: str) -> str | None:
    """Why ``run``'s curves need not agree bit for bit on account of intra-op threads (a CPU's thread
    count changes reduction orders): a side that does not record them per run, or counts that differ."""
    counts = {}
    for side, df in (("baseline", base), ("current", cur)):
        if "threads" not in df.columns:
            return f"the {side} curves do not record the threads each run computed on"
        counts[side] = sorted(df.filter(pl.col("run") == run)["threads"].unique().to_list())
    if counts["baseline"] != counts["current"]:
        b, c = (", ".join(str(n) for n in counts[k]) or "none" for k in ("baseline", "current"))
        return f"this run computed on {b} thread(s) in the baseline and {c} now"
    return None


def _same_value(a: Any, b: Any) -> bool:
    """Equal, counting two NaNs (and two nulls) as equal."""
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return bool(a == b) if a is not None and b is not None else a is b


def exact_curve_rows(exp: str, run: str, base: pl.DataFrame, cur: pl.DataFrame, device: str) -> list[Row]:
    """``run``'s curves bit for bit, one row per column of :data:`EXACT_CURVE_COLUMNS` that both sides
    have: every eval point (step) of either side, ERROR when any value differs or a point is missing.
    The row shows the values at the point that moved most (or the first missing one)."""
    b = base.filter(pl.col("run") == run).sort("step")
    c = cur.filter(pl.col("run") == run).sort("step")
    rows = []
    for col in EXACT_CURVE_COLUMNS:
        if col not in b.columns or col not in c.columns:
            continue
        bmap = dict(zip(b["step"].to_list(), b[col].to_list(), strict=True))
        cmap = dict(zip(c["step"].to_list(), c[col].to_list(), strict=True))
        steps = sorted(set(bmap) | set(cmap))
        differ = [s for s in steps if s not in bmap or s not in cmap or not _same_value(bmap[s], cmap[s])]
        numeric = [s for s in differ if isinstance(bmap.get(s), (int, float)) and isinstance(cmap.get(s), (int, float))]
        worst = max(numeric, key=lambda s: abs(float(cmap[s]) - float(bmap[s])), default=None)
        shown = worst if worst is not None else (differ[0] if differ else (steps[-1] if steps else None))
        delta = float(cmap[worst]) - float(bmap[worst]) if worst is not None else (0.0 if not differ else None)
        where = f", largest at step {worst}" if worst is not None else ""
        rows.append(
            row(
                exp,
                f"{run}/{col}/bit_exact",
                "bit_exact",
                bmap.get(shown),
                cmap.get(shown),
                delta=delta,
                tol=0.0,
                tol_source=f"same inputs on a deterministic device ({device}): bit for bit at every eval point "
                f"({len(differ)} of {len(steps)} points differ{where}; a provenance change of torch, threads or CPU "
                "also moves bits)",
                moved=bool(differ),
                severity="ERROR",
            )
        )
    return rows


def _missing_curve_row(exp: str, run: str, bl: list[float], cl: list[float], in_baseline: bool) -> Row:
    """The row of a run whose curve is on one side only: new in the current run (WARN) or gone (ERROR)."""
    return row(
        exp,
        f"{run}/final_eval_loss",
        "curve",
        bl[-1] if bl else None,
        cl[-1] if cl else None,
        moved=True,
        severity="ERROR" if in_baseline else "WARN",
        status="not in current" if in_baseline else "not in baseline",
    )


def _band_rows(
    exp: str,
    run: str,
    base_curve: tuple[list[int], list[float]],
    cur_curve: tuple[list[int], list[float]],
    bands: tuple[dict[int, float], dict[int, float], int],
    run_not_exact: str | None,
) -> list[Row]:
    """One run's eval loss at the last common step against the noise band (``bands``: the baseline's
    and the current band by step, and the larger replicate count), and how many common eval points
    fall outside it; a run missing on one side is one row saying so."""
    (bs, bl), (cs, cl) = base_curve, cur_curve
    band_b, band_c, reps = bands
    rows: list[Row] = []
    if not bs or not cs:
        return [_missing_curve_row(exp, run, bl, cl, in_baseline=bool(bs))]
    common = [s for s in bs if s in set(cs)]
    bmap, cmap = dict(zip(bs, bl, strict=False)), dict(zip(cs, cl, strict=False))

    def band(step: int) -> float | None:
        vals = [v for v in (band_b.get(step), band_c.get(step)) if v is not None]
        return max(vals) if vals else None

    last = common[-1] if common else None
    tol = band(last) if last is not None else None
    if last is None or tol is None:
        rows.append(
            row(
                exp,
                f"{run}/final_eval_loss",
                "curve",
                bl[-1],
                cl[-1],
                moved=True,
                severity="WARN",
                status="no common steps or no noise band (needs <main>_eager and an <main>_eager_order_<X> replicate)",
            )
        )
        return rows
    delta = cmap[last] - bmap[last]
    rows.append(
        row(
            exp,
            f"{run}/final_eval_loss@{last}",
            "curve",
            bmap[last],
            cmap[last],
            delta=delta,
            tol=tol,
            tol_source=f"{exp}'s data-order noise band (spread max - min of {reps} eager replicates "
            "that differ only in data order, +-1 eval point, max of baseline and current)"
            + (f"; not compared bit for bit: {run_not_exact}" if run_not_exact else ""),
            moved=abs(delta) > tol,
            severity="ERROR" if delta > 0 else "WARN",
        )
    )
    outside = [s for s in common if (w := band(s)) is not None and abs(cmap[s] - bmap[s]) > w]
    rows.append(
        row(
            exp,
            f"{run}/eval_points_outside_band",
            "curve",
            0,
            len(outside),
            delta=len(outside),
            tol=0.0,
            tol_source=f"{len(common)} common eval points; same band",
            moved=bool(outside),
            severity="WARN",
        )
    )
    return rows


def compare_curves(exp: str, table: BaselineTable, base: Any, cur: Any, same_inputs: bool) -> list[Row]:
    """Per run: with the same inputs on a deterministic device (:func:`curves_exact_reason`), its curves
    bit for bit (:func:`exact_curve_rows`, ERROR on any difference; a run whose recorded seeds or
    intra-op thread counts differ between the sides, or that a side ran without recording its threads,
    is left to the band); always, the eval loss at the last common step against the
    noise band (max of the baseline's and the current band there), and how many common eval points fall
    outside the band (WARN; :func:`_band_rows`)."""
    rows = []
    (band_b, reps_b), (band_c, reps_c) = _band_of(base), _band_of(cur)
    not_exact = curves_exact_reason(base, cur, same_inputs)
    device = ", ".join(sorted(set(_devices(base)) | set(_devices(cur))))
    for run in sorted(set(base["run"].unique().to_list()) | set(cur["run"].unique().to_list())):
        base_curve, cur_curve = _curve(base, run), _curve(cur, run)
        run_not_exact = not_exact
        inputs = _run_inputs(base, run), _run_inputs(cur, run)
        if run_not_exact is None and None not in inputs and inputs[0] != inputs[1]:
            run_not_exact = "this run's recorded seeds differ"
        if run_not_exact is None:
            run_not_exact = _threads_reason(base, cur, run)
        if run_not_exact is None and base_curve[0] and cur_curve[0]:
            rows += exact_curve_rows(exp, run, base, cur, device)
        rows += _band_rows(exp, run, base_curve, cur_curve, (band_b, band_c, max(reps_b, reps_c)), run_not_exact)
    return rows
