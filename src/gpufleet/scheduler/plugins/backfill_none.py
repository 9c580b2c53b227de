"""No backfill: strict order. When the first job in order cannot start, nothing behind it does
(jobs held by their own queue's quota excepted)."""

from __future__ import annotations

from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.scheduler.framework import Code, Status
from gpufleet.scheduler.plugins.base import BackfillBase
from gpufleet.scheduler.snapshot import PendingJob

NAME = "backfill/none"


class Plugin(BackfillBase):
    reserves = False

    def backfill(self, job: PendingJob, head: PendingJob) -> Status:
        return Status(Code.UNSCHEDULABLE, held(head))


def held(head: PendingJob) -> Reason:
    """Why a job behind a blocked ``head`` waits (the same for every such job)."""
    return Reason(
        ReasonCode.HELD,
        f"job {head.id} is first in order and cannot start; this profile does not backfill",
        {"blocked_by": head.id},
    )
