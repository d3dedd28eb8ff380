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


def test_reading_the_smoke_run_on_the_run_device_joins_the_smoke_group():
    from _xdist_order import SMOKE_GROUP, xdist_group_of

    assert xdist_group_of("tests/pipeline/test_x.py::test_y", ("tmp_path", "smoke_on_run_device")) == SMOKE_GROUP
    assert xdist_group_of("tests/site/test_x.py::test_y", ["smoke_everything"]) == SMOKE_GROUP
    assert xdist_group_of("tests/pipeline/test_x.py::test_y", ("tmp_path", "smoke_resources")) == (
        "tests/pipeline/test_x.py"
    )


class _Item:
    """A collected item as the ordering sees it: its group and its tier markers."""

    def __init__(self, group: str, *markers: str) -> None:
        self.markers = {
            "xdist_group": pytest.mark.xdist_group(group).mark,
            **{m: getattr(pytest.mark, m).mark for m in markers},
        }
        self.name = f"{group}:{'+'.join(markers) or 'unit'}"

    def get_closest_marker(self, name: str):
        return self.markers.get(name)


def test_groups_are_handed_out_costliest_first_keeping_their_order_inside():
    from _xdist_order import costliest_groups_first, item_cost

    units = [_Item("a.py") for _ in range(40)]  # 40 unit tests: 8
    slow = [_Item("b.py", "materializes"), _Item("b.py")]  # one materializing test: 30.2
    browser = [_Item("c.py", "browser"), _Item("c.py", "browser", "materializes")]  # 10 + 30
    assert [item_cost(i) for i in (units[0], slow[0], browser[0], browser[1])] == [0.2, 30.0, 10.0, 30.0]
    ordered = costliest_groups_first([*units, *slow, *browser])
    assert [i.name for i in ordered[:4]] == [
        "c.py:browser",
        "c.py:browser+materializes",
        "b.py:materializes",
        "b.py:unit",
    ]
    assert ordered[4:] == units
    # The session's real order: every group's items stay together.
    groups = [i.get_closest_marker("xdist_group").args[0] for i in ordered]
    assert groups == sorted(groups, key=groups.index)
