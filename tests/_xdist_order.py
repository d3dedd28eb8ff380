"""The order ``make test`` hands its pytest-xdist groups out in (tests/conftest.py applies it at
collection): costliest first, by a rough cost per test."""

from __future__ import annotations

#: Rough cost of one test for ordering the xdist groups: one that materializes assets or runs the pipeline
#: takes tens of seconds, a browser test several, a unit test a fraction of one.
_COST = {"materializes": 30.0, "browser": 10.0, "slow": 10.0}


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
