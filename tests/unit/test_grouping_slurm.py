"""The real-Slurm tests' xdist groups come from the fixture they take (support/grouping.py's
ONE_GROUP): a worker's pool gives its Slurms the same ports on every worker, so each kind's
tests must all run on one worker, and a test may not be in two such groups."""

from __future__ import annotations

from typing import Any

import pytest

from support import grouping


class Item:
    """What ``assign_groups`` reads of a pytest item."""

    def __init__(self, *fixtures: str, group: str | None = None) -> None:
        self.fixturenames = list(fixtures)
        self.nodeid = "tests/x.py::t"
        self.marks: list[Any] = [pytest.mark.xdist_group(group).mark] if group else []

    def get_closest_marker(self, name: str) -> Any:
        return next((m for m in self.marks if m.name == name), None)

    def add_marker(self, mark: Any) -> None:
        self.marks.append(mark.mark)


def group(item: Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return mark.args[0] if mark else None


def test_each_kind_of_slurm_test_goes_to_its_group() -> None:
    shared, own = Item("shared_slurm", "slurm_pool"), Item("slurms", "slurm_pool")
    marked = Item("shared_slurm", "slurm_pool", group="slurm-local")
    grouping.assign_groups([shared, own, marked])  # type: ignore[list-item]
    assert (group(shared), group(own), group(marked)) == ("slurm-local", "slurm-own", "slurm-local")


def test_a_test_in_two_slurm_groups_or_another_is_refused() -> None:
    with pytest.raises(pytest.UsageError, match="more than one group"):
        grouping.assign_groups([Item("shared_slurm", "slurms")])  # type: ignore[list-item]
    with pytest.raises(pytest.UsageError, match="must be 'slurm-own'"):
        grouping.assign_groups([Item("slurms", group="elsewhere")])  # type: ignore[list-item]
