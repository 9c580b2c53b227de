"""Per-queue quotas (GPUs, CPU, memory) with borrowing of idle quota inside a cohort.

A job is admitted when its queue stays within its nominal quota, or, beyond it, within what the
other lending members of its cohort leave idle (then it is *borrowing*, and the first to be
preempted when a lender needs its quota back). A queue without a quota is never limited."""

from __future__ import annotations

from gpufleet.model.queue import QueueSpec
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import Resources
from gpufleet.scheduler.framework import ADMITTED, SUCCESS, Admission, Code, Status
from gpufleet.scheduler.plugins.base import AdmitBase
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.scheduler.usage import QueueUsage, Room

NAME = "admit/quota"


def _over(used: Resources, limit: Resources) -> str:
    for what, u, lim, unit in (
        ("GPUs", used.gpu_milli / 1000, limit.gpu_milli / 1000, ""),
        ("CPUs", used.cpu_milli / 1000, limit.cpu_milli / 1000, ""),
        ("memory", used.memory_mib / 1024, limit.memory_mib / 1024, " GiB"),
    ):
        if u > lim:
            return f"{what} ({u:g}{unit} > {lim:g}{unit})"
    return ""


def _first_over(need: Resources, ceiling: Resources, quota: Resources) -> tuple[str, ...]:
    """The first resource ``need`` exceeds ``ceiling`` in: (name, needed, ceiling, quota)."""
    dims = (
        ("GPUs", need.gpu_milli / 1000, ceiling.gpu_milli / 1000, quota.gpu_milli / 1000, ""),
        ("CPUs", need.cpu_milli / 1000, ceiling.cpu_milli / 1000, quota.cpu_milli / 1000, ""),
        (
            "GiB of memory",
            need.memory_mib / 1024,
            ceiling.memory_mib / 1024,
            quota.memory_mib / 1024,
            "",
        ),
    )
    for what, n, c, own, _ in dims:
        if n > c:
            return what, f"{n:g} {what}", f"{c:g}", f"{own:g}"
    return dims[0][0], f"{dims[0][1]:g} GPUs", f"{dims[0][2]:g}", f"{dims[0][3]:g}"


class Plugin(AdmitBase):
    """``unassigned``: what becomes of the capacity outside every quota. ``lend`` (the
    default): the cohorts lend it to their members, as if every cohort sat in one cluster-level
    cohort that holds it; a member borrows it once its own cohort has no idle quota left to
    lend. A queue in no cohort never borrows (as in Kueue): its quota stays a cap. ``reserve``:
    it is kept for the queues without a quota. Either way the Reason of a job held by quota
    says what became of it."""

    admits_unlimited = True

    def __init__(self, unassigned: str = "lend") -> None:
        if unassigned not in ("lend", "reserve"):
            raise ValueError(f"unassigned must be 'lend' or 'reserve', not {unassigned!r}")
        self.lend_unassigned = unassigned == "lend"

    def admit(self, job: PendingJob, usage: QueueUsage) -> Admission:
        if job.spec.queue not in usage.limited:
            return ADMITTED
        q = usage.spec(job.spec.queue)
        need = job.spec.total_resources
        after = usage.of_queue(q.name) + need
        if after.fits_in(q.quota):
            return ADMITTED
        room = usage.room(q.name, self.lend_unassigned)
        if q.cohort and q.can_borrow and need.fits_in(room.total):
            return Admission(SUCCESS, borrowing=True)
        ceiling = q.quota
        if q.cohort and q.can_borrow:
            ceiling = ceiling + usage.lendable_at_most(q.name)
            if self.lend_unassigned:
                ceiling = ceiling + room.unassigned
        if not need.fits_in(ceiling):
            return Admission(Status(Code.UNRESOLVABLE, self._never(q, need, ceiling, room)))
        return Admission(Status(Code.UNSCHEDULABLE, self._quota(q, need, room)))

    def _never(self, q: QueueSpec, need: Resources, ceiling: Resources, room: Room) -> Reason:
        what, needed, most, own = _first_over(need, ceiling, q.quota)
        parts = [f"its quota {own}"]
        if q.cohort and q.can_borrow:
            parts.append(f"all its cohort {q.cohort} could lend")
        if self.lend_unassigned and q.cohort and q.can_borrow and room.unassigned.gpu_milli:
            parts.append(f"the {room.unassigned.gpus:g} GPUs outside every quota")
        msg = (
            f"needs {needed} but queue {q.name} can never hold more than {most} {what} "
            f"({' plus '.join(parts)})"
        )
        data = {"queue": q.name, "needed_gpus": need.gpus, "ceiling_gpus": ceiling.gpus}
        return Reason(ReasonCode.NEVER, msg, data)

    def _quota(self, q: QueueSpec, need: Resources, room: Room) -> Reason:
        """The Reason of a job held by quota, with the numbers the admission just used."""
        lend = room.lendable
        tails: list[str] = []
        if q.cohort and q.can_borrow:
            tail = f"its cohort {q.cohort} has {room.cohort_free.gpus:g} idle GPUs to lend"
            if room.cohort_lent.gpu_milli:
                tail += f" ({room.cohort_lent.gpus:g} more are lent already)"
            tails.append(tail)
        elif q.cohort:
            tails.append("it may not borrow")
        else:
            tails.append("it is in no cohort, so it cannot borrow")
        unassigned = room.unassigned.gpus
        if unassigned and q.cohort and q.can_borrow:
            if self.lend_unassigned:
                tails.append(
                    f"{room.unassigned_free.gpus:g} of the {unassigned:g} GPUs outside every "
                    "quota are free to lend"
                )
            else:
                tails.append(
                    f"the {unassigned:g} GPUs outside every quota are kept for queues without a "
                    "quota (admit/quota unassigned: reserve)"
                )
        elif unassigned:
            tails.append(f"the {unassigned:g} GPUs outside every quota are lent only in cohorts")
        msg = (
            f"queue {q.name} uses {room.used.gpus:g} of {q.quota.gpus:g} GPUs and the job needs "
            f"{need.gpus:g} more; {'; '.join(tails)}"
        )
        extra = _over(room.used + need, room.used + room.total)
        if extra and not extra.startswith("GPUs"):
            msg += f"; over quota in {extra}"
        data = {
            "queue": q.name,
            "used_gpus": room.used.gpus,
            "quota_gpus": q.quota.gpus,
            "needed_gpus": need.gpus,
            "borrowable_gpus": lend.gpus,
            "cohort_idle_gpus": room.cohort_idle.gpus,
            "cohort_lent_gpus": room.cohort_lent.gpus,
            "unassigned_gpus": room.unassigned.gpus,
            "unassigned_free_gpus": room.unassigned_free.gpus,
            "unassigned": "lend" if self.lend_unassigned else "reserve",
        }
        return Reason(ReasonCode.QUOTA, msg, data)
