import shutil

import pytest
from _smoke_run import report_from  # tests/ is on sys.path (pytest's rootdir import mode)

from pipeline.experiments import experiment


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The report built from a smoke run of S, C1 and C3 (the other experiments stay not yet run)."""
    return report_from(tmp_path_factory.mktemp("report"), [experiment(e) for e in ("S", "C1", "C3")], strict=True)


@pytest.fixture(scope="session")
def chromium_path():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("Debian's chromium is not installed (make test installs it where apt-get is usable)")
    return path


@pytest.fixture(scope="session")
def full_site(smoke_everything):
    """The report built from a smoke run of every experiment (tests/conftest.py): the pages a reader
    opens, for the browser layout test."""
    return smoke_everything
