"""``POST /jobs/{id}/signal``: Slurm's ``scancel --signal=SIG [--batch|--full] JOB`` (ADR 0078).

A signal to the processes of a job that runs, which it does not end (a cancel does): its agents
send it to the job's steps (scancel's default), its batch shell alone (``--batch``) or both
with the shell's children (``--full``), as the job's ``--signal`` goes. Who may: the job's
owner or an admin, as a cancel. Statuses: 200 the job; 403 another user's; 404 none; 409 a job
that has not started (Slurm's "Job can not be altered now, try again later") or has ended;
422 a signal that is not one (Slurm's "Unknown job signal"). Audited as ``job.signal`` with
the signal and its scope."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from gpufleet.api import schemas as s
from gpufleet.api.bounds import Name
from gpufleet.api.signals import JobSignalRequest
from gpufleet.model.job import JobState
from gpufleet.server.auth import Principal, require
from gpufleet.server.journal import AuditRow
from gpufleet.server.listing import owned_unfinished_job
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService
from gpufleet.server.views import job_out

router = APIRouter(tags=["jobs"])
USERS = require("user", "admin")


@router.post("/jobs/{job_id}/signal", response_model=s.JobOut, operation_id="signalJob")
async def signal(
    job_id: Name,
    body: JobSignalRequest,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    rec = await owned_unfinished_job(svc, job_id, who)
    job = rec.job
    if job.state not in (JobState.STARTING, JobState.RUNNING):
        raise HTTPException(
            409, f"job {job_id} is {job.state.value.lower()}: it has no processes to signal yet"
        )
    sig = int(body.signal)  # a number: the validator read a name
    audit: AuditRow = (
        who.name,
        who.role,
        "job.signal",
        job_id,
        {"signal": sig, "scope": body.scope},
    )
    await svc.signal(job_id, sig, body.scope, audit=audit)
    return job_out(rec, None)
