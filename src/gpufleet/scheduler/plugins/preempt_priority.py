"""Priority preemption: a job may preempt preemptible jobs of strictly lower priority, lowest
priority first, then least lost work."""

from __future__ import annotations

from collections.abc import Hashable

from gpufleet.scheduler.framework import Admission, OrderPlugin
from gpufleet.scheduler.plugins._preempt_common import cheapest_first
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "preempt/priority"


class Plugin:
    def victims(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> list[RunningJob]:
        lower = cheapest_first(
            (r for r in snap.running if r.spec.priority < job.spec.priority), snap.now
        )
        return sorted(lower, key=lambda r: r.spec.priority)  # stable: cheapest within a level

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
