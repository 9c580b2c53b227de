"""Slurm's -C feature expressions: what is read, what each node must have, what is refused."""

from __future__ import annotations

import pytest

from gpufleet.model.constraint import parse
from gpufleet.model.job import JobSpec


def f(*names: str) -> frozenset[str]:
    return frozenset(names)


@pytest.mark.parametrize(
    ("text", "node", "holds"),
    [
        ("ib", f("ib"), True),
        ("ib", f("eth"), False),
        ("ib&nvme", f("ib", "nvme"), True),
        ("ib&nvme", f("ib"), False),
        ("ib|eth", f("eth"), True),
        ("a|b&c", f("b"), False),  # & binds tighter: a|(b&c)
        ("a|b&c", f("b", "c"), True),
        ("(a|b)&c", f("b", "c"), True),
        ("(a|b)&c", f("a"), False),
        ("[ib|eth]", f("eth"), True),
        ("[ib|eth]&gpu", f("ib"), False),
        ("gmem48", f("gmem48", "a40"), True),
    ],
)
def test_what_a_node_must_have(text: str, node: frozenset[str], holds: bool) -> None:
    assert parse(text).holds(node) is holds


def test_a_matching_or_gives_one_plain_choice_each() -> None:
    c = parse("[rack1|rack2|rack3]&ib")
    assert [x.text() for x in c.choices()] == ["ib&rack1", "ib&rack2", "ib&rack3"]
    assert [x.text() for x in parse("a|b").choices()] == ["a|b"]
    assert parse(" a & b ").text() == "a&b"  # spaces around operators are read through


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("ib*2", "node counts"),
        ("[a*2&b*1]", "node counts"),
        ("[a|b]|c", "matching OR"),
        ("[a|b]&[c|d]", "matching OR"),
        ("(a&[b|c])|d", "matching OR"),
        ("a&&b", "expected a feature name"),
        ("a|", "ends where a feature name was expected"),
        ("", "names no feature"),
        ("(a|b", "')'"),
        ("[a&b]", "only names joined by |"),
        ("a,b", "','"),
        ("a!b", "'!'"),
        ("a;b", "unexpected character"),
        ("x" * 1025, "at most 1024"),
    ],
)
def test_what_is_refused_says_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=None) as e:
        parse(text)
    assert why in str(e.value), str(e.value)


def test_a_spec_reports_every_allocation_problem_at_once() -> None:
    with pytest.raises(Exception) as e:
        JobSpec.from_dict(
            {
                "name": "j",
                "user": "u",
                "nodelist": "n[1-3]",
                "exclude": "n[0-1],x[1-0]",
                "constraint": "ib*2",
            }
        )
    msg = str(e.value)
    for part in ("names 3 nodes but the job has 1", "runs backwards", "node counts"):
        assert part in msg, msg


def test_hostlists_are_expanded_and_bounded() -> None:
    s = JobSpec.from_dict(
        {"name": "j", "user": "u", "workers": 4, "nodelist": ["gpu-[01-03]", "login"]}
    )
    assert s.nodelist == ("gpu-01", "gpu-02", "gpu-03", "login")
    with pytest.raises(Exception, match="more than"):
        JobSpec.from_dict({"name": "j", "user": "u", "exclude": "n[0-999999999]"})


def test_one_worker_per_node_cannot_be_one_node() -> None:
    with pytest.raises(Exception, match="cannot keep 2 workers under one node"):
        JobSpec.from_dict(
            {"name": "j", "user": "u", "workers": 2, "distinct_nodes": True,
             "topology": {"level": "node", "required": True}}
        )  # fmt: skip
