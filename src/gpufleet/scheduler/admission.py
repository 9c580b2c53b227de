"""Step 2 for a job that may start in several queues (Slurm's partition list, ``-p a,b``).

Slurm starts such a job in the partition "offering earliest initiation", considering it once
per partition. What differs between a job's queues is their admission (quota and borrowing)
and their terms: a queue's node set (ADR 0066) and the ways its GPU shares run under (ADR
0064). ``queue_tries`` gives the job as the job of each of its queues that admits it now, with
that queue's terms (its nodes outside the set as exclusions): those that admit it without
borrowing, in the job's order, then those that admit it by borrowing (a borrower still waits
its turn after the jobs that fit their own quota, as in Kueue). The cycle places it as the
first of them that has room (ADR 0073); when none does, it waits for a node of any of them.
When no queue admits it, it is held with a Reason that names every queue it tried. The job
then goes on (placed, preempting, started, charged) as the job of the queue it was placed in:
its spec's ``queue`` is that one. ``admit_any`` is the admission alone (the first queue that
admits it), for those that ask of quota only (the estimates, the Reasons' quota numbers).

Pure: no I/O, no clock. A job of one queue never comes here (the cycle's hot path)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

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


# a queue's terms: the job as that queue keeps it (its nodes outside the queue's set excluded),
# or (None, why no node of the cluster is ever the queue's for it)
Terms = Callable[[PendingJob], tuple[PendingJob | None, Reason | None]]


@dataclass(slots=True)
class Tries:
    """A job of several queues as the job of each that admits it now (its terms applied):
    ``direct`` without borrowing, then ``borrowing``, each in the job's order of its queues;
    ``why`` (neither has one): the one refusal that names every queue."""

    direct: list[tuple[PendingJob, Admission]] = field(default_factory=list)
    borrowing: list[tuple[PendingJob, Admission]] = field(default_factory=list)
    why: Admission | None = None


def queue_tries(
    job: PendingJob, admit: AdmitPlugin, usage: QueueUsage, ask_unlimited: bool, terms: Terms
) -> Tries:
    """``job`` (of ``spec.queues``) as the job of each of its queues that admits it; a queue
    none of whose nodes could ever run it (``terms``) is refused as never admitting it."""
    out = Tries()
    refusals: list[tuple[str, Admission]] = []
    for q in job.spec.queues:
        as_q, never = terms(in_queue(job, q))
        if as_q is None:
            refusals.append((q, Admission(Status(Code.UNRESOLVABLE, never))))
            continue
        if not ask_unlimited and q not in usage.limited:
            out.direct.append((as_q, ADMITTED))
            continue
        adm = admit.admit(as_q, usage)
        if not adm.status.ok:
            refusals.append((q, adm))
        else:
            (out.borrowing if adm.borrowing else out.direct).append((as_q, adm))
    if not out.direct and not out.borrowing:
        out.why = refused(refusals)
    return out


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
