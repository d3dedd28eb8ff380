"""precisionkit.evidence: fusion evidence as row fields, and the one rule for a fused run."""

from __future__ import annotations

import pytest

from precisionkit.evidence import GRAPH_BREAK, NO_GRAPH, NO_KERNEL, RECOMPILE, evidence_fields, fusion_defects
from precisionkit.paths import FusionEvidence


def _evidence(**changes) -> FusionEvidence:
    fields = dict(
        backend="inductor",
        options={"max_autotune": False},
        device="cpu",
        graph_count=1,
        graph_breaks=0,
        recompiles=0,
        kernel_count=2,
        kernel_names=("k0", "k1"),
        extern_calls=("mm",),
        code_sha256="ab" * 32,
        compile_seconds=1.5,
    )
    return FusionEvidence(**(fields | changes))


def test_fields_follow_the_metadata_view_in_the_order_asked():
    ev = _evidence()
    assert evidence_fields(ev) == ev.as_metadata()
    picked = evidence_fields(ev, ("kernel_names", "graph_count", "options"), prefix="train_")
    assert list(picked.items()) == [
        ("train_kernel_names", "k0, k1"),
        ("train_graph_count", 1),
        ("train_options", "max_autotune=False"),
    ]
    with pytest.raises(KeyError, match="no field kernels"):
        evidence_fields(ev, ("kernels",))


def test_defects_of_evidence_rows_and_metadata_agree():
    assert fusion_defects(_evidence()) == {}
    broken = _evidence(graph_breaks=2, recompiles=1, kernel_count=0, kernel_names=())
    expected = {NO_KERNEL: "no generated kernel", GRAPH_BREAK: "2 graph break(s)", RECOMPILE: "1 recompile(s)"}
    assert fusion_defects(broken) == expected
    assert fusion_defects(broken.as_metadata()) == expected
    assert fusion_defects(_evidence(graph_count=0, kernel_count=0)) == {
        NO_GRAPH: "compiled no graph",
        NO_KERNEL: "no generated kernel",
    }


def test_a_row_without_a_kernel_count_has_no_kernel_and_library_calls_can_stand_in():
    assert fusion_defects({"graph_breaks": 0, "recompiles": 0}) == {NO_KERNEL: "no generated kernel"}
    library = {"kernel_count": 0, "graph_breaks": 0, "recompiles": 0, "fused_library_calls": "sdpa"}
    assert NO_KERNEL in fusion_defects(library)
    assert fusion_defects(library, library_calls_fuse=True) == {}
    assert NO_KERNEL in fusion_defects({**library, "fused_library_calls": ""}, library_calls_fuse=True)
