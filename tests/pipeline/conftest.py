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


@pytest.fixture(scope="session")
def smoke_on_run_device(request, tmp_path_factory):
    """The session's smoke run of every experiment but the planted-bug suite on the device named by
    ``FUSION_DEVICE``: on the cpu it is ``smoke_everything`` itself (tests/conftest.py, made once for the
    site's tests and these); on an accelerator (``make test-cuda``) a run of its own there. Experiments'
    smoke tests read their part of it (``_smoke_run.RunPart``) instead of materializing it again."""
    if run_device() == "cpu":
        return request.getfixturevalue("smoke_everything")
    from _smoke_run import smoke_report

    return smoke_report(tmp_path_factory.mktemp("device-report"), run_device())
