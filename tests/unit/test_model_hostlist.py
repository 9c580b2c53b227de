"""Slurm's hostlist syntax both ways: what ``scontrol show hostlist`` writes and what
``scontrol show hostnames`` reads."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.model.hostlist import compress, expand


def test_expand_ranges_lists_padding_and_plain_names() -> None:
    assert expand("node[01-03,07],login,gpu-9") == [
        "node01",
        "node02",
        "node03",
        "node07",
        "login",
        "gpu-9",
    ]
    assert expand("rack[1-2]-gpu") == ["rack1-gpu", "rack2-gpu"]
    assert expand("n[8-10]") == ["n8", "n9", "n10"]
    assert expand("") == []


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("n[1-", "unclosed"),
        ("n]1[", "unbalanced"),
        ("n[3-1]", "backwards"),
        ("n[a-b]", "not a number"),
        ("n[[1-2]]", "nested"),
        ("a,,b", "empty name"),
        ("n[0-999999999]", "more than"),
    ],
)
def test_expand_refuses_what_slurm_refuses_before_allocating(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        expand(text)


@given(
    st.lists(
        st.tuples(st.sampled_from(["gpu-", "n", "login"]), st.integers(0, 40), st.booleans()),
        max_size=30,
    )
)
def test_compress_then_expand_gives_the_names_back(parts: list[tuple[str, int, bool]]) -> None:
    names = [f"{p}{n:03d}" if pad else f"{p}{n}" for p, n, pad in parts]
    assert expand(compress(names)) == names


# What Slurm 22.05's `scontrol show hostlist NAMES` prints (run against the real Slurm of
# shared/tools/slurm_local.sh): one bracket per prefix, ranges joined across a width only where
# Slurm joins them.
@pytest.mark.parametrize(
    ("names", "slurm"),
    [
        ("gpu-01,gpu-10", "gpu-[01,10]"),
        ("gpu-10,gpu-01", "gpu-[10,01]"),
        ("gpu-09,gpu-10", "gpu-[09-10]"),
        ("n001,n10", "n[001,10]"),
        ("n9,n10", "n[9-10]"),
        ("n1,n01,n2", "n[1,01,2]"),
        ("a1,b1,a2", "a1,b1,a2"),
        ("n098,n099,n100,n1000", "n[098-100,1000]"),
        ("n09,n10,n011", "n[09-10,011]"),
        ("x,n1,n2", "x,n[1-2]"),
    ],
)
def test_compress_as_slurms_scontrol_show_hostlist(names: str, slurm: str) -> None:
    assert compress(names.split(",")) == slurm
    assert expand(slurm) == names.split(",")


def test_a_jobs_node_list_is_in_slurms_order() -> None:
    from gpufleet.model.hostlist import ranged

    assert ranged(["gpu-02", "gpu-01", "gpu-10", "gpu-02"]) == "gpu-[01-02,10]"
    assert ranged(["n10", "n9", "login"]) == "login,n[9-10]"
    assert ranged([]) == ""
