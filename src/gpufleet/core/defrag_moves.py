"""Defragmentation moves across a controller restart (ADR 0045): what the store kept of each
leaf's last move (``DefragMoved``) given back to the core.

A move in progress is victims still stopping (a checkpoint notice's grace may last minutes)
and a gang waiting for the leaf they free. Forgotten, a victim's exit after the restart would
read as a failure (no stop under way: a non-zero exit fails the attempt, charged to its
retries), the gang would lose its nomination (the freed devices open to any job), and the
"how often" bounds and the gang's Reason would start afresh. Restored: each victim still in
the attempt the move stopped is stopping again as a preemption (its exit requeues it, not
charged), its Kill sent again at the first tick (the old process's may be lost; the agent
ignores a second stop with notice during the first's wait), the gang is nominated again while
it is pending, and the leaf's last move counts as before. Service replicas moved
make-before-break are the ServiceMaster's (their service record keeps the move)."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.core.cluster_state import ClusterState
from gpufleet.core.commands import Command, Kill
from gpufleet.core.jobmaster import JobMaster
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.notice import PREEMPT_GRACE_MAX_S, StopNotice, stop_notice
from gpufleet.scheduler.snapshot import DefragMove

S = JobState


def restore_moves(state: ClusterState, jm: JobMaster, moves: Iterable[DefragMove]) -> list[str]:
    """After the jobs' restore: the stored moves back in the core. Returns the victims whose
    Kill must go out again (``rekill``)."""
    again: list[str] = []
    for m in sorted(moves, key=lambda m: m.time):
        state.defrag_moves[m.leaf] = m
        for job_id, attempt in zip(m.victims, m.attempts, strict=False):
            rec = jm.jobs.get(job_id)
            if (
                rec is None
                or job_id in m.replacing
                or rec.job.attempt != attempt
                or rec.job.state not in (S.STARTING, S.RUNNING)
                or rec.ending is not None
            ):
                continue
            rec.ending = S.PREEMPTED
            notice = _notice(state, rec.job.spec)
            said = f" ({notice.describe()})" if notice is not None else ""
            rec.ending_why = f"for job {m.for_job}: {m.message}{said}"  # as ``evict`` says it
            rec.stopping_since = m.time
            if rec.id in state.running:
                state.restate(rec.running_view())
            again.append(job_id)
        gang = jm.jobs.get(m.for_job)
        if gang is not None and gang.job.state is S.PENDING:
            jm.nominate(m.for_job)
    if again:
        state.dirty = True
    return again


def rekill(state: ClusterState, jm: JobMaster, victims: Iterable[str], out: list[Command]) -> None:
    """The restored victims' Kills, with their checkpoint notice as ``JobMaster.evict`` gives
    it (a rank that has exited meanwhile is not killed)."""
    for job_id in victims:
        rec = jm.jobs.get(job_id)
        if rec is None or rec.ending is not S.PREEMPTED:
            continue
        live = tuple(rec.live_ranks())
        if not live:
            continue
        notice = _notice(state, rec.job.spec)
        rec.noticed = notice is not None
        out.append(Kill(rec.id, rec.job.attempt, live, "preempted", notice))


def _notice(state: ClusterState, spec: JobSpec) -> StopNotice | None:
    """The job's checkpoint notice under its queue's cap (``JobMaster.evict``'s)."""
    q = state.queues.get(spec.queue)
    cap = q.preempt_grace_max_s if q is not None else PREEMPT_GRACE_MAX_S
    return stop_notice(spec.preempt_notice, cap)
