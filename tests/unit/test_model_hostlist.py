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
