"""Step 2 for a job that may start in several queues (Slurm's partition list, ``-p a,b``).

Slurm starts such a job in the partition "offering earliest initiation". In gpufleet every queue
spans every node, so what differs between a job's queues is their admission (quota and
borrowing): the job is admitted under the first of its queues that admits it now without
borrowing, else the first that admits it by borrowing (a borrower still waits its turn after
the jobs that fit their own quota, as in Kueue), else it is held by quota with a Reason that
names every queue it tried. The job then goes on (placed, preempting, started, charged) as the
job of the queue that admitted it: its spec's ``queue`` is that one.

Pure: no I/O, no clock. A job of one queue never comes here (the cycle's hot path)."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.scheduler.framework import ADMITTED, Admission, AdmitPlugin, Code, Status
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.scheduler.usage import QueueUsage


def in_queue(job: PendingJob, queue: str) -> PendingJob:
    """``job`` as the job of ``queue`` (itself when it is that already)."""
    if job.spec.queue == queue:
        return job
    return replace(job, spec=replace(job.spec, queue=queue))


def admit_any(
    job: PendingJob, admit: AdmitPlugin, usage: QueueUsage, ask_unlimited: bool = True
) -> tuple[PendingJob, Admission]:
    """``job`` as the job of the queue that admits it, and that admission; or, when none
    does, ``job`` as it is and one refusal naming every queue with its own Reason.
    ``ask_unlimited`` False: the plugin admits every job of a queue without a quota (its
    ``admits_unlimited``), so such a queue is not asked."""
    spec = job.spec
    if not spec.queues:
        return job, admit.admit(job, usage)
    limited = usage.limited
    borrowing: tuple[PendingJob, Admission] | None = None
    refusals: list[tuple[str, Admission]] = []
    for q in spec.queues:
        as_q = in_queue(job, q)
        if not ask_unlimited and q not in limited:
            return as_q, ADMITTED
        adm = admit.admit(as_q, usage)
        if adm.status.ok:
            if not adm.borrowing:
                return as_q, adm
            if borrowing is None:
                borrowing = (as_q, adm)
        else:
            refusals.append((q, adm))
    if borrowing is not None:
        return borrowing
    return job, refused(refusals)


def refused(refusals: list[tuple[str, Admission]]) -> Admission:
    """One refusal for a job no queue of which admits it: UNSCHEDULABLE (Quota) while any of
    them may admit it later, UNRESOLVABLE (NeverSchedulable) when none ever can."""
    never = all(a.status.code is Code.UNRESOLVABLE for _, a in refusals)
    reasons = [a.status.reason for _, a in refusals]
    parts = [
        f"{q}: {r.message}" if r is not None else f"{q}: not admitted"
        for (q, _), r in zip(refusals, reasons, strict=True)
    ]
    names = ", ".join(q for q, _ in refusals)
    msg = f"none of its queues ({names}) admits it: " + "; ".join(parts)
    # the first queue's numbers, as a one-queue Reason has them, and every queue tried
    first = next((r for r in reasons if r is not None), None)
    data = {**(first.data if first is not None else {}), "queues": [q for q, _ in refusals]}
    code = ReasonCode.NEVER if never else ReasonCode.QUOTA
    status = Status(Code.UNRESOLVABLE if never else Code.UNSCHEDULABLE, Reason(code, msg, data))
    return Admission(status)
