"""Reclaim lent quota: a job within its queue's nominal quota may preempt jobs of cohort
members that are over theirs (borrowers), least lost work first."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.scheduler.framework import Admission, OrderPlugin
from gpufleet.scheduler.plugins.base import PreemptBase
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "preempt/reclaim"


class Plugin(PreemptBase):
    def candidates(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Iterable[RunningJob]:
        q = usage.spec(job.spec.queue)
        if not admission.within_nominal or not q.cohort or not q.limited:
            return ()
        members = set(usage.cohorts.get(q.cohort, ()))
        return (
            r
            for r in snap.running
            if r.spec.queue != q.name and r.spec.queue in members and usage.borrowing(r.spec.queue)
        )
