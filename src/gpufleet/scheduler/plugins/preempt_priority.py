"""Priority preemption: a job may preempt preemptible jobs of strictly lower priority, lowest
priority first, then least lost work."""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from gpufleet.scheduler.framework import Admission, OrderPlugin
from gpufleet.scheduler.plugins.base import PreemptBase
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "preempt/priority"


class Plugin(PreemptBase):
    def candidates(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Iterable[RunningJob]:
        return (r for r in snap.running if r.spec.priority < job.spec.priority)

    def rank(self, victims: list[RunningJob]) -> list[RunningJob]:
        return sorted(victims, key=lambda r: r.spec.priority)  # stable: cheapest within a level

    def victims_key(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Hashable | None:
        """In one snapshot the victims depend on the job's priority alone."""
        return job.spec.priority
