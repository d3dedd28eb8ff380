"""Fusion evidence as an experiment declares it, and the checks generated from the declarations.

An experiment whose stored tables carry fusion evidence (precisionkit's columns: ``kernel_count``,
``graph_breaks``, ``recompiles``, ``graph_count``, ``fused_library_calls``) declares, per table, which rows
are fused paths (:class:`ExpectedFusion`, on its record). From each declaration one run-validity check is
generated (:func:`fusion_check`), judged by the one rule the experiments share,
:func:`precisionkit.evidence.fusion_defects`: a fused path compiled a graph, generated a kernel, and neither
broke its graph nor recompiled. From each declaration also comes one finding (:func:`precision_check`):
the fused rows its compiler ran in a lower floating precision than the workload's. So a new experiment
gets both by declaring its table, and no experiment writes the rules again.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import polars as pl

from precisionkit.evidence import fusion_defects

from .scalars import as_int
from .verdicts import finding_check, finding_result, validity_check, validity_result


@dataclass(frozen=True)
class ExpectedFusion:
    """One stored table whose rows carry fusion evidence, and which of its rows must show a fused run."""

    table: str  # the asset (a polars table) holding the evidence columns
    names: tuple[str, ...]  # the columns that name a row in the check's messages
    #: ``(column, values)`` pairs: only rows whose column holds one of the values are fused paths (an eager
    #: or control row carries evidence too); empty: every row is one.
    fused_where: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    #: A column that, where it is not null, says why a path was not run on this machine (such rows are
    #: not judged; "" when the table has none).
    not_run: str = ""
    #: A call of a fused library kernel (one attention kernel a pattern rewrite put in) counts as a fused
    #: kernel (:func:`precisionkit.evidence.fusion_defects`).
    library_calls_fuse: bool = False
    #: The column that names a row's workload dtype (``float32``, ...), for the precision check
    #: (:func:`precision_check`), or ``workload_dtype`` where every row has the same one.
    dtype_column: str = "dtype"
    workload_dtype: str = ""

    @property
    def check_name(self) -> str:
        return f"{self.table}_shows_fusion"

    @property
    def precision_check_name(self) -> str:
        return f"{self.table}_computes_in_workload_dtype"

    def precision_problems(self, fused: pl.DataFrame) -> tuple[list[str], int]:
        """One line per fused row (of :meth:`fused_rows`) whose compiler ran a unit in a floating
        precision lower than the row's workload dtype (``precisions`` column, as the compiler's
        adapter reported them), and how many rows had a recorded precision to judge."""
        if "precisions" not in fused.columns:
            return [], 0
        out, judged = [], 0
        for row in fused.iter_rows(named=True):
            dtype = str(row.get(self.dtype_column) or self.workload_dtype or "")
            precisions = [p.strip() for p in str(row.get("precisions") or "").split(",") if p.strip()]
            if not precisions or not dtype:
                continue
            judged += 1
            lower = lower_precisions(precisions, dtype)
            if lower:
                out.append(f"{'/'.join(str(row[c]) for c in self.names)}: {dtype} workload ran in {', '.join(lower)}")
        return out, judged

    def fused_rows(self, table: pl.DataFrame) -> pl.DataFrame:
        """The rows that must show a fused run."""
        missing = [c for c in (*self.names, *(c for c, _ in self.fused_where), self.not_run) if c and c not in table]
        if missing:
            raise ValueError(f"{self.table} has no column {', '.join(missing)} that its fusion declaration names")
        for column, values in self.fused_where:
            table = table.filter(pl.col(column).is_in(list(values)))
        if self.not_run:
            table = table.filter(pl.col(self.not_run).is_null())
        return table

    def problems(self, table: pl.DataFrame) -> list[str]:
        """One line per fused row whose evidence does not show a fused run: its name and what is missing."""
        return self.defects_of(self.fused_rows(table))

    def defects_of(self, fused: pl.DataFrame) -> list[str]:
        """:meth:`problems` of rows already chosen by :meth:`fused_rows`."""
        out = []
        for row in fused.iter_rows(named=True):
            defects = fusion_defects(row, library_calls_fuse=self.library_calls_fuse)
            if defects:
                out.append(f"{'/'.join(str(row[c]) for c in self.names)}: {', '.join(defects.values())}")
        return out


def fusion_check(experiment: str, expected: ExpectedFusion) -> dg.AssetChecksDefinition:
    """The run-validity check generated from ``experiment``'s declaration ``expected``: ERROR naming every
    fused row of the table whose evidence does not show a fused run."""
    which = (
        " and ".join(f"{c} in ({', '.join(map(str, v))})" for c, v in expected.fused_where)
        if expected.fused_where
        else "every row"
    )
    kernel = "a generated kernel" + (" (or a fused library kernel)" if expected.library_calls_fuse else "")
    description = (
        f"Run validity of {experiment}, generated from its declared fusion evidence: {which} of {expected.table}"
        + (f" (rows not run on this machine, with {expected.not_run} set, aside)" if expected.not_run else "")
        + f" shows a fused run: a compiled graph, {kernel}, no graph break, no recompile."
    )

    def check(*args: Any, **kwargs: Any) -> dg.AssetCheckResult:
        table: pl.DataFrame = args[0] if args else kwargs[expected.table]
        fused = expected.fused_rows(table)
        problems = expected.defects_of(fused)
        kernels = as_int(fused["kernel_count"].min(), "kernel_count") if "kernel_count" in fused and fused.height else 0
        return validity_result(
            problems,
            {
                "fused_rows": fused.height,
                "rows_not_fused": len(problems),
                "min_kernel_count": kernels,
                "declared_by": experiment,
            },
        )

    check.__name__ = expected.check_name
    # Dagster hands the checked table to the parameter named after the asset
    check.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(expected.table, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    )
    return validity_check(asset=expected.table, name=expected.check_name, description=description)(check)


def precision_check(experiment: str, expected: ExpectedFusion) -> dg.AssetChecksDefinition:
    """The finding "the fused path computed below the workload's dtype", generated from ``experiment``'s
    declaration ``expected``: it names every fused row whose compiler ran a unit in a floating precision
    lower than the row's workload dtype (OpenVINO runs an fp32 MatMul in bf16 on a CPU with bf16
    instructions unless told ``INFERENCE_PRECISION_HINT=f32``). It is a finding, not a validity check:
    such a row is still that compiler's fused result for the workload, so its claims are judged as
    they stand (a bf16 MatMul shows up in the accuracy verdicts through the rules) and this finding,
    shown beside them, says why. Rows whose compiler reports no precision (Inductor) are not judged;
    the count of those judged is in the result."""
    description = (
        f"Finding of {experiment}: the fused rows of {expected.table} whose compiler ran a unit of the "
        "compiled program in a floating precision lower than the row's workload dtype, as the compiler "
        "reports the precision of each unit (rows whose compiler reports none are not judged). Their "
        "claims are judged as they stand; this says why such a row's error is a lower precision's."
    )

    def check(*args: Any, **kwargs: Any) -> dg.AssetCheckResult:
        table: pl.DataFrame = args[0] if args else kwargs[expected.table]
        fused = expected.fused_rows(table)
        problems, judged = expected.precision_problems(fused)
        return finding_result(
            problems,
            {
                "fused_rows": fused.height,
                "rows_with_precisions": judged,
                "rows_in_lower_precision": len(problems),
                "declared_by": experiment,
            },
        )

    check.__name__ = expected.precision_check_name
    check.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(expected.table, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    )
    return finding_check(asset=expected.table, name=expected.precision_check_name, description=description)(check)


def _eps(name: str) -> float | None:
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        return None
    return float(torch.finfo(dtype).eps)


def lower_precisions(precisions: Sequence[str], dtype: str) -> list[str]:
    """The floating precisions among ``precisions`` (torch dtype names) coarser than ``dtype``'s
    (larger machine epsilon); integer and unknown names are not precisions of the arithmetic.

    >>> lower_precisions(["float32", "bfloat16", "int64"], "float32")
    ['bfloat16']
    >>> lower_precisions(["float32"], "float16")
    []
    """
    own = _eps(dtype)
    if own is None:
        return []
    return [p for p in precisions if (eps := _eps(p)) is not None and eps > own]
