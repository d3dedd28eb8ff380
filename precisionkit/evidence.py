"""Fusion evidence as table rows, and the one rule for what evidence shows a fused run.

:func:`evidence_fields` turns a :class:`~precisionkit.paths.FusionEvidence` into the columns of a
table row or the entries of run metadata (its :meth:`~precisionkit.paths.FusionEvidence.as_metadata`
view: names joined into strings, options as ``k=v``). :func:`fusion_defects` says what keeps a
record of that evidence (the evidence itself, its metadata view, or a stored row with its columns)
from showing a fused run: no compiled graph, no generated kernel, a graph break or a recompile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .paths import FusionEvidence

#: The kinds of defect :func:`fusion_defects` reports, in the order it checks them.
NO_GRAPH, NO_KERNEL, GRAPH_BREAK, RECOMPILE = "no graph", "no kernel", "graph break", "recompile"


def evidence_fields(evidence: FusionEvidence, keys: Iterable[str] | None = None, prefix: str = "") -> dict[str, Any]:
    """The fields ``keys`` of ``evidence`` (every field when None, in the dataclass's order), as
    :meth:`~precisionkit.paths.FusionEvidence.as_metadata` gives them, each name led by ``prefix``.

    >>> ev = FusionEvidence("inductor", {}, "cpu", 1, 0, 0, 2, ("k0", "k1"), (), "ab12", 0.5)
    >>> evidence_fields(ev, ("kernel_count", "kernel_names"), prefix="fwd_")
    {'fwd_kernel_count': 2, 'fwd_kernel_names': 'k0, k1'}
    """
    fields = evidence.as_metadata()
    names = list(fields) if keys is None else list(keys)
    unknown = [k for k in names if k not in fields]
    if unknown:
        raise KeyError(f"fusion evidence has no field {', '.join(unknown)} (it has {', '.join(fields)})")
    return {prefix + k: fields[k] for k in names}


def _count(record: Mapping[str, Any], key: str) -> int | None:
    value = record.get(key)
    return None if value is None else int(value)


def fusion_defects(record: FusionEvidence | Mapping[str, Any], *, library_calls_fuse: bool = False) -> dict[str, str]:
    """What keeps ``record`` from showing a fused run, by kind (:data:`NO_GRAPH`, :data:`NO_KERNEL`,
    :data:`GRAPH_BREAK`, :data:`RECOMPILE`), each with words for a message; empty when it shows one.

    A fused run compiled at least one graph (checked where the record has ``graph_count``), generated
    at least one kernel (``kernel_count``: the units of compiled code its compiler's adapter reported,
    Inductor's generated kernels; a record without one has none), and neither broke its graph
    (``graph_breaks``) nor recompiled (``recompiles``; a record without them is taken at its word).
    With ``library_calls_fuse``, a call of a fused library kernel (``fused_library_calls``, e.g. one
    attention kernel a pattern rewrite put in) stands in for a generated kernel.

    >>> fusion_defects({"kernel_count": 3, "graph_breaks": 0, "recompiles": 0})
    {}
    >>> fusion_defects({"graph_count": 1, "kernel_count": 0, "graph_breaks": 2, "recompiles": 1})
    {'no kernel': 'no generated kernel', 'graph break': '2 graph break(s)', 'recompile': '1 recompile(s)'}
    """
    fields: Mapping[str, Any] = record.as_metadata() if isinstance(record, FusionEvidence) else record
    out: dict[str, str] = {}
    if _count(fields, "graph_count") == 0:
        out[NO_GRAPH] = "compiled no graph"
    if not _count(fields, "kernel_count") and not (library_calls_fuse and fields.get("fused_library_calls")):
        out[NO_KERNEL] = "no generated kernel"
    breaks, recompiles = _count(fields, "graph_breaks"), _count(fields, "recompiles")
    if breaks:
        out[GRAPH_BREAK] = f"{breaks} graph break(s)"
    if recompiles:
        out[RECOMPILE] = f"{recompiles} recompile(s)"
    return out
