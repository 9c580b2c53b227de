"""``PATCH /jobs/{id}``: Slurm's ``scontrol update JobId=ID KEY=VALUE…``; ``POST
/jobs/{id}/requeue``: its ``scontrol requeue ID`` (ADR 0076).

The rules are model/job_amend.py's (as a real Slurm 22.05 answered); a pending job's new spec
must also pass what a submission passes (its queues exist and admit it: admission.py), all
problems at once, nothing changed when any is refused. Statuses: 200 the job as changed; 403
another user's job, or a change only an admin makes (Slurm's "Access/permission denied"); 404
no such job; 409 the job ended, or a change only a pending job takes; 422 a bad value or a
queue that refuses it. Audited as ``job.update`` with the fields given."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from gpufleet.api import schemas as s
from gpufleet.api.bounds import Name
from gpufleet.api.jobupdate import JobUpdateRequest
from gpufleet.model import job_amend
from gpufleet.model.job import JobState
from gpufleet.server.auth import Principal, require
from gpufleet.server.errors import FieldErrors
from gpufleet.server.journal import AuditRow
from gpufleet.server.listing import owned_job, owned_unfinished_job
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService
from gpufleet.server.views import job_out

router = APIRouter(tags=["jobs"])
USERS = require("user", "admin")
_STATUS = {job_amend.DENIED: 403, job_amend.NOT_PENDING: 409, job_amend.UNSUPPORTED: 409}


@router.patch("/jobs/{job_id}", response_model=s.JobOut, operation_id="updateJob")
async def update(
    job_id: Name,
    body: JobUpdateRequest,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    rec = await owned_unfinished_job(svc, job_id, who)
    changes = body.changes()
    pending = rec.job.state is JobState.PENDING
    admin = who.role == "admin"
    spec, refused = job_amend.amend(rec.job.spec, changes, pending=pending, admin=admin)
    problems = [(f"body.{r.field}", r.text) for r in refused]
    statuses = [_STATUS.get(r.kind, 422) for r in refused]
    if pending:  # all at once: what admission says of the fields the rules let through
        bad = {r.field for r in refused}
        rest = {k: v for k, v in changes.items() if k not in bad}
        trial, _ = job_amend.amend(rec.job.spec, rest, pending=True, admin=admin)
        refusal = svc.admission(trial, who.role) if trial != rec.job.spec else None
        if refusal:
            problems += [(f.replace("body.spec.", "body."), m) for f, m in refusal.problems]
            statuses.append(refusal.status)
    status = min(statuses, default=422, key=_rank)
    if problems:
        raise FieldErrors(problems, status)
    if spec != rec.job.spec:  # nothing given, or the same values: nothing to keep
        why = f"updated by {who.actor}: {', '.join(sorted(changes))}"
        audit: AuditRow = (who.name, who.role, "job.update", job_id, {"fields": sorted(changes)})
        await svc.amend(job_id, spec, why, audit=audit)
    return job_out(rec, None)


def _rank(status: int) -> int:
    """A refusal's status, the most telling first: a permission, then the job's state."""
    return {403: 0, 409: 1}.get(status, 2)


@router.post("/jobs/{job_id}/requeue", response_model=s.JobOut, operation_id="requeueJob")
async def requeue(
    job_id: Name, who: Principal = USERS, svc: ControllerService = Depends(service)
) -> Any:
    """A running job stopped as a preemption stops it (its checkpoint notice first) and pending
    again under its id, its next start a new attempt. 200 the job; 403 another user's; 404 none;
    409 a pending job (Slurm's "Job is pending execution"), one submitted --no-requeue
    ("Requested operation is presently disabled") or one that ended. Audited as
    ``job.requeue``."""
    rec = await owned_job(svc, job_id, who)
    job = rec.job
    if job.finished or job.state not in (JobState.STARTING, JobState.RUNNING):
        what = "has already ended" if job.finished else "is pending"
        raise HTTPException(409, f"job {job_id} {what} ({job.state.value}): nothing to requeue")
    if not job.spec.requeue:
        raise HTTPException(409, f"job {job_id} was submitted --no-requeue: requeue disabled")
    audit: AuditRow = (who.name, who.role, "job.requeue", job_id, {})
    await svc.requeue(job_id, f"requeued by {who.actor}", audit=audit)
    return job_out(rec, None)
