"""Step 2 for a job of several queues (Slurm's ``sbatch -p a,b``): admitted under the first
queue that admits it without borrowing, else the first that admits it by borrowing (after the
jobs that fit their own quota), else held by quota with a Reason naming every queue; started
and charged in that queue."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, cycle, job, queue, running, start_of

from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.snapshot import PendingJob


def multi(id: str, queues: tuple[str, ...], **kw: object) -> PendingJob:
    """A pending job that may start in any of ``queues`` (its spec's queue: the first)."""
    p = job(id, queue=queues[0], **kw)  # type: ignore[arg-type]
    return replace(p, spec=replace(p.spec, queues=queues))


def full(q: str, n: int, node0: int = 0) -> list:
    return [running(f"{q}{i}", (f"n{node0 + i:02d}", range(8)), queue=q) for i in range(n)]


def test_it_starts_in_the_first_queue_that_admits_it() -> None:
    qs = [queue("a", 8), queue("b", 8)]
    res = cycle(cluster(4, 8), [multi("j", ("a", "b"), gpus=8)], queues=qs)
    (s,) = res.starts
    assert (s.job_id, s.queue, s.borrowing) == ("j", "a", False)
    # a at its quota: b, whatever the order of the list
    res = cycle(cluster(4, 8), [multi("j", ("a", "b"), gpus=8)], full("a", 1), queues=qs)
    (s,) = res.starts
    assert (s.queue, s.borrowing) == ("b", False)
    # a single queue job's Start names its queue too
    (s,) = cycle(cluster(4, 8), [job("one", gpus=8, queue="b")], queues=qs).starts
    assert s.queue == "b"


def test_the_chosen_queue_is_charged_for_the_rest_of_the_cycle() -> None:
    # j1 takes b's last 8 GPUs (a is full): j2, of b alone, is then held by b's quota
    qs = [queue("a", 8), queue("b", 8)]
    pending = [multi("j1", ("a", "b"), gpus=8, submit=0), job("j2", gpus=8, queue="b", submit=1)]
    res = cycle(cluster(4, 8), pending, full("a", 1), queues=qs)
    assert [(s.job_id, s.queue) for s in res.starts] == [("j1", "b")]
    assert res.reasons["j2"].code is ReasonCode.QUOTA
    assert res.reasons["j2"].message.startswith("queue b uses 8 of 8 GPUs")


def test_one_that_fits_its_own_quota_is_preferred_to_borrowing_in_an_earlier_queue() -> None:
    # a may borrow from its cohort's idle c, b fits its own quota: b, not a by borrowing
    qs = [queue("a", 8, cohort="k"), queue("c", 16, cohort="k"), queue("b", 8)]
    res = cycle(cluster(4, 8), [multi("j", ("a", "b"), gpus=8)], full("a", 1), queues=qs)
    (s,) = res.starts
    assert (s.queue, s.borrowing) == ("b", False)


def test_borrowing_only_when_no_queue_fits_its_own_quota_and_after_those_that_do() -> None:
    # a and b are full; a may borrow c's idle quota (b is in no cohort): a, borrowing, but only
    # after the job of c that fits its own quota has had its turn, though that one came later;
    # it takes c's quota, so nothing is left to lend (3 nodes: no capacity outside the quotas)
    qs = [queue("a", 8, cohort="k"), queue("c", 8, cohort="k"), queue("b", 8)]
    running_ = full("a", 1) + full("b", 1, node0=1)
    pending = [multi("j", ("b", "a"), gpus=8, submit=0), job("own", gpus=8, queue="c", submit=1)]
    res = cycle(cluster(3, 8), pending, running_, queues=qs)
    assert [(s.job_id, s.queue, s.borrowing) for s in res.starts] == [("own", "c", False)]
    r = res.reasons["j"]
    assert r.code is ReasonCode.QUOTA and r.data["queues"] == ["b", "a"]
    # with c idle and nobody else waiting, j borrows in a
    res = cycle(cluster(3, 8), [pending[0]], running_, queues=qs)
    (s,) = res.starts
    assert (s.job_id, s.queue, s.borrowing) == ("j", "a", True)


def test_held_by_quota_with_a_reason_naming_every_queue() -> None:
    qs = [queue("a", 8), queue("b", 8)]
    res = cycle(
        cluster(4, 8), [multi("j", ("a", "b"), gpus=8)], full("a", 1) + full("b", 1, 1), queues=qs
    )
    assert start_of(res, "j") is None
    r = res.reasons["j"]
    assert r.code is ReasonCode.QUOTA
    assert r.message.startswith("none of its queues (a, b) admits it: a: queue a uses 8 of 8")
    assert "; b: queue b uses 8 of 8 GPUs" in r.message
    assert r.data["queues"] == ["a", "b"] and r.data["queue"] == "a"


def test_never_schedulable_only_when_no_queue_could_ever_admit_it() -> None:
    qs = [queue("a", 8), queue("b", 16)]
    res = cycle(cluster(4, 8), [multi("j", ("a", "b"), gpus=8, workers=3)], queues=qs)
    r = res.reasons["j"]
    assert r.code is ReasonCode.NEVER and "a:" in r.message and "b:" in r.message
    # b could hold it later: Quota, not NeverSchedulable
    res = cycle(cluster(4, 8), [multi("j", ("a", "b"), gpus=8, workers=2)], full("b", 1), queues=qs)
    assert res.reasons["j"].code is ReasonCode.QUOTA


def test_an_unlimited_queue_of_the_list_admits_at_once() -> None:
    qs = [queue("a", 8), queue("free")]
    res = cycle(cluster(4, 8), [multi("j", ("a", "free"), gpus=8)], full("a", 1), queues=qs)
    (s,) = res.starts
    assert (s.queue, s.borrowing) == ("free", False)


def test_a_requeued_job_may_start_in_another_of_its_queues() -> None:
    # it last ran in b (its spec's queue); now b is full and a has room: a
    qs = [queue("a", 8), queue("b", 8)]
    again = multi("j", ("a", "b"), gpus=8)
    again = replace(again, spec=replace(again.spec, queue="b"))
    res = cycle(cluster(4, 8), [again], full("b", 1), queues=qs)
    (s,) = res.starts
    assert s.queue == "a"


def test_its_estimated_start_is_the_first_at_which_any_of_its_queues_admits_it() -> None:
    # a is held until 1000, b until 100: the job of a,b should start at 100, in b
    qs = [queue("a", 8), queue("b", 8)]
    held = [
        running("x", ("n00", range(8)), queue="a", limit=1000),
        running("y", ("n01", range(8)), queue="b", limit=100),
    ]
    res = cycle(cluster(3, 8), [multi("j", ("a", "b"), gpus=8, limit=50)], held, queues=qs)
    r = res.reasons["j"]
    assert r.code is ReasonCode.QUOTA and r.estimated_start == 100.0


def test_the_plan_charges_a_job_started_this_cycle_to_the_queue_it_started_in() -> None:
    # j starts in b (a is full) until 50: k, of b, waits for it, though n02 is free now
    qs = [queue("a", 8), queue("b", 8)]
    held = [running("x", ("n00", range(8)), queue="a", limit=1000)]
    pending = [
        multi("j", ("a", "b"), gpus=8, limit=50, submit=0),
        job("k", gpus=8, queue="b", limit=10, submit=1),
    ]
    res = cycle(cluster(3, 8), pending, held, queues=qs)
    assert [(s.job_id, s.queue) for s in res.starts] == [("j", "b")]
    assert res.reasons["k"].code is ReasonCode.QUOTA
    assert res.reasons["k"].estimated_start == 50.0
