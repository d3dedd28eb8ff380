import pytest

from pipeline.definitions import build_resources
from pipeline.resources import ExperimentSettings


@pytest.fixture
def smoke_resources(tmp_path):
    """Resources for an in-process smoke materialization writing under a temporary folder."""
    return build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(tmp_path))
