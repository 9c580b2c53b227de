"""Estimated starts: every pending job that can start gets one, from the running jobs' time
limits, the reservation and the quota its queue will have then; and how sure it is."""

from __future__ import annotations

import math

from builders import cluster, cycle, job, queue, running

from gpufleet.model.reason import ReasonCode


def test_a_quota_wait_is_estimated_from_when_its_queue_has_room() -> None:
    """n02 is idle now, but queue a (16, no cohort) holds 16: the job starts when a0 ends."""
    busy = [
        running("a0", ("n00", range(8)), queue="a", limit=100.0),
        running("a1", ("n01", range(8)), queue="a", limit=200.0),
    ]
    res = cycle(
        cluster(3, 8), [job("j", gpus=8, queue="a", limit=50.0)], busy, queues=[queue("a", 16)]
    )
    r = res.reasons["j"]
    assert r.code is ReasonCode.QUOTA
    assert r.estimated_start == 100.0 and r.start_bound == "planned"


def test_a_borrower_is_estimated_from_when_the_cohort_has_idle_quota_not_lent() -> None:
    """The issue's demo, full: vision 24 of 16 (8 borrowed from nlp), nlp 8 of 16. At t=100
    v0 ends: vision holds 16 and nlp's 8 idle are no longer lent, so the job may borrow them."""
    qs = [queue("vision", 16, cohort="research"), queue("nlp", 16, cohort="research")]
    busy = [
        running("v0", ("n00", range(8)), queue="vision", limit=100.0),
        running("v1", ("n01", range(8)), queue="vision", limit=200.0),
        running("v2", ("n02", range(8)), queue="vision", limit=300.0, borrowing=True),
        running("n0", ("n03", range(8)), queue="nlp", limit=400.0),
    ]
    pending = [job("j", gpus=8, queue="vision", limit=50.0), job("k", gpus=8, queue="vision")]
    res = cycle(cluster(4, 8), pending, busy, queues=qs, order="fifo")
    j, k = res.reasons["j"], res.reasons["k"]
    assert j.code is ReasonCode.QUOTA
    assert j.estimated_start == 100.0 and j.start_bound == "planned"
    # k is planned after j: from 100 to 150 j takes the loan; at 150 it is free again
    assert k.estimated_start == 150.0


def test_jobs_behind_the_reserved_head_are_planned_after_it() -> None:
    busy = [running("r", ("n00", range(8)), limit=100.0)]
    pending = [job(x, gpus=8, submit=i, limit=50.0) for i, x in enumerate("abc")]
    res = cycle(cluster(1, 8), pending, busy, backfill="easy")
    a, b, c = (res.reasons[x] for x in "abc")
    assert (a.estimated_start, a.start_bound) == (100.0, "reserved")
    assert (b.estimated_start, b.start_bound) == (150.0, "planned")
    assert (c.estimated_start, c.start_bound) == (200.0, "planned")


def test_an_estimate_for_every_job_that_can_start_and_none_for_the_others() -> None:
    """n00 is held for ever (no time limit), n01 until t=100: a one-node job is planned at 100;
    a two-node job waits for n00, which nothing says will free; one too large for the cluster,
    or waiting on another job, has none either; nor has a quota wait on a job without limit."""
    busy = [
        running("r0", ("n00", range(8))),
        running("r1", ("n01", range(8)), limit=100.0),
        running("q0", ("n02", range(8)), queue="q"),
    ]
    pending = [
        job("one", gpus=8, limit=50.0),
        job("two", gpus=8, workers=2, submit=1),
        job("huge", gpus=8, workers=4, submit=2),
        job("dep", gpus=1, submit=3, waiting_for="waits for job x"),
        job("quota", gpus=8, queue="q", submit=4),
    ]
    res = cycle(cluster(3, 8), pending, busy, queues=[queue("q", 8)])
    one = res.reasons["one"]
    assert one.estimated_start == 100.0 and one.start_bound == "reserved"
    for job_id in ("two", "huge", "dep", "quota"):
        r = res.reasons[job_id]
        assert r.estimated_start is None and r.start_bound == "", (job_id, r)
    assert res.reasons["huge"].code is ReasonCode.NEVER
    assert res.reasons["dep"].code is ReasonCode.DEPENDENCY


def test_fair_share_is_played_forward_queues_taking_turns_as_their_usage_moves() -> None:
    """Four GPUs held by queue c until 100, 200, 300, 400. a and b are both idle: a goes first
    (the tie), and once a1 runs, a's share is above b's: b1 is next; then both run one job, but
    a has run its for longer (its past usage is larger): b2 is next, then a2. A plan ordered
    once, on the usage of the cycle, would run a's whole backlog first."""
    busy = [running(f"c{i}", ("n00", [i]), queue="c", limit=100.0 * (i + 1)) for i in range(4)]
    pending = [
        job("a1", submit=0, queue="a", limit=1000.0),
        job("a2", submit=1, queue="a", limit=1000.0),
        job("b1", submit=2, queue="b", limit=1000.0),
        job("b2", submit=3, queue="b", limit=1000.0),
    ]
    res = cycle(cluster(1, 4), pending, busy, order="fairshare")
    starts = {x: res.reasons[x].estimated_start for x in ("a1", "b1", "a2", "b2")}
    assert starts == {"a1": 100.0, "b1": 200.0, "b2": 300.0, "a2": 400.0}


def test_a_short_job_deep_in_the_queue_backfills_ahead_of_a_blocked_head() -> None:
    """A 4-GPU head waits for all four GPUs (free at 400); a 1-GPU job of 50 s, behind it and
    behind jobs too long to fit before 400, starts at 100 where a GPU frees, as EASY would."""
    busy = [running(f"c{i}", ("n00", [i]), limit=100.0 * (i + 1)) for i in range(4)]
    pending = [
        job("head", submit=0, gpus=4, limit=1000.0),
        *(job(f"long{i}", submit=1 + i, limit=5000.0) for i in range(3)),
        job("short", submit=9, limit=50.0),
    ]
    res = cycle(cluster(1, 4), pending, busy, order="fifo", backfill="easy")
    assert res.reasons["head"].estimated_start == 400.0
    assert res.reasons["short"].estimated_start == 100.0
    assert res.reasons["long0"].estimated_start == 1400.0


def test_fair_share_counts_the_usage_the_plan_accrues_as_it_runs() -> None:
    """Queue a holds 2 of 4 GPUs until 200,000 s (share 0.5, no past); b runs nothing but has a
    past of 0.6. On the cycle's shares a goes first: a1 holds the reservation at 100,000 s,
    where c's 2 GPUs free. When a1 ends, a has accrued what it ran (0.5 → 0.55) and b's past
    has decayed (0.6 → 0.53), as the core's ledger would have them then: b1 is next, not a2."""
    tau = 7 * 86400.0 / math.log(2)  # fair share's default half-life, as a mean life
    busy = [
        running("a0", ("n00", [0, 1]), queue="a", limit=200_000.0),
        running("c0", ("n00", [2, 3]), queue="c", limit=100_000.0),
    ]
    pending = [
        job("a1", submit=0, queue="a", gpus=2, limit=1000.0),
        job("a2", submit=1, queue="a", gpus=2, limit=1000.0),
        job("b1", submit=2, queue="b", gpus=2, limit=1000.0),
    ]
    res = cycle(cluster(1, 4), pending, busy, order="fairshare", usage={"b": 0.6 * tau})
    starts = {x: res.reasons[x].estimated_start for x in ("a1", "a2", "b1")}
    assert starts == {"a1": 100_000.0, "b1": 101_000.0, "a2": 102_000.0}
