"""A submitted job's spec changed (scontrol update, ADR 0076): the pure rules of who may change
what and when (model/job_amend.py), as a real Slurm 22.05 answered (its answers are in
tests/integration/test_update_vs_slurm.py), and the core's keeping of the change: a pending
job's view made again for the next pass, a running job's time limit moved."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster_spec, spec
from test_controller import Harness, moves, of

from gpufleet.core.commands import Launch, SetTimer, Transition
from gpufleet.core.events import JobAmend, TimerFired
from gpufleet.model import job_amend as ja
from gpufleet.model.job import JobState

S = JobState
BASE = replace(spec("a", gpus=1), time_limit_s=600.0)


def kinds(refused: list[ja.Refused]) -> list[tuple[str, str]]:
    return [(r.field, r.kind) for r in refused]


def test_a_user_sets_a_pending_jobs_time_limit_either_way_as_slurm() -> None:
    # uid 1000's job held pending: TimeLimit=5, then 20 then UNLIMITED, each rc 0
    for limit in (300.0, 1200.0, None):
        new, refused = ja.amend(BASE, {"time_limit_s": limit}, pending=True, admin=False)
        assert refused == [] and new.time_limit_s == limit


def test_a_user_only_lowers_a_running_jobs_time_limit() -> None:
    new, refused = ja.amend(BASE, {"time_limit_s": 300.0}, pending=False, admin=False)
    assert refused == [] and new.time_limit_s == 300.0
    for limit in (1800.0, None):  # TimeLimit=30 of a 10-minute job: Access/permission denied
        new, refused = ja.amend(BASE, {"time_limit_s": limit}, pending=False, admin=False)
        assert kinds(refused) == [("time_limit_s", ja.DENIED)] and new is BASE
    new, refused = ja.amend(BASE, {"time_limit_s": 1800.0}, pending=False, admin=True)
    assert refused == [] and new.time_limit_s == 1800.0  # root's TimeLimit=30: rc 0


def test_priority_is_an_admins_alone() -> None:
    _, refused = ja.amend(BASE, {"priority": 5}, pending=True, admin=False)
    assert kinds(refused) == [("priority", ja.DENIED)]
    new, refused = ja.amend(BASE, {"priority": 5}, pending=True, admin=True)
    assert refused == [] and new.priority == 5


def test_a_started_jobs_queue_begin_nodes_and_size_stay() -> None:
    changes = {"queues": ["debug"], "begin_time": 1e9, "exclude": ["n1"], "workers": 2}
    new, refused = ja.amend(BASE, changes, pending=False, admin=True)
    assert new is BASE
    assert kinds(refused) == [
        ("queues", ja.NOT_PENDING),  # Job is no longer pending execution
        ("begin_time", ja.NOT_PENDING),
        ("exclude", ja.NOT_PENDING),
        ("workers", ja.UNSUPPORTED),  # NumNodes=2: Requested operation not supported
    ]


def test_every_problem_at_once_and_nothing_changed() -> None:
    changes = {"priority": 5, "name": "", "time_limit_s": -1.0, "comment": "x", "workers": 0}
    new, refused = ja.amend(BASE, changes, pending=True, admin=False)
    assert new is BASE
    assert sorted(kinds(refused)) == [
        ("comment", ja.INVALID),
        ("name", ja.INVALID),
        ("priority", ja.DENIED),
        ("time_limit_s", ja.INVALID),
        ("workers", ja.INVALID),
    ]


def test_a_pending_job_takes_each_field() -> None:
    changes = {"name": "q", "queues": ["debug", "gpu"], "begin_time": 5e8,
               "nodelist": ["n2"], "exclude": ["n1"], "workers": 2}  # fmt: skip
    new, refused = ja.amend(BASE, changes, pending=True, admin=False)
    assert refused == []
    assert (new.name, new.queue, new.queues) == ("q", "debug", ("debug", "gpu"))
    assert (new.begin_time, new.nodelist, new.exclude, new.workers) == (5e8, ("n2",), ("n1",), 2)
    new, _ = ja.amend(BASE, {"queues": ["debug"], "begin_time": None}, pending=True, admin=False)
    assert (new.queue, new.queues, new.begin_time) == ("debug", (), 0.0)


def test_a_pending_jobs_new_size_is_what_the_next_pass_sees() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "run", gpus=8)
    h.start_all(1.0, "run")
    h.submit(2.0, "a", gpus=8)
    smaller = replace(h.c.jobs["a"].job.spec, gpus_per_worker=4, name="smaller")
    out = h(3.0, JobAmend("a", smaller, "updated by alice"))
    assert moves(out, "a") == [(S.PENDING, S.PENDING)]
    (t,) = of(out, Transition)
    assert t.spec_changed and t.why == "updated by alice"
    assert h.c.jobs["a"].job.spec.name == "smaller"
    out = h.exit(4.0, "run", 0)
    assert [c.job_id for c in of(out, Launch)] == ["a"]
    (launch,) = of(out, Launch)
    assert len(launch.allocation) == 1 and len(launch.allocation[0].gpus) == 4


def test_a_running_jobs_time_limit_moves_and_the_old_timer_is_spent() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(10.0, "a", gpus=8)
    h.start_all(11.0, "a")
    job = h.c.jobs["a"].job
    assert job.state is S.RUNNING and job.start_time == 10.0 and job.spec.time_limit_s is None
    limited = replace(job.spec, time_limit_s=100.0)
    out = h(20.0, JobAmend("a", limited, "updated by root"))
    (timer,) = of(out, SetTimer)
    assert (timer.at, timer.kind) == (110.0, "timelimit")
    raised = replace(limited, time_limit_s=500.0, queue="other")  # a queue: left as it was
    out = h(30.0, JobAmend("a", raised, "updated by root"))
    assert job.spec.queue == BASE.queue and job.spec.time_limit_s == 500.0
    assert [t.at for t in of(out, SetTimer)] == [510.0]
    rec = h.c.jobs["a"]
    h(110.0, TimerFired("timelimit", "a", job.attempt))  # the 100 s limit's timer
    assert job.state is S.RUNNING and rec.ending is None  # raised since: it runs on
    h(510.0, TimerFired("timelimit", "a", job.attempt))
    assert rec.ending is S.TIMED_OUT  # stopped at its new limit


def test_nice_lowers_a_jobs_priority_and_only_an_admin_raises_it() -> None:
    """Slurm's Nice=N (a real 22.05, uid 1000: Nice=5, then 3, answered 0; Nice=-5 Access/
    permission denied; root's Nice=-5 answered 0; a nice beside an admin's Priority= ignored)."""
    for running in (False, True):  # any job that has not ended
        new, refused = ja.amend(BASE, {"nice": 5}, pending=not running, admin=False)
        assert refused == [] and new.priority == -5
        new, refused = ja.amend(new, {"nice": 3}, pending=not running, admin=False)
        assert refused == [] and new.priority == -3  # never above the default: its user's
        new, refused = ja.amend(BASE, {"nice": -5}, pending=not running, admin=False)
        assert kinds(refused) == [("nice", ja.DENIED)] and new is BASE
    new, refused = ja.amend(BASE, {"nice": -5}, pending=True, admin=True)
    assert refused == [] and new.priority == 5
    boosted = replace(BASE, priority=100)  # an admin's: a nice changes nothing then
    assert ja.amend(boosted, {"nice": 4}, pending=True, admin=False) == (boosted, [])


def test_memory_and_gpus_change_while_pending_only() -> None:
    new, refused = ja.amend(
        BASE, {"memory_mib": 8192, "gpus_per_worker": 2}, pending=True, admin=False
    )
    assert refused == [] and (new.memory_mib, new.gpus_per_worker) == (8192, 2)
    _, refused = ja.amend(
        BASE, {"memory_mib": 8192, "gpus_per_worker": 2}, pending=False, admin=True
    )
    assert kinds(refused) == [("memory_mib", ja.NOT_PENDING), ("gpus_per_worker", ja.NOT_PENDING)]
    _, refused = ja.amend(BASE, {"memory_mib": 0, "gpus_per_worker": -1}, pending=True, admin=True)
    assert kinds(refused) == [("memory_mib", ja.INVALID), ("gpus_per_worker", ja.INVALID)]


def test_a_running_jobs_priority_changes_with_an_admins_priority_or_a_nice() -> None:
    """scontrol update Priority= (an admin's) or Nice= of a running job: kept, as Slurm's (the
    core took only the name and time limit of a started job before: the 200 changed nothing)."""
    h = Harness(cluster_spec(1, 8))
    h.submit(10.0, "a", gpus=8)
    h.start_all(11.0, "a")
    rec = h.c.jobs["a"]
    niced, _ = ja.amend(rec.job.spec, {"nice": 5}, pending=False, admin=False)
    out = h(20.0, JobAmend("a", niced, "updated by alice"))
    assert rec.job.spec.priority == -5 and moves(out, "a") == [(S.RUNNING, S.RUNNING)]
    h(30.0, JobAmend("a", replace(niced, priority=7), "updated by root"))
    assert rec.job.spec.priority == 7 and rec.job.state is S.RUNNING
