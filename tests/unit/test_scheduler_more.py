"""Backfill with assumed time limits; data locality in the score-every-node plugins."""

from __future__ import annotations

from builders import cycle, job, node, nodes_of, running, start_of

from gpufleet.model.reason import ReasonCode


def test_easy_without_time_limits_reserves_nothing_and_a_long_job_jumps_ahead() -> None:
    busy = [running("r", ("n00", range(6)))]  # no time limit: its end is unknown
    nodes = [node("n00")]
    head = job("head", gpus=8)
    small = job("small", gpus=2, submit=1)  # no limit either
    res = cycle(nodes, [head, small], busy, backfill="easy")
    assert res.reservation is None
    assert start_of(res, "small") is not None  # nothing protects the head


def test_easy_with_an_assumed_limit_reserves_and_holds_a_long_job_back() -> None:
    busy = [running("r", ("n00", range(6)), start=0.0)]
    nodes = [node("n00")]
    head = job("head", gpus=8)
    small = job("small", gpus=2, submit=1)
    res = cycle(
        nodes,
        [head, small],
        busy,
        now=10.0,
        backfill="easy",
        options={"backfill/easy": {"assume_limit_s": 3600.0}},
    )
    assert res.reservation is not None and res.reservation.start_time == 3600.0
    assert start_of(res, "small") is None
    assert res.reasons["small"].code is ReasonCode.RESERVED


def test_an_assumed_limit_lets_a_short_job_backfill() -> None:
    busy = [running("r", ("n00", range(6)), start=0.0)]
    nodes = [node("n00")]
    res = cycle(
        nodes,
        [job("head", gpus=8), job("short", gpus=2, submit=1, limit=60.0)],
        busy,
        now=10.0,
        options={"backfill/easy": {"assume_limit_s": 3600.0}},
    )
    assert start_of(res, "short") is not None  # ends at 70, long before 3600


def test_scored_placement_breaks_ties_towards_the_dataset() -> None:
    nodes = [node("n00"), node("n01", datasets=["imagenet"])]
    for place in ("packing", "dotprod", "fgd"):
        res = cycle(nodes, [job("j", gpus=1, dataset="imagenet")], place=place)
        assert nodes_of(res, "j") == ["n01"], place
