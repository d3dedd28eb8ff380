"""Every experiment's smoke materialization on an accelerator (``make test-cuda``).

Runs on ``FUSION_DEVICE`` when that names an accelerator (``cuda:1``, ``xpu``, ``npu``, ``mps``),
else on ``cuda``; skipped with the reason when torch reports no such device here."""

import os

import dagster as dg
import pytest

from pipeline.devices import DeviceError, check_device
from pipeline.reporting.claims import EXPERIMENTS

ACCELERATOR = os.environ.get("FUSION_DEVICE", "cpu")
ACCELERATOR = ACCELERATOR if ACCELERATOR.split(":")[0] not in ("cpu", "auto") else "cuda"


def _device_or_reason() -> tuple[str | None, str]:
    try:
        return str(check_device(ACCELERATOR)), ""
    except DeviceError as exc:
        return None, str(exc)


DEVICE, REASON = _device_or_reason()
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.slow,
    pytest.mark.skipif(DEVICE is None, reason=f"needs an accelerator: {REASON}"),
]


@pytest.mark.parametrize("experiment", [e for e in EXPERIMENTS if e.id != "Regression"], ids=lambda e: e.id)
def test_experiment_smoke_on_accelerator(experiment, tmp_path):
    from pipeline.definitions import build_resources, defs
    from pipeline.resources import ExperimentSettings

    settings = ExperimentSettings(profile="smoke", device=DEVICE)
    keys = [k for a in experiment.assets() for k in a.keys]
    assert keys, f"no assets in experiment {experiment.id}"
    selection = dg.AssetSelection.assets(*keys).upstream().required_multi_asset_neighbors()
    job = dg.define_asset_job(f"smoke_{experiment.group}", selection=selection)
    on_device = dg.Definitions(
        assets=defs.assets,
        asset_checks=defs.asset_checks,
        jobs=[job],
        resources=build_resources(settings, base_dir=str(tmp_path)),
    )
    result = on_device.resolve_job_def(job.name).execute_in_process(
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False
    )
    failed = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert result.success, f"{experiment.id} on {DEVICE}: failed steps {failed}"
    mats = result.get_asset_materialization_events()
    assert {m.asset_key for m in mats} >= set(keys)
    # Every stored result says which device produced it.
    for m in mats:
        meta = m.event_specific_data.materialization.metadata
        assert meta["provenance.device"].value == DEVICE
