"""D: is pure data movement bit-exact between eager and fused?"""

from ...experiment import BaselineTable, Experiment, Reproducers
from . import report, spec


def _load():
    from . import assets, checks

    return (assets, checks)


def _repro_cases():
    from . import repro_cases

    return repro_cases


def _cost():
    from . import cost

    return cost


def _subgraphs():
    from .movement import CATALOGUE

    return tuple(CATALOGUE)


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Pure data movement is bit-exact",
    group=spec.GROUP,
    slug="data-movement",
    sections=("2",),
    load=_load,
    plan_deliverable="check table (subgraph x dtype x shape) and the counterexample list",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(
        BaselineTable(
            "data_movement_check_table",
            keys=("subgraph", "dtype", "shape", "layout"),
            columns={"bit_equal": "higher", "ulp_max": "lower"},
        ),
    ),
    sizes=spec.SIZES,
    short="Data movement",
    matrix="judged",
    planted={
        name: "data_movement_check_table:pure_movement_rows_bit_exact"
        for name in ("planted_off_by_one_ulp", "planted_contiguous_only", "planted_vector_tail")
    },
    # every contradicting row (one per subgraph and dtype) gets a reproducer bisected through Inductor's knobs
    # and the toolchain's flags too: a data-movement fault can sit in generated code
    reproducers=Reproducers(
        table="data_movement_check_table", prefix="d", load=_repro_cases, knobs=True, max_checks=40
    ),
    fusion=spec.FUSION,
    cost=_cost,
    parts=_subgraphs,
)
