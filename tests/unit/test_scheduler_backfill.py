"""Step 4, backfill: easy (reservation for the blocked head), none (strict order), greedy."""

from __future__ import annotations

from builders import cluster, cycle, job, node, queue, running, start_of

from gpufleet.model.reason import ReasonCode

NOW = 10.0


def scene(extra_nodes: int = 0):
    """n00: 6 of 8 GPUs busy until t=100; n01: all 8 busy until t=1000. The head needs 8
    GPUs on one node: its earliest start is t=100 on n00, which keeps n00's 2 free GPUs."""
    nodes = cluster(2 + extra_nodes, 8)
    busy = [
        running("r0", ("n00", range(6)), limit=100.0),
        running("r1", ("n01", range(8)), limit=1000.0),
    ]
    return nodes, busy


HEAD = job("head", gpus=8, submit=0)


def test_easy_gives_the_blocked_head_a_reservation_with_an_estimated_start() -> None:
    nodes, busy = scene()
    res = cycle(nodes, [HEAD], busy, now=NOW, backfill="easy")
    assert res.reservation is not None
    assert res.reservation.job_id == "head"
    assert res.reservation.start_time == 100.0
    assert [p.node for p in res.reservation.allocation] == ["n00"]
    r = res.reasons["head"]
    assert r.estimated_start == 100.0
    assert "reserved to start in 1m 30s" in r.message


def test_easy_a_later_short_job_backfills() -> None:
    nodes, busy = scene()
    short = job("short", gpus=2, submit=1, limit=50.0)  # ends at 60, before 100
    res = cycle(nodes, [HEAD, short], busy, now=NOW, backfill="easy")
    assert res.started_ids == ["short"]
    assert res.reservation is not None and res.reservation.start_time == 100.0


def test_easy_a_later_long_job_does_not_delay_the_head() -> None:
    nodes, busy = scene()
    long = job("long", gpus=1, submit=1, limit=500.0)  # would still run at t=100
    nolimit = job("nolimit", gpus=1, submit=2)
    res = cycle(nodes, [HEAD, long, nolimit], busy, now=NOW, backfill="easy")
    assert res.started_ids == []
    for jid in ("long", "nolimit"):
        r = res.reasons[jid]
        assert r.code is ReasonCode.RESERVED
        assert r.data == {"reserved_for": "head"}
        assert "reserved for job head (it starts in 1m 30s)" in r.message


def test_easy_a_long_job_may_use_devices_the_reservation_does_not_need() -> None:
    nodes, busy = scene(extra_nodes=1)
    busy.append(running("r2", ("n02", range(6)), limit=2000.0))  # n02: 2 free, not reserved
    long = job("long", gpus=2, submit=1, limit=500.0)
    res = cycle(nodes, [HEAD, long], busy, now=NOW, backfill="easy")
    assert [p.node for p in start_of(res, "long")] == ["n02"]
    assert res.reservation is not None and res.reservation.start_time == 100.0


def test_easy_the_reservation_counts_jobs_started_earlier_in_the_cycle() -> None:
    """A job started this cycle with a time limit frees its GPUs at now + limit."""
    nodes = [node("n00")]
    first = job("first", gpus=6, submit=0, limit=300.0)
    res = cycle(nodes, [first, job("head", gpus=8, submit=1)], now=NOW, backfill="easy")
    assert res.started_ids == ["first"]
    assert res.reservation is not None and res.reservation.start_time == NOW + 300.0


def test_easy_no_reservation_without_time_limits() -> None:
    """Nothing says when a job without a time limit ends: no estimated start."""
    nodes = [node("n00")]
    busy = [running("forever", ("n00", range(6)))]
    res = cycle(nodes, [HEAD], busy, now=NOW, backfill="easy")
    assert res.reservation is None
    r = res.reasons["head"]
    assert r.estimated_start is None and r.start_bound == ""


def test_none_is_strict_order() -> None:
    nodes, busy = scene()
    short = job("short", gpus=1, submit=1, limit=50.0)
    res = cycle(nodes, [HEAD, short], busy, now=NOW, backfill="none")
    assert res.started_ids == []
    assert res.reservation is None
    r = res.reasons["short"]
    assert r.code is ReasonCode.HELD and r.data == {"blocked_by": "head"}


def test_none_lets_a_job_pass_a_head_held_by_its_own_queue_quota() -> None:
    nodes, busy = scene()
    over = job("over", gpus=1, submit=0, queue="tiny")
    res = cycle(
        nodes,
        [over, job("next", gpus=1, submit=1)],
        busy,
        queues=[queue("tiny", 0.5)],
        now=NOW,
        backfill="none",
    )
    assert res.started_ids == ["next"]


def test_greedy_starts_whatever_fits_and_reserves_nothing() -> None:
    nodes, busy = scene()
    long = job("long", gpus=1, submit=1, limit=500.0)
    nolimit = job("nolimit", gpus=1, submit=2)
    res = cycle(nodes, [HEAD, long, nolimit], busy, now=NOW, backfill="greedy")
    assert res.started_ids == ["long", "nolimit"]
    assert res.reservation is None
    # no reservation, but a plan: n01 frees its 8 GPUs at its job's time limit
    r = res.reasons["head"]
    assert r.estimated_start == 1000.0 and r.start_bound == "planned"


def test_easy_a_long_fractional_job_leaves_reserved_devices_alone() -> None:
    """n00 has a partly used device (300 milli free) and 2 whole free devices, both reserved
    for the head. A long 500-milli job fits only on a reserved device: it must wait."""
    nodes = [node("n00")]
    busy = [
        running("r0", ("n00", range(5)), limit=100.0),
        running("rf", ("n00", [5]), milli=700, limit=100.0),
    ]
    frac = job("frac", milli=500, submit=1, limit=500.0)
    res = cycle(nodes, [HEAD, frac], busy, now=NOW, backfill="easy")
    assert res.reservation is not None and res.reservation.start_time == 100.0
    assert start_of(res, "frac") is None
    assert res.reasons["frac"].code is ReasonCode.RESERVED
    # a short one may
    res = cycle(nodes, [HEAD, job("frac", milli=500, limit=50.0)], busy, now=NOW)
    assert start_of(res, "frac") is not None


def test_easy_a_long_job_does_not_take_the_cpus_the_head_needs() -> None:
    nodes = [node("n00", cpus=112)]
    busy = [running("r0", ("n00", range(6)), limit=100.0)]
    head = job("head", gpus=8, cpus=16, submit=0)
    hog = job("cpu-hog", gpus=0, cpus=100, submit=1, limit=500.0)
    res = cycle(nodes, [head, hog], busy, now=NOW, backfill="easy")
    assert res.reservation is not None and res.reservation.start_time == 100.0
    assert start_of(res, "cpu-hog") is None
