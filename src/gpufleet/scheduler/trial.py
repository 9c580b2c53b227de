"""When and where a job would start if it were submitted now (Slurm's ``sbatch --test-only``),
and nothing else: one cycle over the snapshot with the job added behind every pending one, as a
new submission is, whose decisions are read and thrown away.

It starts now where that cycle starts it (on the nodes it gives it). Else its start is the
cycle's estimate (the reservation's, or the plan's: ``estimate.py``), None where the plan has
none; its nodes are those a placement finds once the running jobs that end by then have
released theirs (the pending jobs ahead are not placed: the nodes are a likely place, the time
is the estimate), else those it could take on the empty cluster. Pure: the snapshot is not
changed (its start-error book, which learns from the starts told, is left out)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from random import Random

from gpufleet.model.allocation import Allocation
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.gang import place_gang
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.whatif import release
from gpufleet.scheduler.workspace import Workspace


@dataclass(frozen=True, slots=True)
class Trial:
    start: float | None  # None: no estimate (the jobs ahead hold their GPUs with no limit)
    nodes: tuple[str, ...]  # where it would run; () where no node could ever hold it
    queue: str  # the queue it would start in (of a job of several: the one that starts it)
    cpus: int  # the processors it holds in all (Slurm's count: at least one per worker)


def trial(snap: Snapshot, profile: Profile, job: PendingJob) -> Trial:
    probe = replace(snap, pending=(*snap.pending, job), pending_index=None, start_errors=None)
    res = run_cycle(probe, profile)
    cpus = job.spec.workers * max(1, math.ceil(job.spec.cpu_milli / MILLI))
    for st in res.starts:
        if st.job_id == job.id:
            return Trial(snap.now, _names(st.allocation), st.queue or job.spec.queue, cpus)
    queue = job.spec.queue
    held = res.reservation
    if held is not None and held.job_id == job.id:
        return Trial(held.start_time, _names(held.allocation), queue, cpus)
    said = res.reasons.get(job.id)
    at = None if said is None else said.estimated_start
    if at is not None and job.eligible_time > at:  # sbatch --begin: not before then
        at = job.eligible_time
    return Trial(at, _where(snap, profile, job, at), queue, cpus)


def _names(alloc: Allocation) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.node for p in alloc))


def _where(snap: Snapshot, profile: Profile, job: PendingJob, at: float | None) -> tuple[str, ...]:
    """The nodes a placement finds for ``job`` once the running jobs that end by ``at`` have
    ended, else on the empty cluster."""
    rng = Random(profile.seed * 1_000_003 + snap.cycle)
    if at is not None:
        ws = snap.workspace.copy() if snap.workspace is not None else Workspace(snap.nodes)
        for r in snap.running:
            end = r.expected_end
            if end is not None and end <= at:
                release(ws, r.allocation)
        profile.place.prepare(snap, ws)
        alloc, _ = place_gang(job.spec, ws, profile.place, rng)
        if alloc is not None:
            return _names(alloc)
    empty = Workspace.emptied(snap.nodes)
    profile.place.prepare(snap, empty)
    alloc, _ = place_gang(job.spec, empty, profile.place, rng)
    return () if alloc is None else _names(alloc)
