"""No quotas: every job is admitted (a cluster with one team, or the FGD experiments)."""

from __future__ import annotations

from gpufleet.scheduler.framework import SUCCESS, Admission
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.scheduler.usage import QueueUsage

NAME = "admit/none"


class Plugin:
    def admit(self, job: PendingJob, usage: QueueUsage) -> Admission:
        return Admission(SUCCESS, within_nominal=True)
