"""D's reproducer cases, declared on D's record (``Experiment.reproducers``): the rows of D's check table that
contradict its claim, each as a :class:`precisionkit.repro.Case` on the row's own inputs. The diagnostics
instrument builds them and ``python -m pipeline.cli repros --make d/...`` makes one by hand; neither names D."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl
import torch

from precisionkit import minimize as pk_minimize
from precisionkit.repro import Case, Input

from .assets import input_key, input_seeds
from .movement import CATALOGUE, LAYOUTS
from .spec import repro_id

#: One reproducer per subgraph and dtype (the first contradicting row of each): the other shapes and layouts
#: of a subgraph and dtype are the same fault.
ONE_PER = ("subgraph", "dtype")


def contradictions(table: pl.DataFrame) -> pl.DataFrame:
    """The rows that contradict D's claim: pure data movement the compiler fused, not bit-exact, and not only
    NaN payloads (those D attributes op by op itself)."""
    fused = pl.col("not_fused").is_null() if "not_fused" in table.columns else pl.lit(True)
    return table.filter(
        ~pl.col("has_implicit_computation")
        & ~pl.col("bit_equal")
        & (pl.col("nan_encoding_mismatches") < pl.col("mismatched_elements"))
        & fused
    )


def row_id(row: dict[str, Any]) -> str:
    """The reproducer id of one row of the check table (the one D's page links)."""
    return repro_id(row["subgraph"], row["dtype"], row["shape"], row["layout"])


def row_case(
    row: dict[str, Any], backend: str, device: str = "cpu", derived_seed: Callable[..., int] | None = None
) -> Case:
    """The case of one row of the check table (``shape`` as the table writes it, ``BxSxH``)."""
    shape = tuple(int(d) for d in str(row["shape"]).split("x"))
    return case(row["subgraph"], row["dtype"], shape, row["layout"], backend, device, derived_seed)


#: The rest of a ``d/...`` spec of ``repros --make`` (for messages).
SPEC_FORM = "<subgraph>/<dtype>/<BxSxH>/<layout>"


def spec_case(parts: Sequence[str], backend: str, device: str = "cpu") -> Case | None:
    """The case a ``d/<subgraph>/<dtype>/<BxSxH>/<layout>`` spec names (``parts``: what follows ``d/``), or
    None when the spec does not have that form."""
    if len(parts) != 4:
        return None
    try:
        shape = tuple(int(d) for d in parts[2].split("x"))
    except ValueError:
        raise ValueError(f"shape {parts[2]!r} is not BxSxH (e.g. 4x128x256)") from None
    return case(parts[0], parts[1], shape, parts[3], backend, device=device)


def case(
    subgraph: str,
    dtype: str,
    shape: tuple[int, ...],
    layout: str,
    backend: str = "inductor",
    device: str = "cpu",
    derived_seed: Callable[..., int] | None = None,
) -> Case:
    """A row of D's check table as a case on ``device`` (the run's): the subgraph traced to plain
    code, judged bit for bit against eager, on the row's own inputs: ``x`` and ``y`` from the seeds
    D derives for the row (``derived_seed``: the run's, by default that of a run with the default
    base seed), salted with special values where D salts them (pure graphs: ``y`` then in the row's
    dtype) and drawn as D draws them, so the file reproduces what the check table saw."""
    if subgraph not in CATALOGUE:
        raise ValueError(f"unknown D subgraph {subgraph!r}; known: {', '.join(CATALOGUE)}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown D layout {layout!r}; known: {', '.join(LAYOUTS)}")
    if len(shape) != 3:
        raise ValueError(f"D's activations are [batch, seq, hidden]; got shape {shape}")
    graph = CATALOGUE[subgraph]
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    key = input_key(subgraph, dtype, tuple(shape), layout)
    x_seed, y_seed = input_seeds(key, derived_seed or _default_derived_seed())
    salted = key[3]
    # D draws a salted y in the row's dtype and an unsalted one in fp64, cast to the type the graph reads
    y_dtype = str(graph.y_dtype(torch_dtype)).removeprefix("torch.")
    if salted and y_dtype != dtype:
        raise ValueError(f"D subgraph {subgraph!r} salts y in {dtype} but reads it as {y_dtype}")
    lay, values = "transposed" if layout == "transposed_view" else "contiguous", "specials" if salted else "normal"
    inputs = (
        Input("x", tuple(shape), dtype, x_seed, lay, values=values),
        Input("y", tuple(shape), y_dtype, y_seed, lay, values=values),
    )
    source = pk_minimize.graph_source(torch.fx.symbolic_trace(graph.fn))
    return Case(
        repro_id(subgraph, dtype, "x".join(map(str, shape)), layout),
        source,
        inputs,
        backend=backend,
        rule="bitwise",
        title=f"D: {graph.title} ({dtype}, {'x'.join(map(str, shape))}, {layout}) is not bit-exact",
        origin="D data-movement check table",
        device=device,
    )


def _default_derived_seed() -> Callable[..., int]:
    """The seed derivation of a run with the default base seed (settings' other fields play no part)."""
    from ...resources import ExperimentSettings

    return ExperimentSettings(device="cpu", backend="inductor").derived_seed
