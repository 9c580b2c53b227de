"""No quotas: every job is admitted (a cluster with one team, or the FGD experiments)."""

from __future__ import annotations

from gpufleet.scheduler.framework import ADMITTED, Admission
from gpufleet.scheduler.plugins.base import AdmitBase
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.scheduler.usage import QueueUsage

NAME = "admit/none"


class Plugin(AdmitBase):
    admits_unlimited = True

    def admit(self, job: PendingJob, usage: QueueUsage) -> Admission:
        return ADMITTED
