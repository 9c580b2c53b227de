"""Step 5, preemption: reclaim (lenders take back lent quota), priority, order (LAS);
never a non-preemptible job; least lost work first; the fewest victims."""

from __future__ import annotations

from builders import cluster, cycle, job, queue, running, start_of

from gpufleet.model.reason import ReasonCode

NOW = 100.0


def victims(res) -> list[str]:
    return [p.job_id for p in res.preemptions]


# ----- reclaim -------------------------------------------------------------------------------


def reclaim_scene():
    """Queues a and b, 8 GPUs of nominal quota each, in one cohort; b holds all 16 GPUs."""
    qs = [queue("a", 8, cohort="c"), queue("b", 8, cohort="c")]
    busy = [
        running("b1", ("n00", range(8)), queue="b", start=0.0),
        running("b2", ("n01", range(8)), queue="b", start=10.0, borrowing=True),
    ]
    return cluster(2, 8), qs, busy


def test_reclaim_a_lender_within_nominal_quota_preempts_the_borrower() -> None:
    nodes, qs, busy = reclaim_scene()
    res = cycle(
        nodes, [job("a1", gpus=8, queue="a")], busy, queues=qs, now=NOW, preempt=["reclaim"]
    )
    assert victims(res) == ["b2"]  # one 8-GPU job is enough; b2 has lost less work
    (p,) = res.preemptions
    assert p.for_job == "a1" and "reclaim" in p.reason and "queue b" in p.reason
    r = res.reasons["a1"]
    assert r.code is ReasonCode.PREEMPTING and r.data == {"victims": ["b2"]}
    assert start_of(res, "a1") is None  # it starts once the victim has stopped


def test_reclaim_needs_the_lender_to_be_within_its_nominal_quota() -> None:
    nodes, qs, busy = reclaim_scene()
    # 16 GPUs for a is beyond its nominal 8: it would borrow, so it may not reclaim
    res = cycle(
        nodes,
        [job("a1", gpus=8, workers=2, queue="a")],
        busy,
        queues=qs,
        now=NOW,
        preempt=["reclaim"],
    )
    assert victims(res) == []


def test_reclaim_never_takes_from_a_queue_within_its_quota_or_outside_the_cohort() -> None:
    qs = [queue("a", 8, cohort="c"), queue("b", 8, cohort="c"), queue("x", 16, cohort="other")]
    busy = [
        running("b1", ("n00", range(8)), queue="b"),  # b at its quota: not borrowing
        running("x1", ("n01", range(8)), queue="x"),
    ]
    res = cycle(
        cluster(2, 8),
        [job("a1", gpus=8, queue="a")],
        busy,
        queues=qs,
        now=NOW,
        preempt=["reclaim"],
    )
    assert victims(res) == []
    assert start_of(res, "a1") is None


def test_reclaim_never_a_non_preemptible_job() -> None:
    nodes, qs, _ = reclaim_scene()
    busy = [
        running("b1", ("n00", range(8)), queue="b", preemptible=False),
        running("b2", ("n01", range(8)), queue="b", borrowing=True, preemptible=False),
    ]
    res = cycle(
        nodes, [job("a1", gpus=8, queue="a")], busy, queues=qs, now=NOW, preempt=["reclaim"]
    )
    assert victims(res) == []


# ----- priority ------------------------------------------------------------------------------


def test_priority_preempts_lower_priority_least_lost_work_first() -> None:
    busy = [
        running("v1", ("n00", range(4)), start=0.0),  # 4 GPUs × 100 s lost
        running("v2", ("n00", [4, 5]), start=50.0),  # 2 × 50
        running("v3", ("n00", [6, 7]), start=90.0),  # 2 × 10
    ]
    res = cycle(cluster(1, 8), [job("hi", gpus=4, priority=5)], busy, now=NOW, preempt=["priority"])
    assert victims(res) == ["v3", "v2"]  # 120 GPU-s lost, not v1's 400
    assert res.preemptions[0].reason == "priority 5 of job hi over 0"
    assert res.reasons["hi"].message == "stopping 2 jobs (v3, v2) to make room"


def test_priority_only_strictly_lower_priorities() -> None:
    busy = [running("same", ("n00", range(8)), priority=5)]
    res = cycle(cluster(1, 8), [job("hi", gpus=8, priority=5)], busy, now=NOW, preempt=["priority"])
    assert victims(res) == []
    busy = [running("lower", ("n00", range(8)), priority=4)]
    res = cycle(cluster(1, 8), [job("hi", gpus=8, priority=5)], busy, now=NOW, preempt=["priority"])
    assert victims(res) == ["lower"]


def test_priority_lowest_priority_goes_before_cheaper_work() -> None:
    busy = [
        running("p1-young", ("n00", range(4)), priority=1, start=99.0),
        running("p0-old", ("n00", range(4, 8)), priority=0, start=0.0),
    ]
    res = cycle(cluster(1, 8), [job("hi", gpus=4, priority=5)], busy, now=NOW, preempt=["priority"])
    assert victims(res) == ["p0-old"]


def test_priority_never_a_non_preemptible_job() -> None:
    busy = [
        running("pinned", ("n00", range(8)), priority=-10, preemptible=False),
    ]
    res = cycle(cluster(1, 8), [job("hi", gpus=8, priority=5)], busy, now=NOW, preempt=["priority"])
    assert victims(res) == []
    assert res.reasons["hi"].code is ReasonCode.RESOURCES


def test_preemption_chooses_the_fewest_victims_it_needs() -> None:
    """Cheapest first takes ``a`` (1 GPU) then ``b`` (4); with ``b`` gone, ``a`` is not
    needed after all and is reprieved. ``c`` cannot be preempted."""
    busy = [
        running("a", ("n00", [0]), start=90.0),
        running("b", ("n00", [1, 2, 3, 4]), start=50.0),
        running("c", ("n00", [5, 6, 7]), start=0.0, preemptible=False),
    ]
    res = cycle(cluster(1, 8), [job("hi", gpus=4, priority=5)], busy, now=NOW, preempt=["priority"])
    assert victims(res) == ["b"]


def test_no_preemption_when_even_every_victim_would_not_make_room() -> None:
    busy = [
        running("low", ("n00", range(4)), priority=0),
        running("high", ("n00", range(4, 8)), priority=9),
    ]
    res = cycle(cluster(1, 8), [job("hi", gpus=8, priority=5)], busy, now=NOW, preempt=["priority"])
    assert victims(res) == []


def test_no_preemption_without_a_preempt_plugin() -> None:
    busy = [running("low", ("n00", range(8)), priority=0)]
    res = cycle(cluster(1, 8), [job("hi", gpus=8, priority=5)], busy, now=NOW)
    assert victims(res) == []


def test_a_victim_is_taken_once_per_cycle() -> None:
    busy = [running("low", ("n00", range(8)), priority=0)]
    pending = [job("hi1", gpus=8, priority=5), job("hi2", gpus=8, priority=5, submit=1)]
    res = cycle(cluster(1, 8), pending, busy, now=NOW, preempt=["priority"])
    assert victims(res) == ["low"]
    assert res.preemptions[0].for_job == "hi1"


# ----- order (LAS) ---------------------------------------------------------------------------


def test_order_preemption_las_a_new_job_preempts_one_past_the_threshold() -> None:
    busy = [
        running("hog", ("n00", range(4)), start=0.0),  # 400 GPU-s at t=100, level 1 at 300
        running("young", ("n00", range(4, 8)), start=95.0),  # 20 GPU-s, level 0
    ]
    res = cycle(
        cluster(1, 8),
        [job("new", gpus=4)],
        busy,
        now=NOW,
        order="las",
        options={"order/las": {"thresholds_gpu_s": [300.0]}},
        preempt=["order"],
    )
    assert victims(res) == ["hog"]
    assert "outranks it in the order" in res.preemptions[0].reason


def test_order_preemption_with_fifo_never_preempts() -> None:
    busy = [running("r", ("n00", range(8)), start=0.0)]
    res = cycle(cluster(1, 8), [job("new", gpus=8)], busy, now=NOW, preempt=["order"])
    assert victims(res) == []
