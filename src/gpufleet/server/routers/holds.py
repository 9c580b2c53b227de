"""``POST /jobs/{id}/hold``: Slurm's ``scontrol hold|uhold|release JOB`` (ADR 0074).

Slurm 22.05's rules, as a real one answered (tests/integration/test_hold_vs_slurm.py): a user
holds and releases their own jobs (``hold`` by a user is a user hold); an admin's ``hold`` is an
admin hold, which only an admin releases (a user's release: 403, Slurm's "Access/permission
denied"), and which a user's ``hold`` or ``uhold`` leaves as it is; holding a job on hold, or
releasing one not held, changes nothing. A job that ended: 409 (Slurm's "Job has already
finished"); another user's: 403; none: 404. A held job that runs keeps its hold for when it is
pending again (a requeue). Answers the job (``JobOut``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from gpufleet.api import schemas as s
from gpufleet.api.bounds import Name
from gpufleet.api.holds import HoldAction, JobHoldRequest
from gpufleet.server.auth import Principal, require
from gpufleet.server.journal import AuditRow
from gpufleet.server.listing import owned_unfinished_job
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService
from gpufleet.server.views import job_out

router = APIRouter(tags=["jobs"])
USERS = require("user", "admin")


@router.post(
    "/jobs/{job_id}/hold",
    response_model=s.JobOut,
    operation_id="holdJob",
)
async def hold(
    job_id: Name,
    body: JobHoldRequest,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    rec = await owned_unfinished_job(svc, job_id, who)
    admin = who.role == "admin"
    held = next_hold(rec.job.held, body.action, admin)
    if held is None:
        raise HTTPException(403, f"job {job_id} is held by an admin: only an admin may release it")
    if held != rec.job.held:
        why = f"{'released' if not held else f'held ({held} hold)'} by {who.actor}"
        audit: AuditRow = (who.name, who.role, f"job.{body.action}", job_id, {})
        await svc.hold(job_id, held, why, audit=audit)
    return job_out(rec, None)


def next_hold(current: str, action: HoldAction, admin: bool) -> str | None:
    """The job's hold after ``action`` by an admin or its user, as Slurm's: "user", "admin",
    "" (none); None: refused (a user may not release an admin's hold)."""
    if current == "admin" and not admin:
        return None if action == "release" else "admin"
    if action == "release":
        return ""
    return "admin" if action == "hold" and admin else "user"
