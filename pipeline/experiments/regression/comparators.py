"""How a stored value is compared with its promoted baseline: one comparator per
:class:`~pipeline.experiment.BaselineTable` method, driven by the experiment's own declaration.

* ``columns``: bit-exact, column by column, rows matched on the declared keys; the declared
  direction of a column says which way is worse (a move the other way is WARN), ``code`` columns
  (generated-code hashes) come after the value columns as kind ``code`` at WARN.
* ``tensors``: bit-exact, tensor by tensor (md5 over dtype, shape and bytes).
* ``distribution``: per group of the declared keys, statistics of each declared column's per-set
  values against a tolerance measured by bootstrap over the baseline's own sets; with the same
  inputs, also the share of sets whose value changed.
* ``curves``: training curves (``run``, ``step``, ``eval_loss``): the final eval loss against the
  experiment's data-order noise band (the spread of its ``<main>_eager`` and ``<main>_eager_order_<X>``
  replicates). With the same inputs on a deterministic device (every row's ``device`` a CPU, on both
  sides), every run's curves are also compared bit for bit at every eval point: any difference is an
  ERROR, however small against the band.
* ``kept``: nothing compared (promoted so the baseline is complete).

Every comparator returns rows of :data:`COLUMNS`; nothing here names an experiment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ...experiment import BaselineMethod, BaselineTable, Direction, Experiment
from .rules import BOOTSTRAP_QUANTILE, BOOTSTRAP_RESAMPLES

#: One row per compared item.
COLUMNS: dict[str, Any] = {
    "experiment": pl.String,
    "item": pl.String,
    "kind": pl.String,
    "baseline_value": pl.String,
    "current_value": pl.String,
    "delta": pl.Float64,
    "tolerance": pl.Float64,
    "tolerance_source": pl.String,
    "moved": pl.String,
    "severity": pl.String,
    "status": pl.String,
}

Row = dict[str, Any]


def row(
    exp: str,
    item: str,
    kind: str,
    base: Any,
    cur: Any,
    *,
    delta: float | None = None,
    tol: float | None = None,
    tol_source: str = "",
    moved: bool = False,
    severity: str = "none",
    status: str = "compared",
) -> Row:
    """One row of :data:`COLUMNS` (the severity shows only on a moved or uncompared item)."""

    def fmt(v: Any) -> str | None:
        if v is None:
            return None
        if isinstance(v, float):
            return f"{v:.6g}"
        return str(v)

    return {
        "experiment": exp,
        "item": item,
        "kind": kind,
        "baseline_value": fmt(base),
        "current_value": fmt(cur),
        "delta": None if delta is None else float(delta),
        "tolerance": None if tol is None else float(tol),
        "tolerance_source": tol_source,
        "moved": "yes" if moved else "no",
        "severity": severity if moved or status != "compared" else "none",
        "status": status,
    }


#: Marks an item (row, tensor) absent on one side, as opposed to a stored null value.
MISSING = object()


def exact(
    exp: str,
    item: str,
    kind: str,
    base: Any,
    cur: Any,
    *,
    worse_if: Callable[[Any, Any], bool] | None = None,
    severity: str = "ERROR",
) -> Row:
    """A bit-exact item: any difference moves it. ``worse_if(base, cur)`` False downgrades to WARN."""
    if base is MISSING:
        return row(exp, item, kind, None, cur, moved=True, severity="WARN", status="not in baseline")
    if cur is MISSING:
        return row(exp, item, kind, base, None, moved=True, severity="ERROR", status="not in current")
    if base is None or cur is None:
        return row(exp, item, kind, base, cur, moved=base is not cur, severity=severity)
    numeric = (
        isinstance(base, (int, float, np.integer, np.floating))
        and not isinstance(base, bool)
        and isinstance(cur, (int, float, np.integer, np.floating))
        and not isinstance(cur, bool)
    )
    delta = float(cur) - float(base) if numeric else None
    moved = base != cur and not (numeric and np.isnan(float(base)) and np.isnan(float(cur)))
    sev = severity
    if moved and worse_if is not None and not worse_if(base, cur):
        sev = "WARN"
    return row(exp, item, kind, base, cur, delta=delta, tol=0.0, tol_source="bit-exact", moved=moved, severity=sev)


def tensor_md5(t: torch.Tensor) -> str:
    """md5 over dtype, shape and raw bytes (so equal hashes mean bit-identical tensors)."""
    t = t.detach().cpu().contiguous()
    h = hashlib.md5(f"{t.dtype}:{tuple(t.shape)}:".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


#: Which way a bit-exact value is worse, by declared direction (``any``: every change; ``code``: a finding).
_WORSE: dict[str, Callable[[Any, Any], bool]] = {"lower": lambda x, y: y > x, "higher": lambda x, y: y < x}


def tensor_items(exp: str, prefix: str, base: Mapping[str, torch.Tensor], cur: Mapping[str, torch.Tensor]) -> list[Row]:
    """Every tensor of either side, bit-exact by md5 (item ``<prefix>/<name>/md5``)."""
    keys = sorted(set(base) | set(cur))
    return [
        exact(
            exp,
            f"{prefix}/{k}/md5",
            "bit_exact",
            tensor_md5(base[k]) if k in base else MISSING,
            tensor_md5(cur[k]) if k in cur else MISSING,
        )
        for k in keys
    ]


def table_items(
    exp: str,
    prefix: str,
    base: pl.DataFrame,
    cur: pl.DataFrame,
    keys: Sequence[str],
    values: Mapping[str, Direction],
    kind: str = "bit_exact",
) -> list[Row]:
    """Exact comparison of ``values`` columns, rows matched on ``keys`` (item
    ``<prefix>/<key values>/<column>``); ``values[col]`` is the column's declared direction."""
    rows = []

    def index(df: pl.DataFrame) -> dict[tuple, dict[str, Any]]:
        return {tuple(r[k] for k in keys): r for r in df.iter_rows(named=True)}

    b, c = index(base), index(cur)
    for key in sorted(set(b) | set(c), key=lambda k: tuple(str(x) for x in k)):
        name = "/".join(str(x) for x in key)
        for col, better in values.items():
            bv = b[key].get(col) if key in b else MISSING
            cv = c[key].get(col) if key in c else MISSING
            rows.append(
                exact(
                    exp,
                    f"{prefix}/{name}/{col}",
                    kind,
                    bv,
                    cv,
                    worse_if=_WORSE.get(better),
                    severity="WARN" if better == "code" else "ERROR",
                )
            )
    return rows


# --- one comparator per method -----------------------------------------------------------------

#: ``(experiment id, declaration, baseline value, current value, same inputs)`` -> rows. The values
#: are the stored ones, already rewritten by the declaration's ``prepare`` when it has one.
Comparator = Callable[[str, BaselineTable, Any, Any, bool], list[Row]]


def compare_columns(exp: str, table: BaselineTable, base: Any, cur: Any, same_inputs: bool) -> list[Row]:
    """The declared value columns bit-exact, then the ``code`` columns (kind ``code``, WARN)."""
    values = {col: d for col, d in table.columns.items() if d != "code"}
    code = {col: d for col, d in table.columns.items() if d == "code"}
    rows = table_items(exp, table.item_prefix, base, cur, table.keys, values)
    if code:
        rows += table_items(exp, table.item_prefix, base, cur, table.keys, code, kind="code")
    return rows


def compare_tensors(exp: str, table: BaselineTable, base: Any, cur: Any, same_inputs: bool) -> list[Row]:
    return tensor_items(exp, table.item_prefix, base, cur)


def compare_kept(exp: str, table: BaselineTable, base: Any, cur: Any, same_inputs: bool) -> list[Row]:
    """A value promoted for completeness: compared through another table, so nothing here."""
    return []


#: Statistics of a group's per-set values compared by ``distribution`` (over the last axis).
STATS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mean": lambda a: a.mean(axis=-1),
    "p50": lambda a: np.quantile(a, 0.5, axis=-1),
    "p99": lambda a: np.quantile(a, 0.99, axis=-1),
    "max": lambda a: a.max(axis=-1),
}


def bootstrap_tolerance(
    sample: np.ndarray,
    stat: Callable[[np.ndarray], np.ndarray],
    seed: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
    quantile: float = BOOTSTRAP_QUANTILE,
) -> float:
    """How far ``stat`` moves between two independent draws of ``len(sample)`` sets from the
    baseline's own distribution: the ``quantile`` of |stat(a) - stat(b)| over bootstrap pairs."""
    sample = sample[np.isfinite(sample)]
    if sample.size == 0:
        return 0.0
    rng = np.random.default_rng(seed)
    a = sample[rng.integers(0, sample.size, size=(resamples, sample.size))]
    b = sample[rng.integers(0, sample.size, size=(resamples, sample.size))]
    return float(np.quantile(np.abs(stat(a) - stat(b)), quantile))


def _worse_move(direction: Direction, delta: float) -> bool:
    """Whether a statistic's move of ``delta`` is the worse way for a column of ``direction``."""
    if direction == "lower":
        return delta > 0
    if direction == "higher":
        return delta < 0
    return direction == "any" and delta != 0


#: Family-wise level of the groups' paired sign tests when the inputs differ (Holm over column x statistic).
ACROSS_GROUPS_ALPHA = 0.01


def _across_groups(
    exp: str, table_name: str, moves: dict[tuple[str, str], list[int]], directions: Mapping[str, Direction]
) -> list[Row]:
    """Different inputs: per declared column and statistic, the groups whose statistic moved beyond its
    bootstrap tolerance the worse way against those that moved the better way, paired by group: an exact
    sign test, Holm over every column x statistic of the table. ERROR when rejected: the numerics moved
    the worse way across groups, more than a redraw of the inputs explains."""
    from precisionkit.decide import holm, sign_test_counts

    keys = [k for k in moves if directions[k[0]] in ("lower", "higher")]
    if not keys:
        return []
    # a column x statistic where no group moved beyond its tolerance has p-value 1
    tests = [sign_test_counts(moves[k][0], moves[k][1]) for k in keys]
    rejected, adjusted = holm([t.p_value for t in tests], alpha=ACROSS_GROUPS_ALPHA)
    rows = []
    for (col, stat), t, rej, p in zip(keys, tests, rejected, adjusted, strict=True):
        worse, better = t.positive, t.negative
        groups = moves[(col, stat)][2]
        rows.append(
            row(
                exp,
                f"{table_name}/groups_worse_{col}_{stat}",
                "paired",
                0,
                worse,
                delta=float(worse - better),
                tol=None,
                tol_source=f"different inputs: {worse} of {groups} groups moved the worse way beyond their "
                f"bootstrap tolerance, {better} the better way; exact sign test paired by group, Holm p {p:.2g} "
                f"over {len(keys)} column x statistic tests at {ACROSS_GROUPS_ALPHA:g}",
                moved=bool(rej),
                severity="ERROR" if rej else "none",
            )
        )
    return rows


def compare_distribution(exp: str, table: BaselineTable, base: Any, cur: Any, same_inputs: bool) -> list[Row]:
    """Per group of ``table.keys`` and declared column: :data:`STATS` of the per-set values against
    a bootstrap tolerance from the baseline's sets. With ``same_inputs``, a statistic that moved the
    worse way is an ERROR, and each set is also compared with itself (:func:`_same_sets`: ERROR when
    any set moved the worse way). With different inputs, single groups' moves are WARN (many groups,
    no multiplicity control) and the ERROR comes from the groups paired: :func:`_across_groups`."""
    rows = []
    moves: dict[tuple[str, str], list[int]] = {}
    keys = list(table.keys)
    groups = sorted(set(base.select(keys).unique().iter_rows()) | set(cur.select(keys).unique().iter_rows()))
    for group in groups:
        name = "/".join(str(v) for v in group)
        sel = pl.all_horizontal([pl.col(k) == v for k, v in zip(keys, group, strict=True)])
        b = _in_order(base.filter(sel), table.order)
        c = _in_order(cur.filter(sel), table.order)
        for col, direction in table.columns.items():
            if b.height == 0 or c.height == 0:
                rows.append(
                    row(
                        exp,
                        f"{name}/{col}",
                        "statistic",
                        b.height or None,
                        c.height or None,
                        moved=True,
                        severity="WARN" if b.height == 0 else "ERROR",
                        status="not in baseline" if b.height == 0 else "not in current",
                    )
                )
                continue
            stats = _statistics(exp, name, col, direction, b, c)
            for r, stat_name in zip(stats, STATS, strict=True):
                tally = moves.setdefault((col, stat_name), [0, 0, 0])
                tally[2] += 1
                if r["moved"] == "yes" and r["delta"] is not None:
                    tally[0 if _worse_move(direction, r["delta"]) else 1] += 1
                if not same_inputs and r["moved"] == "yes":
                    r["severity"] = "WARN"
            rows += stats
            if same_inputs and b.height == c.height:
                rows += _same_sets(exp, name, col, direction, b[col].to_numpy(), c[col].to_numpy())
    if not same_inputs:
        rows += _across_groups(exp, table.item_prefix, moves, table.columns)
    return rows


def _same_sets(exp: str, name: str, col: str, direction: Direction, b: np.ndarray, c: np.ndarray) -> list[Row]:
    """Same seed, same sets: each set's value is deterministic, so a set that moved the worse way is a
    regression of the code or its numerics (ERROR), whatever the statistics say; sets that moved only
    the better way are a change to look at (WARN)."""
    both_nan = np.isnan(b) & np.isnan(c) if b.dtype.kind == "f" and c.dtype.kind == "f" else np.zeros(len(b), bool)
    changed = (b != c) & ~both_nan
    delta = np.where(changed, c.astype(np.float64) - b.astype(np.float64), 0.0)
    worse = np.array([_worse_move(direction, float(d)) for d in delta]) & changed
    share = float(changed.mean())
    severity = "ERROR" if worse.any() else "WARN"
    return [
        row(
            exp,
            f"{name}/sets_with_changed_{col}",
            "paired",
            0.0,
            share,
            delta=share,
            tol=0.0,
            tol_source=f"same inputs: bit-exact per set ({int(worse.sum())} of {len(b)} sets moved the worse way)",
            moved=share > 0,
            severity=severity,
        )
    ]


def _in_order(df: pl.DataFrame, order: tuple[str, ...]) -> pl.DataFrame:
    """A group's sets in the table's declared order (bootstrap resamples and the same-inputs pairing read it)."""
    return df.sort(list(order)) if order else df


def _statistics(exp: str, name: str, col: str, direction: Direction, b: pl.DataFrame, c: pl.DataFrame) -> list[Row]:
    bv = b[col].to_numpy().astype(float)
    cv = c[col].to_numpy().astype(float)
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
    rows = []
    for stat_name, stat in STATS.items():
        bs, cs = float(stat(bv[np.isfinite(bv)])), float(stat(cv[np.isfinite(cv)]))
        tol = bootstrap_tolerance(bv, stat, seed)
        delta = cs - bs
        rows.append(
            row(
                exp,
                f"{name}/{col}_{stat_name}",
                "statistic",
                bs,
                cs,
                delta=delta,
                tol=tol,
                tol_source=f"bootstrap q{BOOTSTRAP_QUANTILE} of |diff| over {BOOTSTRAP_RESAMPLES} pairs of "
                f"{bv.size}-set resamples of the baseline",
                moved=abs(delta) > tol,
                severity="ERROR" if _worse_move(direction, delta) else "WARN",
            )
        )
    return rows


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


def compare_curves(exp: str, table: BaselineTable, base: Any, cur: Any, same_inputs: bool) -> list[Row]:
    """Per run: with the same inputs on a deterministic device (:func:`curves_exact_reason`), its curves
    bit for bit (:func:`exact_curve_rows`, ERROR on any difference; a run whose recorded seeds differ
    between the sides is left to the band); always, the eval loss at the last common step against the
    noise band (max of the baseline's and the current band there), and how many common eval points fall
    outside the band (WARN)."""
    rows = []
    (band_b, reps_b), (band_c, reps_c) = _band_of(base), _band_of(cur)
    not_exact = curves_exact_reason(base, cur, same_inputs)
    device = ", ".join(sorted(set(_devices(base)) | set(_devices(cur))))
    for run in sorted(set(base["run"].unique().to_list()) | set(cur["run"].unique().to_list())):
        bs, bl = _curve(base, run)
        cs, cl = _curve(cur, run)
        run_not_exact = not_exact
        inputs = _run_inputs(base, run), _run_inputs(cur, run)
        if run_not_exact is None and None not in inputs and inputs[0] != inputs[1]:
            run_not_exact = "this run's recorded seeds differ"
        if run_not_exact is None and bs and cs:
            rows += exact_curve_rows(exp, run, base, cur, device)
        if not bs or not cs:
            rows.append(
                row(
                    exp,
                    f"{run}/final_eval_loss",
                    "curve",
                    bl[-1] if bl else None,
                    cl[-1] if cl else None,
                    moved=True,
                    severity="WARN" if not bs else "ERROR",
                    status="not in baseline" if not bs else "not in current",
                )
            )
            continue
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
            continue
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
                tol_source=f"{exp}'s data-order noise band (spread max - min of {max(reps_b, reps_c)} eager replicates "
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


COMPARATORS: dict[BaselineMethod, Comparator] = {
    "columns": compare_columns,
    "tensors": compare_tensors,
    "distribution": compare_distribution,
    "curves": compare_curves,
    "kept": compare_kept,
}


def compare_tables(exp: Experiment, base: Mapping[str, Any], cur: Mapping[str, Any], same_inputs: bool) -> list[Row]:
    """Every declared baseline table of ``exp``, in declared order, compared by its method.
    ``base`` and ``cur`` hold the stored values by asset name; ``same_inputs``: both were produced
    from the same base seed (per-set pairing applies)."""
    rows: list[Row] = []
    for table in exp.baseline:
        b, c = base[table.asset], cur[table.asset]
        if table.prepare is not None:
            b, c = table.prepare(b), table.prepare(c)
        rows += COMPARATORS[table.method](exp.id, table, b, c, same_inputs)
    return rows
