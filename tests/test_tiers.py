"""The test tiers' markers: what tests/conftest.py adds at collection (the xdist group that keeps the
session's smoke run made once under ``make test``'s two workers, and the ``materializes`` tier)."""

import pytest


def test_a_test_that_reads_no_smoke_run_goes_with_its_file(request):
    groups = [m.args[0] for m in request.node.iter_markers("xdist_group")]
    assert groups == ["tests/test_tiers.py"]
    assert not list(request.node.iter_markers("materializes"))
    if hasattr(request.config, "workerinput") and request.config.getvalue("loadgroup"):
        # under make test's workers: pytest-xdist saw the group (it schedules by the suffix it adds)
        assert request.node.nodeid.endswith("@tests/test_tiers.py"), request.node.nodeid


@pytest.fixture
def reads_the_smoke_run(smoke_everything):
    """Stands for any fixture built on the session's smoke run (the site's, B's tables)."""
    return smoke_everything


def test_the_smoke_group_is_given_through_fixtures_too(request):
    """Collected items of this file: one reading the smoke run through a fixture lands in the smoke
    group and the materializes tier (it is not run here: it would make the smoke run)."""
    items = {i.name: i for i in request.session.items if i.fspath == request.node.fspath}
    assert set(items) >= {"test_a_test_that_reads_no_smoke_run_goes_with_its_file", "test_reads_smoke_indirectly"}
    through = items["test_reads_smoke_indirectly"]
    assert [m.args[0] for m in through.iter_markers("xdist_group")] == ["smoke_everything"]
    assert list(through.iter_markers("materializes"))


@pytest.mark.skip(reason="collected for its markers only (test_the_smoke_group_is_given_through_fixtures_too)")
def test_reads_smoke_indirectly(reads_the_smoke_run):
    assert reads_the_smoke_run is not None
