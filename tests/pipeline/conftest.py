import os

import pytest

from pipeline.definitions import build_resources
from pipeline.resources import ExperimentSettings


def run_device() -> str:
    """The device pipeline tests run on: ``FUSION_DEVICE`` (e.g. ``cuda``), cpu when unset."""
    return os.environ.get("FUSION_DEVICE", "cpu")


@pytest.fixture
def smoke_resources(tmp_path):
    """Resources for an in-process smoke materialization writing under a temporary folder, on
    the device named by ``FUSION_DEVICE`` (cpu when unset); tests whose expectations hold on one
    device type only say so and skip elsewhere."""
    return build_resources(ExperimentSettings(profile="smoke", device=run_device()), base_dir=str(tmp_path))
