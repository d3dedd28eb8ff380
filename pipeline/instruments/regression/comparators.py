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

Every comparator returns rows of :data:`.rows.COLUMNS`; nothing here names an experiment.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ...experiment import BaselineMethod, BaselineTable, Direction, Experiment
from .curves_compare import compare_curves
from .rows import Row, row
from .rules import BOOTSTRAP_QUANTILE, BOOTSTRAP_RESAMPLES

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
