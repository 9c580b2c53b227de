"""/jobs: submit, list (listing.py: in pages, off the loop), show, cancel, logs; hold and
release (holds.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response

from gpufleet.api import schemas as s
from gpufleet.api.bounds import Count, Name, SmallCount
from gpufleet.model.job import JobState
from gpufleet.server.auth import Principal, require
from gpufleet.server.errors import FieldErrors
from gpufleet.server.listing import MAX_PAGE, next_link, owned_job, owned_unfinished_job
from gpufleet.server.listing import Query as ListQuery
from gpufleet.server.routers import amend, holds, signals
from gpufleet.server.routers.deps import service, store
from gpufleet.server.service import ControllerService
from gpufleet.server.store import Store
from gpufleet.server.submitting import submit_jobs
from gpufleet.server.views import job_out

router = APIRouter(tags=["jobs"])
router.include_router(holds.router)  # POST /jobs/{id}/hold (scontrol hold, uhold, release)
router.include_router(amend.router)  # PATCH /jobs/{id} (scontrol update JobId=)
router.include_router(signals.router)  # POST /jobs/{id}/signal (scancel --signal)
USERS = require("user", "admin")


_owned = owned_job  # GET /jobs/{id}, cancel, requeue, logs: who may read a job


@router.post("/jobs", response_model=s.SubmitResult, status_code=201, operation_id="submitJob")
async def submit(
    body: s.JobSubmit,
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    ids = await submit_jobs(body, who, svc, request.app.state)
    # the ids as they are (SubmitResult's shape): FastAPI would validate them again
    return JSONResponse({"ids": ids}, status_code=201)


_NEXT = {
    "Link": {
        "description": 'the next page, as `<url>; rel="next"` (RFC 8288); absent on the last',
        "schema": {"type": "string"},
    }
}


@router.get(
    "/jobs",
    response_model=list[s.JobOut],
    operation_id="listJobs",
    responses={200: {"headers": _NEXT}},
)
async def list_jobs(
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
    user: Name | None = None,
    queue: Name | None = None,
    state: Name | None = None,
    limit: int = Query(
        200, ge=1, le=MAX_PAGE, description=f"page size (at most {MAX_PAGE}: follow Link)"
    ),
    all: bool = False,
    cursor: Name | None = Query(None, description="where the page starts: from the Link header"),
    brief: bool = Query(
        False,
        description="each job's spec holds only what a listing prints (queues, "
        "time_limit_s, cpus, priority, max_retries)",
    ),
) -> Any:
    if who.role == "user":
        if user not in (None, who.user):
            raise HTTPException(403, f"this token lists only {who.user}'s jobs, not {user}'s")
        user = who.user
    wanted: JobState | None = None
    if state is not None:
        try:
            wanted = JobState(state.upper())
        except ValueError:
            raise FieldErrors(
                [
                    (
                        "query.state",
                        f"unknown state {state!r} (one of {', '.join(x.value for x in JobState)})",
                    )
                ]
            ) from None
    before: int | None = None
    if cursor is not None:
        if not (cursor.isascii() and cursor.isdigit()) or not 0 < int(cursor) < 2**63:
            raise FieldErrors([("query.cursor", f"{cursor[:40]!r} is not one from a Link header")])
        before = int(cursor)
    q = ListQuery(user, queue, wanted, all, limit, before, brief)
    await svc.until_held()  # a job answered just now is listed (held after its turn's step)
    page = await request.app.state.listings.page(svc, q)
    headers = {} if page.next_before is None else {"Link": next_link(request.url, page.next_before)}
    # the page is JSON already (made off the loop): FastAPI would validate and encode it again
    return Response(page.body, media_type="application/json", headers=headers)


@router.get("/jobs/{job_id}", response_model=s.JobOut, operation_id="getJob")
async def show(
    job_id: Name, who: Principal = USERS, svc: ControllerService = Depends(service)
) -> Any:
    rec = await _owned(svc, job_id, who)
    events = svc.job_events(job_id)
    return job_out(rec, svc.reason(job_id), events=events, metrics=svc.job_metrics.get(job_id))


@router.post("/jobs/{job_id}/cancel", response_model=s.JobOut, operation_id="cancelJob")
async def cancel(
    job_id: Name,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
    st: Store = Depends(store),
) -> Any:
    rec = await owned_unfinished_job(svc, job_id, who)
    # the audit entry commits with the cancel: no answer for a half-done one
    await svc.cancel(
        job_id, f"cancelled by {who.actor}", audit=(who.name, who.role, "job.cancel", job_id, {})
    )
    return job_out(rec, None)


@router.get("/jobs/{job_id}/logs", response_model=s.LogOut, operation_id="getJobLogs")
async def logs(
    job_id: Name,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
    rank: SmallCount = 0,
    stream: str = Query("stdout", pattern="^(stdout|stderr)$"),
    offset: Count = 0,
) -> Any:
    rec = await _owned(svc, job_id, who)
    if rank >= max(1, rec.job.spec.workers):
        raise FieldErrors([("query.rank", f"job {job_id} has ranks 0..{rec.job.spec.workers - 1}")])
    attempt = max(1, rec.job.attempt)
    data, nxt, complete = svc.logs.read(job_id, attempt, rank, stream, offset)
    return s.LogOut(
        job=job_id,
        rank=rank,
        stream=stream,  # type: ignore[arg-type]  # the Query pattern admits only the two
        offset=offset,
        next_offset=nxt,
        data=data,
        complete=complete or rec.job.finished,
    )
