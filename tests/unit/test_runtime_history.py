"""The run-time predictor learned from finished jobs (scheduler/runtime_history.py)."""

from __future__ import annotations

import pytest

from gpufleet.model.job import JobSpec
from gpufleet.scheduler.runtime_history import RuntimeHistory


def spec(
    user: str = "ann", name: str = "train", gpus: int = 1, limit: float | None = None
) -> JobSpec:
    return JobSpec(name=name, user=user, queue="q", gpus_per_worker=gpus, time_limit_s=limit)


def test_nothing_learned_gives_the_limit_or_nothing() -> None:
    h = RuntimeHistory()
    assert h.predict(spec()) is None
    q = h.predict(spec(limit=3600))
    assert q is not None and (q.low, q.mid, q.high, q.basis) == (3600, 3600, 3600, "limit")


def test_quantiles_of_the_most_specific_history_with_enough_samples() -> None:
    h = RuntimeHistory(min_samples=5)
    for run in (100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100):
        h.record(spec(), run)
    for run in (5, 5, 5, 5):  # another user: too few for their own history
        h.record(spec(user="bob"), run)
    q = h.predict(spec())
    assert q is not None and q.basis == "user+name+queue+gpus" and q.samples == 11
    assert (q.low, q.mid, q.high) == pytest.approx((200, 600, 1000))
    bob = h.predict(spec(user="bob"))
    assert bob is not None and bob.basis == "queue+gpus" and bob.samples == 15
    assert h.predict(spec(gpus=8)) is not None  # the queue's history, any GPU count


def test_a_limit_scales_the_fraction_its_peers_used_and_bounds_the_figure() -> None:
    h = RuntimeHistory(min_samples=3)
    for run in (1800, 1800, 1800):  # half of a 1 h limit, each time
        h.record(spec(limit=3600), run)
    q = h.predict(spec(limit=7200))
    assert q is not None and q.mid == pytest.approx(3600)
    h2 = RuntimeHistory(min_samples=3)
    for run in (5000, 6000, 7000):  # no limits: run times, bounded by the new job's limit
        h2.record(spec(), run)
    q2 = h2.predict(spec(limit=5500))
    assert q2 is not None and q2.high == 5500 and q2.low == pytest.approx(5000 * 0.8 + 6000 * 0.2)


def test_a_running_job_is_predicted_from_the_peers_that_ran_longer() -> None:
    h = RuntimeHistory(min_samples=3)
    for run in (10, 20, 30, 1000, 2000, 3000):
        h.record(spec(), run)
    q = h.predict(spec(), ran_s=500)
    assert q is not None and q.samples == 3 and q.mid == pytest.approx(2000)
    assert h.predict(spec(), ran_s=2500) is None  # longer than all but one: nothing to say
    # never less than what it has run already
    q2 = h.predict(spec(), ran_s=15)
    assert q2 is not None and q2.low >= 15


def test_only_the_last_samples_count() -> None:
    h = RuntimeHistory(keep_per_key=3, min_samples=3)
    for run in (1, 1, 1, 100, 100, 100):
        h.record(spec(), run)
    q = h.predict(spec())
    assert q is not None and q.low == 100
