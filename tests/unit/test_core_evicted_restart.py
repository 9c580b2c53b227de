"""An eviction a restarted controller forgot (issue 25, ADR 0036): the victim of a preemption
with a checkpoint notice writes its checkpoint while the controller restarts, and exits (0 once
saved, or by the SIGTERM). The new controller holds no stop under way for it, so the exit alone
would read as the job's end (SUCCEEDED) or a failure (charged to its retries). The agent says
it stopped the rank on the controller's eviction (cause "evicted", ``TaskExited.evicted``): the
job is requeued as a preempted one, not charged."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster_spec, profile, spec

from gpufleet.agent.tasks import RunnerEvent
from gpufleet.core.commands import Kill
from gpufleet.core.controller import Controller, RestoredJob
from gpufleet.core.events import JobSubmitted, TaskExited, TaskStarted
from gpufleet.model.job import JobState
from gpufleet.model.limits import SIGNALS
from gpufleet.model.notice import CheckpointNotice

S = JobState


def preempted_then_restarted() -> Controller:
    """A low job (a 60 s notice) on the one 8-GPU node, preempted for an urgent one; the
    controller restarts during the notice's wait."""
    c = Controller(profile(preempt=["priority"]), cluster_spec(1, 8))
    low = replace(
        spec("low", gpus=8, priority=-1), checkpoint=CheckpointNotice(SIGNALS["USR1"], 60)
    )
    c.handle(0.0, JobSubmitted("low", low, 0.0))
    c.handle(1.0, TaskStarted("low", 1, 0))
    out = c.handle(10.0, JobSubmitted("high", spec("high", gpus=8), 10.0))
    assert [k.job_id for k in out if isinstance(k, Kill)] == ["low"]
    c2 = Controller(profile(preempt=["priority"]), cluster_spec(1, 8))
    jobs = [RestoredJob(r.job, r.seq, r.allocation) for r in c.jobs.values()]
    c2.restore([n.spec for n in c.nodes.values()], jobs)
    return c2


@pytest.mark.parametrize(
    ("code", "why"), [(0, "preempted; exited with code 0"), (143, "preempted; killed by SIGTERM")]
)
def test_an_eviction_the_restarted_controller_forgot_requeues_the_job(code: int, why: str) -> None:
    c = preempted_then_restarted()
    assert c.jobs["low"].ending is None  # the stop under way was in the old process's memory
    c.handle(30.0, TaskExited("low", 1, 0, code, why, evicted=True))
    low = c.jobs["low"].job
    ended = [(st, why) for t, st, why in low.history if t == 30.0]
    assert ended[:2] == [
        (S.PREEMPTED, f"evicted before a restart: {why}"),
        (S.PENDING, "requeued; not charged to the job's retries"),
    ]
    assert low.retries_used == 0 and low.end_time is None


def test_an_exit_the_agent_does_not_say_evicted_is_the_jobs_own() -> None:
    c = preempted_then_restarted()
    c.handle(30.0, TaskExited("low", 1, 0, 0, ""))
    assert c.jobs["low"].job.state is S.SUCCEEDED


@pytest.mark.parametrize(
    ("why", "cause"),
    [
        ("preempted; killed by SIGTERM", "evicted"),
        ("drained; exited with code 0", "evicted"),
        ("idle; killed by SIGKILL after 5 s grace", "evicted"),
        ("fenced: the node's watchdog saw the agent's lease expire; preempted; killed by SIGTERM",
         "fenced"),
        ("cancelled; killed by SIGTERM", ""),
        ("time limit; killed by SIGTERM", ""),
        ("exited with code 3", ""),
    ],
)  # fmt: skip
def test_the_agent_says_which_exits_were_evictions(why: str, cause: str) -> None:
    ev = RunnerEvent("exited", ("j", 1, 0), 143, why)
    assert ev.cause == cause
    assert ev.wire().cause == cause
