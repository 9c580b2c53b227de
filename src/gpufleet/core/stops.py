"""A preemption's stop under way when the controller restarted (issue 25): the agent was
stopping a rank for an eviction (a preemption, a drain's deadline, the idle policy: the
victim in its notice's wait, minutes) and says so when it registers. The restarted core had
read the job as running: it makes the stop the job's again (``JobMaster.evict``: requeued,
not charged), so its devices are the room being made and no other job is stopped for the same
room (``scheduler/preemption.going``). Its Kill goes out again with the same notice, which
the agent ignores during the first one's wait. The preemptor's nomination is not known here
(a plain preemption is not stored; a defrag move is: ``core/defrag_moves.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpufleet.core.commands import Command
from gpufleet.model.job import JobState

if TYPE_CHECKING:
    from gpufleet.core.jobmaster import JobMaster

RESTARTED = "preempted before the controller restarted"
Keys = Iterable[tuple[str, int, int]]


def stops_seen(jm: JobMaster, keys: Keys, now: float, out: list[Command]) -> None:
    """The ranks an agent is stopping for an eviction: each attempt we hold running and not
    stopping is stopped as a preemption stops it."""
    for job_id, attempt, _rank in keys:
        rec = jm.jobs.get(job_id)
        if rec is None or rec.job.attempt != attempt or rec.stopping_since is not None:
            continue
        if rec.job.state in (JobState.STARTING, JobState.RUNNING):
            jm.evict(rec, RESTARTED, now, out, "preempted")
