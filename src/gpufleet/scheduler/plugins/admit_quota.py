"""Per-queue quotas (GPUs, CPU, memory) with borrowing of idle quota inside a cohort.

A job is admitted when its queue stays within its nominal quota, or, beyond it, within what the
other lending members of its cohort leave idle (then it is *borrowing*, and the first to be
preempted when a lender needs its quota back). A queue without a quota is never limited."""

from __future__ import annotations

from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import Resources
from gpufleet.scheduler.framework import ADMITTED, SUCCESS, Admission, Code, Status
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.scheduler.usage import QueueUsage

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


class Plugin:
    admits_unlimited = True

    def admit(self, job: PendingJob, usage: QueueUsage) -> Admission:
        if job.spec.queue not in usage.limited:
            return ADMITTED
        q = usage.spec(job.spec.queue)
        need = job.spec.total_resources
        after = usage.of_queue(q.name) + need
        if after.fits_in(q.quota):
            return ADMITTED
        lend = usage.lendable(q.name)
        if q.cohort and q.can_borrow and after.fits_in(q.quota + lend):
            return Admission(SUCCESS, borrowing=True)
        used = usage.of_queue(q.name)
        ceiling = q.quota + (
            usage.lendable_at_most(q.name) if q.cohort and q.can_borrow else Resources()
        )
        if not need.fits_in(ceiling):
            what, needed, most, own = _first_over(need, ceiling, q.quota)
            msg = (
                f"needs {needed} but queue {q.name} can never hold more than {most} {what} "
                f"(its quota {own}"
                + (f" plus all its cohort {q.cohort} could lend)" if q.cohort else ")")
            )
            return Admission(
                Status(
                    Code.UNRESOLVABLE,
                    Reason(
                        ReasonCode.NEVER,
                        msg,
                        {"queue": q.name, "needed_gpus": need.gpus, "ceiling_gpus": ceiling.gpus},
                    ),
                )
            )
        code = ReasonCode.QUOTA
        if q.cohort and q.can_borrow:
            tail = f"its cohort {q.cohort} has {lend.gpus:g} idle GPUs to lend"
        elif q.cohort:
            tail = "it may not borrow"
        else:
            tail = "it is in no cohort, so it cannot borrow"
        msg = (
            f"queue {q.name} uses {used.gpus:g} of {q.quota.gpus:g} GPUs and the job needs "
            f"{need.gpus:g} more; {tail}"
        )
        extra = _over(after, q.quota + lend)
        if extra and not extra.startswith("GPUs"):
            msg += f"; over quota in {extra}"
        data = {
            "queue": q.name,
            "used_gpus": used.gpus,
            "quota_gpus": q.quota.gpus,
            "needed_gpus": need.gpus,
            "borrowable_gpus": lend.gpus,
        }
        return Admission(Status(Code.UNSCHEDULABLE, Reason(code, msg, data)))
