"""The history predictor LAS may order each queue by (``within: history``, issue 24): the
cluster's own finished jobs of the narrowest group with enough of them (the user's runs of
the same name and GPU count, the user's of the queue and GPU count, the queue's, every job's),
their conditional median."""

from __future__ import annotations

from typing import Any

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


def test_a_users_own_jobs_answer_before_the_queues() -> None:
    """Two users of one queue and GPU count: alice's jobs ran 100 GPU-s, bob's 100,000; the
    queue's median (either) would tell them apart from neither."""
    h = ServiceHistory(window=50, min_samples=10)
    for i in range(10):
        h.learn(spec(f"a{i}", user="alice"), 100.0)
        h.learn(spec(f"b{i}", user="bob"), 100_000.0)
    assert h.remaining(spec("new", user="alice"), 0.0) == 100.0
    assert h.remaining(spec("new", user="bob"), 0.0) == 100_000.0
    # a user with too few of them: the queue's (its median of the 20: the upper middle one)
    assert h.remaining(spec("new", user="carol"), 0.0) == 100_000.0


def test_a_script_run_again_is_predicted_from_its_own_runs_after_a_few() -> None:
    """alice's ten other jobs ran 100 GPU-s; her ``train.sh`` on 8 GPUs ran 80,000 each time:
    after two runs it is still taken for one of hers, after three for itself. A name of its
    own every time (Philly's job ids) never gets there: the user's and queue's groups answer."""
    h = ServiceHistory(window=50, min_samples=10, name_min_samples=3)
    for i in range(10):
        h.learn(spec(f"other-{i}", gpus=8), 100.0)
    train = spec("train.sh", gpus=8)
    h.learn(train, 80_000.0)
    h.learn(train, 80_000.0)
    assert h.remaining(train, 0.0) == 100.0  # 12 of alice's 8-GPU jobs: the median is 100
    h.learn(train, 80_000.0)
    assert h.remaining(train, 0.0) == 80_000.0
    assert h.remaining(train, 30_000.0) == 50_000.0  # conditional, as for every group
    assert h.remaining(spec("train.sh", gpus=1), 0.0) == 100.0  # its runs had 8: the queue's
    with pytest.raises(ValueError):
        ServiceHistory(window=2, min_samples=1, name_min_samples=3)


def test_the_groups_of_names_kept_are_bounded_the_least_recently_finished_forgotten() -> None:
    h = ServiceHistory(window=10, min_samples=10, name_min_samples=1, keys_kept=2)
    for name, s in (("a", 10.0), ("b", 20.0), ("a", 10.0), ("c", 30.0)):
        h.learn(spec(name, queue=name), s)
    assert h.remaining(spec("a", queue="z"), 0.0) == 10.0  # a finished after b: kept
    assert h.remaining(spec("c", queue="z"), 0.0) == 30.0
    assert h.remaining(spec("b", queue="z"), 0.0) is None  # forgotten; 4 < 10 in the rest


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


def test_las_fifo_slack_ages_a_job_at_what_fifo_would_have_given_it() -> None:
    """``fifo_slack`` 1 on 8 GPUs, 1-GPU jobs of 8,000 GPU-s: ``old`` (had 5,000, 3,000 to go,
    nothing ahead) is due at 0 + 3,000 s; ``new`` (submitted at 100, behind ``old``'s 3,000
    GPU-s, 375 s of the cluster, and 8,000 s of its own) at 100 + 8,375 s. From its deadline
    ``old`` goes ahead of the newcomer; ``aged_slack`` 1 adds its own expected 3,000 s."""

    def make_las(**kw: float) -> Any:
        las = make("order", "las", {"within": "history", "fifo_slack": 1.0, **kw})
        for _ in range(10):
            las.finished(spec("d", queue="q"), 8000.0)
        return las

    ran = ServiceMark(stopped_at=50.0)
    old = job("old", submit=0, attained=5000.0, queue="q", mark=ran)
    new = job("new", submit=100, queue="q")

    def ids(las: Any, now: float) -> list[str]:
        snap = snapshot(cluster(1, 8), [old, new], now=now)
        return [p.id for p in las.order(snap.pending, snap, QueueUsage.of(snap))]

    las = make_las()
    assert ids(las, 2999.0) == ["new", "old"] and ids(las, 3000.0) == ["old", "new"]
    assert not las.aged(new, 8474.0) and las.aged(new, 8475.0)
    slack = make_las(aged_slack=1.0)
    assert ids(slack, 5999.0) == ["new", "old"] and ids(slack, 6000.0) == ["old", "new"]
    with pytest.raises(ValueError):
        make("order", "las", {"fifo_slack": -1.0})


def test_las_fifo_floor_q_makes_a_short_deadline_wait_for_the_recent_jobs_quantile() -> None:
    """Four jobs seen at once have spans of 8,000 to 11,000 s (each one's backlog grows by the
    one before it); a fifth, alone, would have 8,000 s, but the median of the five spans
    (9,000 s) is its floor with ``fifo_floor_q`` 0.5."""

    def deadline_of_late(q: float) -> list[bool]:
        las = make("order", "las", {"within": "history", "fifo_slack": 1.0, "fifo_floor_q": q})
        for _ in range(10):
            las.finished(spec("d"), 8000.0)
        first = snapshot(cluster(1, 8), [job(f"j{i}", seq=i) for i in range(4)], now=0.0)
        list(las.order(first.pending, first, QueueUsage.of(first)))
        late = job("late", submit=50)
        snap = snapshot(cluster(1, 8), [late], now=50.0)
        list(las.order(snap.pending, snap, QueueUsage.of(snap)))
        return [las.aged(late, t) for t in (8049.0, 8050.0, 9049.0, 9050.0)]

    assert deadline_of_late(0.0) == [False, True, True, True]
    assert deadline_of_late(0.5) == [False, False, False, True]
    with pytest.raises(ValueError):
        make("order", "las", {"fifo_floor_q": 1.0})


def test_las_kept_admitted_keeps_running_only_the_aged_jobs_the_share_let_ahead() -> None:
    """Two aged 2-GPU jobs, a share of 2 GPUs: the older is let ahead and kept running once
    started; the other, started from its own level, is kept too by default (``kept: aged``)
    but can be preempted as any job with ``kept: admitted``."""

    def marks(kept: str) -> list[bool]:
        opts = {"age_limit_s": 1000.0, "aged_share": 0.25, "kept": kept}
        las = make("order", "las", opts)
        ran = ServiceMark(stopped_at=500.0)
        a = job("a", submit=0, attained=20_000.0, gpus=2, mark=ran)
        b = job("b", submit=1, attained=20_000.0, gpus=2, mark=ran)
        snap = snapshot(cluster(1, 8), [a, b], now=1500.0)
        list(las.order(snap.pending, snap, QueueUsage.of(snap)))
        return [las.started(a, 1500.0).aged, las.started(b, 1500.0).aged]

    assert marks("aged") == [True, True]
    assert marks("admitted") == [True, False]
    with pytest.raises(ValueError):
        make("order", "las", {"kept": "all"})
