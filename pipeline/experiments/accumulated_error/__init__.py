"""B: is fused accumulated error no worse than eager"s against fp64?"""

from ...experiment import BaselineTable, Experiment
from . import report, spec


def _load():
    from . import assets, checks

    return (assets, checks)


def _cost():
    from . import cost

    return cost


def _chains():
    from ...workloads import CHAINS

    return CHAINS


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Eager vs fused accumulated error",
    group=spec.GROUP,
    slug="accumulated-error",
    sections=("3.2", "6.1"),
    load=_load,
    plan_deliverable="one summary-table row and one error-distribution comparison chart per operator chain",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(
        BaselineTable(
            "accumulated_error_per_set",
            method="distribution",
            keys=("chain", "dtype", "path"),
            order=("distribution", "set_index"),
            columns={"ulp_max": "lower"},
        ),
        BaselineTable("accumulated_error_summary", method="kept"),
    ),
    short="Accumulated error",
    matrix="judged",
    planted={
        name: "accumulated_error_summary:fused_not_worse_than_eager_"
        for name in ("planted_drop_channel", "planted_wrong_axis", "planted_layout_swap", "planted_bf16_scratch")
    }
    | {"planted_attention_mask_dropped": "accumulated_error_summary:fused_not_worse_than_eager_attention_masked"},
    fusion=spec.FUSION,
    cost=_cost,
    parts=_chains,
)
