"""C2: do reduction tilings change the last bits, within the fp64 band?"""

from ...experiment import BaselineTable, Experiment
from . import report, spec


def _load():
    from . import assets, checks

    return (assets, checks)


def _cost():
    from . import cost

    return cost


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Reduction accumulation order",
    group=spec.GROUP,
    slug="reduction-order",
    sections=("1.2-3",),
    load=_load,
    plan_deliverable="version x version output ULP difference matrix and the comparison table with fp64",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(
        BaselineTable("c2_version_outputs", method="tensors"),
        BaselineTable(
            "c2_versions", keys=("version",), columns={"self_deterministic": "higher", "code_sha256": "code"}
        ),
        BaselineTable(
            "c2_error_vs_fp64",
            keys=("version", "output"),
            columns={"ulp_max": "lower", "within_band_fraction": "higher"},
        ),
    ),
    sizes=spec.SIZES,
    short="Reduction order",
    matrix="judged",
    planted={
        "planted_fp16_accumulation": "c2_row_bounds:c2_versions_within_fp64_band",
        "planted_nondeterministic_reduction": "c2_versions:c2_versions_self_deterministic",
        "planted_long_reduction_bf16": "c2_row_bounds:c2_versions_within_fp64_band",
        "planted_thread_partials_bf16": "c2_long_reductions:c2_long_reductions_within_bound",
    },
    fusion=spec.FUSION,
    cost=_cost,
)
