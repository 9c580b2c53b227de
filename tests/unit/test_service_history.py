"""The history predictor LAS may order each queue by (``within: history``, issue 24): the
cluster's own finished jobs of a queue and GPU count, their conditional median."""

from __future__ import annotations

import pytest
from builders import cluster, job, snapshot, spec

from gpufleet.scheduler.framework import make
from gpufleet.scheduler.service_history import ServiceHistory
from gpufleet.scheduler.snapshot import ServiceMark
from gpufleet.scheduler.usage import QueueUsage


def test_the_expected_remaining_service_is_the_median_above_what_a_job_had() -> None:
    h = ServiceHistory(window=10, min_samples=3)
    one = spec("x", gpus=1, queue="a")
    for s in (100.0, 200.0, 300.0, 1000.0, 5000.0):
        h.learn(one, s)
    assert h.remaining(one, 0.0) == 300.0  # median of all five
    assert h.remaining(one, 250.0) == 1000.0 - 250.0  # of 300, 1000, 5000
    assert h.remaining(one, 6000.0) == 6000.0  # past every sample: as long again


def test_the_narrowest_group_with_enough_samples_answers() -> None:
    h = ServiceHistory(window=10, min_samples=2)
    for s in (10.0, 20.0):
        h.learn(spec("x", gpus=1, queue="a"), s)
    for s in (1000.0, 2000.0, 3000.0):
        h.learn(spec("x", gpus=8, queue="b"), s)
    assert h.remaining(spec("x", gpus=1, queue="a"), 0.0) == 20.0
    assert h.remaining(spec("x", gpus=2, queue="a"), 0.0) == 20.0  # the queue's
    assert h.remaining(spec("x", gpus=4, queue="c"), 0.0) == 1000.0  # every job's
    assert ServiceHistory(min_samples=1).remaining(spec("x"), 0.0) is None


def test_the_oldest_sample_is_forgotten_past_the_window() -> None:
    h = ServiceHistory(window=3, min_samples=1)
    one = spec("x", gpus=1)
    for s in (5.0, 100.0, 100.0, 100.0):
        h.learn(one, s)
    assert h.remaining(one, 0.0) == 100.0 and h.remaining(one, 50.0) == 50.0
    with pytest.raises(ValueError):
        ServiceHistory(window=2, min_samples=3)


def test_las_within_history_orders_a_queue_by_expected_remaining_service() -> None:
    """Both level 0: the queue whose jobs ran 100 GPU-s goes before the one whose ran 3,000,
    though submitted later; with no history yet (or ``within: fifo``) submit time decides."""
    las = make("order", "las", {"within": "history", "history_window": 20})
    long_q, short_q = job("long", submit=0, queue="long"), job("short", submit=5, queue="short")
    snap = snapshot(cluster(1, 8), [long_q, short_q], now=10.0)

    def ids() -> list[str]:
        return [p.id for p in las.order(snap.pending, snap, QueueUsage.of(snap))]

    assert ids() == ["long", "short"]
    for _ in range(10):
        las.finished(spec("d", queue="long"), 3000.0)
        las.finished(spec("d", queue="short"), 100.0)
    assert ids() == ["short", "long"]
    with pytest.raises(ValueError):
        make("order", "las", {"within": "sjf"})


def test_las_aged_by_remaining_lets_the_aged_jobs_nearest_done_ahead_within_the_share() -> None:
    """Two aged jobs of 2 GPUs and a share of 2 GPUs (0.25 of 8): by age the older goes ahead;
    by ``remaining`` the one its queue's history expects to end first (10,000 GPU-s left
    against 80,000), the other keeping its level (2, behind the newcomer)."""

    def ids(aged_by: str) -> list[str]:
        opts = {"within": "history", "age_limit_s": 1000.0, "aged_share": 0.25}
        las = make("order", "las", {**opts, "aged_by": aged_by})
        for _ in range(10):
            las.finished(spec("d", gpus=2, queue="long"), 100_000.0)
            las.finished(spec("d", gpus=2, queue="short"), 30_000.0)
        ran = ServiceMark(stopped_at=500.0)
        big = job("big", submit=0, attained=20_000.0, gpus=2, queue="long", mark=ran)
        near = job("near", submit=1, attained=20_000.0, gpus=2, queue="short", mark=ran)
        snap = snapshot(cluster(1, 8), [big, near, job("new", submit=900)], now=1500.0)
        return [p.id for p in las.order(snap.pending, snap, QueueUsage.of(snap))]

    assert ids("age") == ["big", "new", "near"]
    assert ids("remaining") == ["near", "new", "big"]
    with pytest.raises(ValueError):
        make("order", "las", {"aged_by": "size"})


def test_las_aged_slack_ages_a_job_later_by_the_run_time_it_is_expected_to_need() -> None:
    """Its queue's 2-GPU jobs ran 20,000 GPU-s: one that had 10,000 is expected to need 10,000
    more, 5,000 s on its 2 GPUs, so with ``aged_slack`` 1 it ages at 1,000 + 5,000 s, not at
    the age limit; then it goes ahead of the newcomer (level 0) and is kept running."""
    las = make("order", "las", {"within": "history", "age_limit_s": 1000.0, "aged_slack": 1.0})
    for _ in range(10):
        las.finished(spec("d", gpus=2, queue="q"), 20_000.0)
    ran = ServiceMark(stopped_at=500.0)
    p = job("p", submit=0, attained=10_000.0, gpus=2, queue="q", mark=ran)
    assert las.pending_level(p, 5999.0) == 2 and not las.started(p, 5999.0).aged
    assert las.pending_level(p, 6000.0) == 0 and las.started(p, 6000.0).aged

    def ids(now: float) -> list[str]:
        snap = snapshot(cluster(1, 8), [p, job("new", submit=900, queue="q")], now=now)
        return [q.id for q in las.order(snap.pending, snap, QueueUsage.of(snap))]

    assert ids(5999.0) == ["new", "p"] and ids(6000.0) == ["p", "new"]
    with pytest.raises(ValueError):
        make("order", "las", {"aged_slack": -1.0})
