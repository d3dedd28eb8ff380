"""The groups ``make test`` hands its tests out to pytest-xdist in, and their order (tests/conftest.py applies
both at collection): costliest first, by a rough cost per test."""

from __future__ import annotations

#: Rough cost of one test for ordering the xdist groups: one that materializes assets or runs the pipeline
#: takes tens of seconds, a browser test several, a unit test a fraction of one.
_COST = {"materializes": 30.0, "browser": 10.0, "slow": 10.0}


#: With ``pytest -n 2 --dist loadgroup`` (``make test``), the tests that read the session's smoke run go to
#: one worker together, so it is made once; every other test goes with the rest of its file, so a module's
#: fixtures are built once too.
SMOKE_GROUP = "smoke_everything"
#: The fixtures that are the session's smoke run (``smoke_on_run_device`` is it on the cpu: tests/pipeline/conftest.py).
SMOKE_FIXTURES = ("smoke_everything", "smoke_on_run_device")


def xdist_group_of(nodeid: str, fixture_names: list[str] | tuple[str, ...]) -> str:
    """The xdist group of a test: :data:`SMOKE_GROUP` when it reads the session's smoke run (directly or
    through a fixture), else its file."""
    return SMOKE_GROUP if any(f in fixture_names for f in SMOKE_FIXTURES) else nodeid.split("::")[0]


def item_cost(item) -> float:
    return max((c for name, c in _COST.items() if item.get_closest_marker(name)), default=0.2)


def costliest_groups_first(items: list) -> list:
    """The items with their xdist groups in order of estimated cost, costliest first (a group's order
    inside is kept). ``make test`` passes ``--no-loadscope-reorder`` so pytest-xdist hands groups out in
    this order: a long group started last would leave one worker running alone at the end."""
    cost: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        group = item.get_closest_marker("xdist_group").args[0]
        cost[group] = cost.get(group, 0.0) + item_cost(item)
        first.setdefault(group, i)
    return sorted(
        items,
        key=lambda item: (
            -cost[g := item.get_closest_marker("xdist_group").args[0]],
            first[g],
        ),
    )
