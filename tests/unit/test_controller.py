"""The pure Controller: ``handle(now, *events) -> commands``. No sleeps, no clock: every time
is a number passed in, every outcome a command returned."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster_spec, node_spec, profile, queue, spec

from gpufleet.core.commands import Kill, Launch, NodeEvent, SetTimer, Transition
from gpufleet.core.controller import Controller, ControllerError
from gpufleet.core.events import (
    JobCancelled,
    JobSubmitted,
    NodeDrain,
    NodeHealth,
    NodeLost,
    NodeUp,
    TaskExited,
    TaskStarted,
    TimerFired,
)
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.job import JobState
from gpufleet.model.job_end import JobEnd
from gpufleet.model.reason import ReasonCode

S = JobState


class Harness:
    """A Controller and the commands it returned, with shorthands for agent reports."""

    def __init__(self, cluster: ClusterSpec | None = None, **kw) -> None:
        self.c = Controller(profile(**kw.pop("profile", {})), cluster or cluster_spec(2, 8), **kw)
        self.log: list = []

    def __call__(self, now: float, *events) -> list:
        out = self.c.handle(now, *events)
        self.log.extend(out)
        return out

    def submit(self, now: float, job_id: str, depends_on=(), **kw) -> list:
        return self(now, JobSubmitted(job_id, spec(job_id, **kw), now, tuple(depends_on)))

    def state(self, job_id: str) -> JobState:
        return self.c.jobs[job_id].job.state

    def attempt(self, job_id: str) -> int:
        return self.c.jobs[job_id].job.attempt

    def launch(self, job_id: str) -> Launch:
        return [c for c in self.log if isinstance(c, Launch) and c.job_id == job_id][-1]

    def ranks(self, job_id: str) -> int:
        return len(self.launch(job_id).allocation)

    def start_all(self, now: float, job_id: str) -> list:
        a = self.attempt(job_id)
        return self(now, *(TaskStarted(job_id, a, r) for r in range(self.ranks(job_id))))

    def exit(self, now: float, job_id: str, rank: int, code: int = 0, why: str = "") -> list:
        return self(now, TaskExited(job_id, self.attempt(job_id), rank, code, why))

    def exit_killed(self, now: float, out: list) -> list:
        """Every rank a Kill in ``out`` names exits 137, as an agent would report."""
        evs = [
            TaskExited(k.job_id, k.attempt, r, 137, k.why)
            for k in out
            if isinstance(k, Kill)
            for r in k.ranks
        ]
        return self(now, *evs)


def of(out: list, kind: type) -> list:
    return [c for c in out if isinstance(c, kind)]


def moves(out: list, job_id: str) -> list[tuple[JobState | None, JobState]]:
    return [(t.old, t.new) for t in of(out, Transition) if t.job_id == job_id]


# ----- submit, launch, run -------------------------------------------------------------------


def test_submit_launches_with_the_launchers_environment() -> None:
    """A 4 × 2-GPU gang on 2 nodes of 4 GPUs: two ranks per node."""
    h = Harness(cluster_spec(2, 4))
    out = h.submit(0.0, "train", gpus=2, workers=4, limit=3600.0)
    assert moves(out, "train") == [(None, S.PENDING), (S.PENDING, S.STARTING)]
    (launch,) = of(out, Launch)
    assert launch.attempt == 1
    nodes = [p.node for p in launch.allocation]
    assert nodes == ["n00", "n00", "n01", "n01"]
    envs = [dict(e) for e in launch.env]
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"]
    assert [e["NODE_RANK"] for e in envs] == ["0", "0", "1", "1"]
    for e in envs:
        assert e["WORLD_SIZE"] == "4" and e["MASTER_ADDR"] == "n00"
        assert e["LOCAL_WORLD_SIZE"] == "2" and 29500 <= int(e["MASTER_PORT"]) < 31500
        assert e["SLURM_JOB_ID"] == "train" and e["SLURM_NTASKS"] == "4"
        assert e["SLURM_NNODES"] == "2" and e["SLURM_JOB_NODELIST"] == "n[00-01]"
        assert e["SLURM_JOB_NUM_NODES"] == "2" and e["GPUFLEET_ATTEMPT"] == "1"
        assert e["SLURM_PROCID"] == e["RANK"] and e["SLURM_LOCALID"] == e["LOCAL_RANK"]
        assert e["SLURM_NODEID"] == e["NODE_RANK"]
    # the time limit is armed for this attempt
    assert of(out, SetTimer) == [SetTimer(3600.0, "timelimit", "train", 1)]


def test_running_only_once_every_rank_has_started() -> None:
    h = Harness()
    h.submit(0.0, "g", gpus=8, workers=2)
    assert moves(h(1.0, TaskStarted("g", 1, 0)), "g") == []
    assert h.state("g") is S.STARTING
    out = h(2.0, TaskStarted("g", 1, 1))
    assert moves(out, "g") == [(S.STARTING, S.RUNNING)]
    assert h.state("g") is S.RUNNING


def test_every_rank_exiting_0_succeeds_and_frees_the_gpus() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "a", gpus=8)
    h.submit(0.0, "b", gpus=8)
    assert h.state("b") is S.PENDING
    assert h.c.reason("b").code is ReasonCode.RESOURCES
    h.start_all(1.0, "a")
    out = h.exit(10.0, "a", 0)
    assert moves(out, "a") == [(S.RUNNING, S.SUCCEEDED)]
    assert moves(out, "b") == [(S.PENDING, S.STARTING)]  # scheduled in the same call
    assert h.c.jobs["a"].job.end_time == 10.0


def test_transitions_come_before_the_commands_that_follow_them() -> None:
    h = Harness()
    out = h.submit(0.0, "a", gpus=1, limit=10.0)
    kinds = [type(c).__name__ for c in out]
    assert kinds.index("Transition") < kinds.index("Launch") < kinds.index("SetTimer")


# ----- failure, retry, back-off --------------------------------------------------------------


def test_one_rank_fails_the_others_are_killed_and_the_job_retries_with_back_off() -> None:
    h = Harness(backoff_base_s=10.0)
    h.submit(0.0, "g", gpus=8, workers=2, retries=3)
    h.start_all(1.0, "g")
    out = h.exit(5.0, "g", 0, code=3)
    assert of(out, Kill) == [Kill("g", 1, (1,), "gang member failed")]
    assert h.state("g") is S.RUNNING  # until the last rank has stopped
    out = h.exit_killed(6.0, out)
    assert moves(out, "g") == [(S.RUNNING, S.FAILED), (S.FAILED, S.PENDING)]
    t = of(out, Transition)
    assert t[0].why == "rank 0 exited with code 3"
    assert t[1].why == "retry 1 of 3 after 10 s back-off"
    assert of(out, SetTimer) == [SetTimer(16.0, "backoff", "g", 1)]
    assert of(out, Launch) == []  # not before the back-off
    r = h.c.reason("g")
    assert r.code is ReasonCode.BACKOFF and r.estimated_start == 16.0
    assert h.c.jobs["g"].job.retries_used == 1


def test_a_job_with_a_begin_time_waits_for_it_then_starts() -> None:
    """sbatch --begin=now+60 (Slurm 22.05: pending, Reason BeginTime, then started)."""
    h = Harness(cluster_spec(1, 8))
    job = JobSubmitted("b", replace(spec("b", gpus=1), begin_time=60.0), 0.0, ())
    out = h(0.0, job)
    assert moves(out, "b") == [(None, S.PENDING)] and of(out, Launch) == []
    assert of(out, SetTimer) == [SetTimer(60.0, "backoff", "b", 0)]
    r = h.c.reason("b")
    assert r.code is ReasonCode.BEGIN_TIME and r.estimated_start == 60.0
    out = h(60.0, TimerFired("backoff", "b", 0))
    assert moves(out, "b") == [(S.PENDING, S.STARTING)]


def test_back_off_doubles_and_is_capped() -> None:
    h = Harness(cluster_spec(1, 8), backoff_base_s=10.0, backoff_max_s=25.0)
    h.submit(0.0, "j", gpus=1, retries=4)
    now, delays = 0.0, []
    for _ in range(4):
        h.start_all(now + 1, "j")
        out = h.exit(now + 2, "j", 0, code=1)
        (timer,) = of(out, SetTimer)
        delays.append(timer.at - (now + 2))
        now = timer.at
        out = h(now, TimerFired("backoff", "j", h.attempt("j")))
        assert of(out, Launch), "relaunched when the back-off ends"
    assert delays == [10.0, 20.0, 25.0, 25.0]
    assert h.attempt("j") == 5


def test_max_retries_exhausted_is_failed_for_good() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "j", gpus=1, retries=1)
    h.start_all(1.0, "j")
    out = h.exit(2.0, "j", 0, code=1)
    h(of(out, SetTimer)[0].at, TimerFired("backoff", "j", 1))
    assert h.attempt("j") == 2
    h.start_all(20.0, "j")
    out = h.exit(21.0, "j", 0, code=1)
    assert moves(out, "j") == [(S.RUNNING, S.FAILED)]
    assert of(out, SetTimer) == [] and of(out, Launch) == []
    j = h.c.jobs["j"].job
    assert j.finished and j.end_time == 21.0 and h.c.pending_count == 0


def test_without_retries_the_first_failure_is_final() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "j", gpus=1)
    h.start_all(1.0, "j")
    out = h.exit(2.0, "j", 0, code=139, why="segfault")
    assert moves(out, "j") == [(S.RUNNING, S.FAILED)]
    assert of(out, Transition)[0].why == "segfault"
    assert h.c.jobs["j"].job.finished


# ----- node loss -----------------------------------------------------------------------------


def test_node_lost_requeues_without_using_retries() -> None:
    h = Harness(cluster_spec(3, 8))
    h.submit(0.0, "g", gpus=8, workers=2, retries=0)
    h.start_all(1.0, "g")
    first = [p.node for p in h.launch("g").allocation]
    out = h(5.0, NodeLost(first[0]))
    assert NodeEvent(first[0], "lost", 5.0, "heartbeats stopped") in out
    assert of(out, Kill) == [Kill("g", 1, (1,), "node_lost")]  # the rank on the lost node is gone
    out = h.exit_killed(6.0, out)
    assert moves(out, "g")[:2] == [(S.RUNNING, S.NODE_LOST), (S.NODE_LOST, S.PENDING)]
    assert "not charged" in of(out, Transition)[1].why
    # relaunched at once, away from the lost node, as attempt 2
    assert moves(out, "g")[2] == (S.PENDING, S.STARTING)
    again = h.launch("g")
    assert again.attempt == 2 and first[0] not in [p.node for p in again.allocation]
    assert h.c.jobs["g"].job.retries_used == 0


def test_a_no_requeue_job_fails_when_its_node_is_lost() -> None:
    h = Harness(cluster_spec(3, 8))
    h.submit(0.0, "g", gpus=8, workers=2, requeue=False)
    h.start_all(1.0, "g")
    first = [p.node for p in h.launch("g").allocation]
    out = h.exit_killed(6.0, h(5.0, NodeLost(first[0])))
    assert moves(out, "g") == [(S.RUNNING, S.FAILED)]  # never NODE_LOST → PENDING
    [t] = of(out, Transition)
    assert t.why.startswith(
        "node lost and the job asked not to be requeued (--no-requeue) (node "
    ), t.why
    assert h.c.jobs["g"].job.finished and h.c.jobs["g"].job.end_time == 6.0
    assert of(out, Launch) == [] and h.attempt("g") == 1


def test_a_no_requeue_job_with_retries_is_charged_one_for_a_lost_node() -> None:
    h = Harness(cluster_spec(3, 8))
    h.submit(0.0, "g", gpus=8, requeue=False, retries=1)
    h.start_all(1.0, "g")
    [node] = [p.node for p in h.launch("g").allocation]
    out = h(5.0, NodeLost(node))  # its one rank was there: the attempt is over at once
    assert moves(out, "g")[:2] == [(S.RUNNING, S.FAILED), (S.FAILED, S.PENDING)]
    assert h.c.jobs["g"].job.retries_used == 1


def test_a_no_requeue_job_that_missed_its_launch_deadline_fails() -> None:
    h = Harness(cluster_spec(1, 8), launch_timeout_s=30.0)
    h.submit(0.0, "j", gpus=1, requeue=False)
    out = h(30.0, TimerFired("launch", "j", 1))
    assert moves(out, "j") == [(S.STARTING, S.FAILED)]
    assert "did not start within the launch deadline" in of(out, Transition)[0].why


def test_an_unhealthy_node_stops_the_jobs_on_its_bad_gpus_only() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "a", gpus=4)
    h.submit(0.0, "b", gpus=4)
    h.start_all(1.0, "a")
    h.start_all(1.0, "b")
    bad = h.launch("b").allocation[0].gpus[0]
    out = h(2.0, NodeHealth("n00", False, "XID 79", bad_gpus=(bad,)))
    assert of(out, Kill) == [Kill("b", 1, (0,), "node_lost")]
    assert NodeEvent("n00", "unhealthy", 2.0, "XID 79") in out


def test_a_node_s_own_fault_drains_it_and_its_jobs_run_on() -> None:
    # a full data disk (ADR 0031): no new work there, nothing stopped; back once it is gone
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "a", gpus=4)
    h.start_all(1.0, "a")
    why = "disk full on /var/lib/gpufleet"
    out = h(2.0, NodeHealth("n00", False, why, jobs_unaffected=True))
    assert of(out, Kill) == [] and h.state("a") is S.RUNNING
    assert NodeEvent("n00", "unhealthy", 2.0, why) in out
    h.submit(3.0, "b", gpus=4)
    assert h.state("b") is S.PENDING
    out = h(4.0, NodeHealth("n00", True))
    assert moves(out, "b") == [(S.PENDING, S.STARTING)]
    assert h.state("a") is S.RUNNING


def test_a_drained_node_gets_no_new_work() -> None:
    h = Harness(cluster_spec(2, 8))
    out = h(0.0, NodeDrain("n00", True, "maintenance"))
    assert NodeEvent("n00", "drained", 0.0, "maintenance") in out
    h.submit(1.0, "a", gpus=8)
    h.submit(1.0, "b", gpus=8)
    assert [p.node for p in h.launch("a").allocation] == ["n01"]
    assert h.state("b") is S.PENDING
    out = h(2.0, NodeDrain("n00", False))
    assert moves(out, "b") == [(S.PENDING, S.STARTING)]


def test_a_new_node_registering_adds_capacity() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "a", gpus=8)
    h.submit(0.0, "b", gpus=8)
    out = h(1.0, NodeUp(node_spec("n09")))
    assert moves(out, "b") == [(S.PENDING, S.STARTING)]
    assert [p.node for p in h.launch("b").allocation] == ["n09"]


def test_a_node_re_registering_with_a_new_spec_never_double_books_its_gpus() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "a", gpus=8)
    h.start_all(1.0, "a")
    relabelled = replace(h.c.nodes["n00"].spec, labels=(("zone", "b"),))
    h(2.0, NodeUp(relabelled))
    h.submit(3.0, "b", gpus=8)
    assert h.state("b") is S.PENDING or h.state("a") is not S.RUNNING


# ----- cancel, time limit --------------------------------------------------------------------


def test_cancel_a_pending_job() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "a", gpus=8)
    h.submit(0.0, "b", gpus=8)
    out = h(1.0, JobCancelled("b"))
    assert moves(out, "b") == [(S.PENDING, S.CANCELLED)]
    assert of(out, Kill) == [] and h.c.pending_count == 0


def test_cancel_a_running_job_kills_every_rank_then_cancels() -> None:
    h = Harness()
    h.submit(0.0, "g", gpus=8, workers=2)
    h.start_all(1.0, "g")
    out = h(5.0, JobCancelled("g", "user asked"))
    assert of(out, Kill) == [Kill("g", 1, (0, 1), "cancelled")]
    assert h.state("g") is S.RUNNING
    out = h.exit_killed(6.0, out)
    assert moves(out, "g") == [(S.RUNNING, S.CANCELLED)]
    assert of(out, Transition)[0].why == "user asked"


def test_a_cancel_during_a_gang_failure_is_not_retried() -> None:
    h = Harness()
    h.submit(0.0, "g", gpus=8, workers=2, retries=3)
    h.start_all(1.0, "g")
    out = h.exit(5.0, "g", 0, code=3)  # rank 1 is being stopped, a retry would follow
    h(5.5, JobCancelled("g"))
    out = h.exit_killed(6.0, out)
    assert moves(out, "g") == [(S.RUNNING, S.CANCELLED)]
    assert of(out, SetTimer) == [] and h.c.pending_count == 0


def test_a_cancel_during_a_preemption_is_not_requeued() -> None:
    h = Harness(cluster_spec(1, 8), profile={"order": "priority", "preempt": ("priority",)})
    h.submit(0.0, "low", gpus=8)
    h.start_all(1.0, "low")
    out = h.submit(10.0, "high", gpus=8, priority=5)
    h(10.5, JobCancelled("low"))
    out = h.exit_killed(11.0, out)
    assert moves(out, "low") == [(S.RUNNING, S.CANCELLED)]
    assert moves(out, "high") == [(S.PENDING, S.STARTING)]


def test_cancel_an_unknown_job_is_refused() -> None:
    with pytest.raises(ControllerError, match="unknown job nope"):
        Harness()(0.0, JobCancelled("nope"))


def test_time_limit_times_out() -> None:
    h = Harness(cluster_spec(1, 8))
    out = h.submit(0.0, "j", gpus=1, limit=50.0, retries=5)
    (timer,) = of(out, SetTimer)
    h.start_all(1.0, "j")
    out = h(timer.at, TimerFired(timer.kind, timer.job_id, timer.attempt))
    assert of(out, Kill) == [Kill("j", 1, (0,), "timed_out")]
    out = h.exit_killed(50.5, out)
    assert moves(out, "j") == [(S.RUNNING, S.TIMED_OUT)]
    assert of(out, Transition)[0].why == "time limit 50 s reached"
    assert h.c.jobs["j"].job.finished  # terminal: a time-out is not retried


def test_a_time_limit_timer_of_an_earlier_attempt_is_ignored() -> None:
    h = Harness(cluster_spec(2, 8))
    h.submit(0.0, "j", gpus=8, limit=100.0)
    h.start_all(1.0, "j")
    node = h.launch("j").allocation[0].node
    h(10.0, NodeLost(node))  # attempt 1 ends, attempt 2 starts elsewhere
    assert h.attempt("j") == 2
    h.start_all(11.0, "j")
    out = h(100.0, TimerFired("timelimit", "j", 1))
    assert out == [] and h.state("j") is S.RUNNING


# ----- dependencies --------------------------------------------------------------------------


def test_afterok_waits_then_runs_when_the_dependency_succeeds() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "build", gpus=1)
    out = h.submit(0.0, "test", gpus=1, depends_on=[("afterok", "build")])
    assert moves(out, "test") == [(None, S.PENDING)]
    r = h.c.reason("test")
    assert r.code is ReasonCode.DEPENDENCY and r.message == "waiting for afterok:build"
    h.start_all(1.0, "build")
    out = h.exit(2.0, "build", 0)
    assert moves(out, "test") == [(S.PENDING, S.STARTING)]


def test_afterok_that_can_never_be_met_waits_until_its_user_cancels_it_as_slurm() -> None:
    """Slurm's default (no kill_invalid_depend): the job stays PENDING, Reason
    DependencyNeverSatisfied, never started and with no estimated start; a job after it waits
    with Dependency, and with DependencyNeverSatisfied once the one between is cancelled."""
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "build", gpus=1)
    h.submit(0.0, "test", gpus=1, depends_on=[("afterok", "build")])
    h.submit(0.0, "deploy", gpus=1, depends_on=[("afterok", "test")])
    h.start_all(1.0, "build")
    out = h.exit(2.0, "build", 0, code=1)
    assert moves(out, "test") == [] and moves(out, "deploy") == []
    r = h.c.reason("test")
    assert r.code is ReasonCode.DEP_NEVER and r.code.value == "DependencyNeverSatisfied"
    assert r.message == "dependency afterok:build ended FAILED: it can never be met"
    assert r.estimated_start is None
    assert h.c.reason("deploy").code is ReasonCode.DEPENDENCY
    out = h(50.0, TimerFired("tick", "", 0))  # the cluster is empty: still nothing starts
    assert not of(out, Launch) and h.state("test") is S.PENDING
    out = h(60.0, JobCancelled("test"))
    assert moves(out, "test") == [(S.PENDING, S.CANCELLED)]
    # scontrol's Dependency= keeps what it waited for, as Slurm's (afterok:1(failed))
    never = JobEnd("DependencyNeverSatisfied", 0, 0, "afterok:build(failed)")
    assert h.c.jobs["test"].job.ended == never
    assert h.state("deploy") is S.PENDING
    assert h.c.reason("deploy").code is ReasonCode.DEP_NEVER
    assert h.c.reason("deploy").message == (
        "dependency afterok:test ended CANCELLED: it can never be met"
    )


def test_afterok_is_cancelled_when_the_dependency_fails_with_kill_invalid_depend() -> None:
    h = Harness(cluster_spec(1, 8), profile={"kill_invalid_depend": True})
    h.submit(0.0, "build", gpus=1)
    h.submit(0.0, "test", gpus=1, depends_on=[("afterok", "build")])
    h.submit(0.0, "deploy", gpus=1, depends_on=[("afterok", "test")])
    h.start_all(1.0, "build")
    out = h.exit(2.0, "build", 0, code=1)
    assert moves(out, "test") == [(S.PENDING, S.CANCELLED)]
    assert of(out, Transition)[-2].why == "dependency afterok:build ended FAILED"
    assert moves(out, "deploy") == [(S.PENDING, S.CANCELLED)]  # and down the chain
    # Slurm's --kill-on-invalid-dep=yes: CANCELLED, Dependency=afterok:1(failed) kept
    never = JobEnd("DependencyNeverSatisfied", 0, 0, "afterok:build(failed)")
    assert h.c.jobs["test"].job.ended == never
    assert h.c.jobs["deploy"].job.ended == JobEnd(never.reason, 0, 0, "afterok:test(failed)")


@pytest.mark.parametrize("controller", [False, True])
def test_a_jobs_own_kill_on_invalid_dep_wins_over_the_controllers(controller: bool) -> None:
    """sbatch's ``--kill-on-invalid-dep=yes|no``: the job's choice, whatever the controller's
    ``--kill-invalid-depend`` (which decides for the jobs that make none)."""
    h = Harness(cluster_spec(1, 8), profile={"kill_invalid_depend": controller})
    h.submit(0.0, "build", gpus=1)
    h.start_all(1.0, "build")
    h.exit(2.0, "build", 0, code=1)
    after = [("afterok", "build")]
    for name, own in (("yes", True), ("no", False), ("unset", None)):
        job = JobSubmitted(name, replace(spec(name), kill_invalid_dep=own), 3.0, tuple(after))
        h(3.0, job)
    kill = {"yes": True, "no": False, "unset": controller}
    for name, killed in kill.items():
        assert h.state(name) is (S.CANCELLED if killed else S.PENDING), name
        if not killed:
            assert h.c.reason(name).code is ReasonCode.DEP_NEVER


def test_afterok_waits_through_the_dependencys_retries() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "build", gpus=1, retries=1)
    h.submit(0.0, "test", gpus=1, depends_on=[("afterok", "build")])
    h.start_all(1.0, "build")
    h.exit(2.0, "build", 0, code=1)
    assert h.state("test") is S.PENDING
    assert h.c.reason("test").code is ReasonCode.DEPENDENCY


def test_afterany_runs_whatever_the_dependency_ended_as() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "train", gpus=1)
    h.submit(0.0, "cleanup", gpus=1, depends_on=[("afterany", "train")])
    assert h.state("cleanup") is S.PENDING
    h.start_all(1.0, "train")
    out = h.exit(2.0, "train", 0, code=1)
    assert moves(out, "cleanup") == [(S.PENDING, S.STARTING)]


def test_a_dependency_already_met_or_failed_at_submit_time() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(0.0, "ok", gpus=1)
    h.submit(0.0, "bad", gpus=1)
    h.start_all(1.0, "ok")
    h.start_all(1.0, "bad")
    h.exit(2.0, "ok", 0)
    h.exit(2.0, "bad", 0, code=1)
    out = h.submit(3.0, "after-ok", gpus=1, depends_on=[("afterok", "ok")])
    assert moves(out, "after-ok") == [(None, S.PENDING), (S.PENDING, S.STARTING)]
    out = h.submit(3.0, "after-bad", gpus=1, depends_on=[("afterok", "bad")])
    assert moves(out, "after-bad") == [(None, S.PENDING)]  # accepted, as sbatch does
    assert h.c.reason("after-bad").code is ReasonCode.DEP_NEVER
    h.c.jobmaster.kill_invalid_depend = True
    out = h.submit(4.0, "killed", gpus=1, depends_on=[("afterok", "bad")])
    assert moves(out, "killed") == [(None, S.PENDING), (S.PENDING, S.CANCELLED)]


def test_bad_dependencies_and_duplicate_ids_are_refused() -> None:
    h = Harness()
    h.submit(0.0, "a", gpus=1)
    with pytest.raises(ControllerError, match="exists already"):
        h.submit(0.0, "a", gpus=1)
    with pytest.raises(ControllerError, match="not a known job"):
        h.submit(0.0, "b", depends_on=[("afterok", "ghost")])
    with pytest.raises(ControllerError, match="unknown dependency type"):
        h.submit(0.0, "c", depends_on=[("afternoon", "a")])
    assert set(h.c.jobs) == {"a"}


# ----- stale events, time --------------------------------------------------------------------


def test_stale_attempt_events_are_ignored() -> None:
    h = Harness(cluster_spec(2, 8))
    h.submit(0.0, "j", gpus=8, retries=2)
    h.start_all(1.0, "j")
    node = h.launch("j").allocation[0].node
    h(5.0, NodeLost(node))
    assert h.attempt("j") == 2 and h.state("j") is S.STARTING
    # reports about attempt 1 arrive late: none of them changes attempt 2
    assert h(6.0, TaskStarted("j", 1, 0)) == []
    assert h(7.0, TaskExited("j", 1, 0, 1, "late")) == []
    assert h.state("j") is S.STARTING and h.c.jobs["j"].job.retries_used == 0
    h.start_all(8.0, "j")
    assert h.state("j") is S.RUNNING
    # a duplicate exit report of the same rank counts once
    assert h.exit(10.0, "j", 0) != []
    assert h(10.0, TaskExited("j", 2, 0, 0)) == []
    assert h.state("j") is S.SUCCEEDED


def test_events_for_unknown_jobs_and_ranks_are_ignored() -> None:
    h = Harness()
    h.submit(0.0, "j", gpus=1)
    assert h(1.0, TaskStarted("ghost", 1, 0)) == []
    assert h(1.0, TaskExited("j", 1, 7, 1)) == []  # no rank 7
    assert h(1.0, TimerFired("backoff", "ghost", 1)) == []


def test_time_never_runs_backwards() -> None:
    h = Harness(cluster_spec(1, 8))
    h.submit(100.0, "a", gpus=1)
    out = h.submit(50.0, "b", gpus=1)  # a late-stamped batch
    assert all(t.time == 100.0 for t in of(out, Transition))
    assert h.c.now == 100.0


def test_preemption_requeues_the_victim_without_using_its_retries() -> None:
    h = Harness(cluster_spec(1, 8), profile={"order": "priority", "preempt": ("priority",)})
    h.submit(0.0, "low", gpus=8, priority=0)
    h.start_all(1.0, "low")
    out = h.submit(10.0, "high", gpus=8, priority=5)
    assert of(out, Kill) == [Kill("low", 1, (0,), "preempted")]
    assert h.c.reason("high").code is ReasonCode.PREEMPTING
    out = h.exit_killed(11.0, out)
    assert moves(out, "low")[:2] == [(S.RUNNING, S.PREEMPTED), (S.PREEMPTED, S.PENDING)]
    assert moves(out, "high") == [(S.PENDING, S.STARTING)]
    assert h.c.jobs["low"].job.retries_used == 0
    assert h.c.jobs["low"].job.attained_gpu_s == pytest.approx(8 * 11.0)


def rounds(h: Harness, out: list, t: float, n: int = 4) -> None:
    """Agents obey: killed ranks exit, launched ranks start; a scheduling tick each round."""
    for _ in range(n):
        out = h.exit_killed(t, out)
        for j in list(h.c.jobs):
            if h.state(j) is S.STARTING:
                out += h.start_all(t, j)
        tick = h.c.tick(t + 0.5)
        h.log.extend(tick)
        out += tick
        t += 1.0


def test_reclaim_gives_the_lender_its_gpus() -> None:
    qs = [queue("a", 8, cohort="c"), queue("b", 8, cohort="c")]
    h = Harness(cluster_spec(2, 8, queues=qs), profile={"preempt": ("reclaim",)})
    h.submit(0.0, "b1", gpus=8, queue="b")
    h.submit(0.0, "b2", gpus=8, queue="b")
    h.start_all(0.5, "b1")
    h.start_all(0.5, "b2")
    out = h.submit(2.0, "a1", gpus=8, queue="a")
    assert of(out, Kill), "a1 reclaims its quota"
    rounds(h, out, 3.0)
    assert h.state("a1") is S.RUNNING
    assert sum(isinstance(c, Kill) for c in h.log) == 1


def test_the_same_events_give_the_same_commands() -> None:
    def play() -> list:
        h = Harness(cluster_spec(4, 8, leaves=2), profile={"place": "topology"})
        for i in range(6):
            h.submit(float(i), f"j{i}", gpus=1 + i, workers=1 + i % 2, retries=1)
        for i in range(3):
            h.start_all(10.0, f"j{i}")
        h.exit(20.0, "j0", 0, code=1)
        return h.log

    assert play() == play()


@pytest.mark.parametrize(("base", "cap"), [(0.0, 600.0), (-1.0, 600.0), (30.0, 10.0)])
def test_a_back_off_that_is_not_positive_and_capped_is_refused(base: float, cap: float) -> None:
    with pytest.raises(ValueError, match="retry back-off: need 0 < base"):
        Harness(backoff_base_s=base, backoff_max_s=cap)


def test_pending_jobs_are_the_snapshots_pending_without_a_snapshot() -> None:
    h = Harness(cluster_spec(1, 8))
    for i in range(5):
        h.submit(float(i), f"j{i}", gpus=4)
    h(6.0, JobCancelled("j3"))
    assert [p.id for p in h.c.pending_jobs()] == [p.id for p in h.c.snapshot(7.0).pending]
    assert {p.id for p in h.c.pending_jobs()} == {"j2", "j4"}  # j0 and j1 run, j3 cancelled
