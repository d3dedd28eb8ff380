"""The rows of a stored table whose fusion evidence does not show a fused run, by
:func:`precisionkit.evidence.fusion_defects` (the one rule the experiments' validity checks share)."""

from __future__ import annotations

import polars as pl

from precisionkit.evidence import fusion_defects


def unfused_rows(table: pl.DataFrame, *kinds: str, library_calls_fuse: bool = False) -> pl.DataFrame:
    """The rows of ``table`` (columns of :class:`precisionkit.FusionEvidence`, e.g. ``kernel_count``,
    ``graph_breaks``, ``recompiles``) with a defect of one of ``kinds`` (any kind when none is named)."""
    mask = [
        any(not kinds or kind in kinds for kind in fusion_defects(row, library_calls_fuse=library_calls_fuse))
        for row in table.iter_rows(named=True)
    ]
    return table.filter(pl.Series(mask, dtype=pl.Boolean))
