"""Slurm's array throttle (``--array=0-9%2``) in the pure Controller: never more than the
limit of an array's tasks run, lower indexes go first, and the others say why they wait."""

from __future__ import annotations

import random

import pytest
from builders import cluster_spec, profile, spec

from gpufleet.core.commands import Launch
from gpufleet.core.controller import Controller, RestoredJob
from gpufleet.core.events import JobCancelled, JobSubmitted, TaskExited, TaskStarted
from gpufleet.model.job import Job, JobState
from gpufleet.model.reason import ReasonCode

S = JobState


def submit_array(c: Controller, now: float, n: int, limit: int, head: int = 1) -> list[str]:
    ids = [str(head + i) for i in range(n)]
    evs = [JobSubmitted(i, spec(i, gpus=1), now, array_id=ids[0], array_limit=limit) for i in ids]
    c.handle(now, *evs)
    return ids


def active(c: Controller, ids: list[str]) -> list[str]:
    return [i for i in ids if c.jobs[i].job.state in (S.STARTING, S.RUNNING)]


def finish(c: Controller, now: float, job_id: str, code: int = 0) -> list:
    a = c.jobs[job_id].job.attempt
    return c.handle(now, TaskStarted(job_id, a, 0), TaskExited(job_id, a, 0, code, ""))


def test_at_most_the_limit_run_and_the_rest_say_why() -> None:
    c = Controller(profile(), cluster_spec(2, 8))  # room for 16: only the limit holds them
    ids = submit_array(c, 0.0, 5, limit=2)
    assert active(c, ids) == ["1", "2"]
    for waiting in ids[2:]:
        r = c.reason(waiting)
        assert r.code is ReasonCode.ARRAY_LIMIT
        assert r.message == (
            "array 1 runs at most 2 of its tasks at once (%2); this one starts when one of "
            "those ends"
        )
    # one ends: the next index (not any other) takes its place, still two at a time
    out = finish(c, 1.0, "1")
    assert [x.job_id for x in out if isinstance(x, Launch)] == ["3"]
    assert active(c, ids) == ["2", "3"]
    t = 2.0
    while active(c, ids):
        finish(c, t, active(c, ids)[0])
        assert len(active(c, ids)) <= 2
        t += 1
    assert [c.jobs[i].job.state for i in ids] == [S.SUCCEEDED] * 5


def test_a_cancelled_waiting_task_moves_the_window_on() -> None:
    c = Controller(profile(), cluster_spec(1, 8))
    ids = submit_array(c, 0.0, 4, limit=1)
    c.handle(1.0, JobCancelled("2", "no longer needed"))
    finish(c, 2.0, "1")
    assert active(c, ids) == ["3"]


def test_arrays_and_plain_jobs_do_not_hold_each_other() -> None:
    c = Controller(profile(), cluster_spec(1, 8))
    a = submit_array(c, 0.0, 3, limit=1, head=1)
    b = submit_array(c, 0.0, 3, limit=2, head=10)
    c.handle(0.0, JobSubmitted("plain", spec("plain", gpus=1), 0.0))
    assert active(c, a) == ["1"] and active(c, b) == ["10", "11"]
    assert c.jobs["plain"].job.state is S.STARTING


def test_a_restored_array_keeps_its_throttle() -> None:
    c = Controller(profile(), cluster_spec(1, 8))
    ids = submit_array(c, 0.0, 4, limit=2)
    restarted = Controller(profile(), cluster_spec(1, 8))
    restarted.restore(
        [],
        [
            RestoredJob(
                Job(i, c.jobs[i].job.spec, 0.0, c.jobs[i].job.state, c.jobs[i].job.attempt),
                c.jobs[i].seq,
                c.jobs[i].allocation,
                array_id="1",
                array_limit=2,
            )
            for i in ids
        ],
    )
    restarted.handle(1.0)
    assert active(restarted, ids) == ["1", "2"]
    assert restarted.reason("3").code is ReasonCode.ARRAY_LIMIT


def test_the_limit_holds_through_failures_retries_and_cancels() -> None:
    rnd = random.Random(7)
    c = Controller(profile(), cluster_spec(2, 8), backoff_base_s=1.0)
    ids = [str(1 + i) for i in range(12)]
    c.handle(
        0.0,
        *(
            JobSubmitted(i, spec(i, gpus=1, retries=1), 0.0, array_id="1", array_limit=3)
            for i in ids
        ),
    )
    t, peak = 0.0, 0
    for _ in range(200):
        t += 1.0
        run = active(c, ids)
        assert len(run) <= 3
        peak = max(peak, len(run))
        if not run:
            c.tick(t + 10)  # past any back-off
            continue
        victim = rnd.choice(run)
        if rnd.random() < 0.2:
            c.handle(t, JobCancelled(victim, "changed my mind"))
            a = c.jobs[victim].job.attempt
            c.handle(t, TaskExited(victim, a, 0, 143, "cancelled"))
        else:
            finish(c, t, victim, code=rnd.choice((0, 0, 1)))
    assert all(c.jobs[i].job.finished for i in ids) and peak == 3


def test_afterok_on_an_arrays_id_waits_for_every_task_as_slurm() -> None:
    """Seen by a new user: ``afterok:ID`` on an array waited for task 0 only."""
    c = Controller(profile(), cluster_spec(1, 8))
    ids = submit_array(c, 0.0, 3, limit=0)
    c.handle(0.0, JobSubmitted("after", spec("after", gpus=1), 0.0, (("afterok", ids[0]),)))
    finish(c, 1.0, ids[0])  # the first task: the array is not done
    assert c.jobs["after"].job.state is S.PENDING
    r = c.reason("after")
    assert r.code is ReasonCode.DEPENDENCY
    assert r.message == "waiting for afterok:1 (2 of 3 array tasks)"
    finish(c, 2.0, ids[2])
    assert c.jobs["after"].job.state is S.PENDING
    out = finish(c, 3.0, ids[1])  # the last one: now it runs
    assert [x.job_id for x in out if isinstance(x, Launch)] == ["after"]


@pytest.mark.parametrize("kill", [False, True])
def test_afterok_on_an_array_can_never_be_met_once_any_task_fails(kill: bool) -> None:
    c = Controller(profile(kill_invalid_depend=kill), cluster_spec(1, 8))
    ids = submit_array(c, 0.0, 3, limit=0)
    c.handle(0.0, JobSubmitted("after", spec("after", gpus=1), 0.0, (("afterok", ids[0]),)))
    c.handle(0.0, JobSubmitted("any", spec("any", gpus=1), 0.0, (("afterany", ids[0]),)))
    finish(c, 1.0, ids[1], code=2)
    rec = c.jobs["after"].job
    why = "dependency afterok:1 (array task 2) ended FAILED"
    if kill:  # --kill-invalid-depend: cancelled at once
        assert rec.state is S.CANCELLED and rec.history[-1][2] == why
    else:  # Slurm's default: it waits until its user cancels it
        assert rec.state is S.PENDING
        r = c.reason("after")
        assert r.code is ReasonCode.DEP_NEVER and r.message == f"{why}: it can never be met"
    assert c.jobs["any"].job.state is S.PENDING  # afterany: still waits for the others
    finish(c, 2.0, ids[0])
    out = finish(c, 3.0, ids[2])
    assert [x.job_id for x in out if isinstance(x, Launch)] == ["any"]
