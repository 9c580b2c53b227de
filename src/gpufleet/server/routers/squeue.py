"""``POST /squeue``: squeue's command line, read (``io/squeue_command.py``), listed and printed
here (``server/squeue.py``), so that the ``squeue`` shim sends its words and prints the answer
(issue 27: squeue over 2,000 jobs at Slurm's pace).

And ``POST /jobs/table``: ``gpufleet jobs``'s table, made the same way.

Answers: 200 ``{"out", "errors", "code"}``; errors in the API's one shape (``ErrorOut``): 400
for what squeue refuses (``body.argv``: squeue's message); 428 with ``body.argv`` when the format
prints times of day, which are the reader's local time: the shim prints it where it runs. A
user's token asking for another user's jobs is answered as Slurm's squeue under PrivateData=jobs
(none of them, exit 0), not refused; a ``-u`` name of no user as Slurm's (``Invalid user``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from gpufleet.api import schemas as s
from gpufleet.api.squeue import JobsTable, JobsTableOut, SqueueAnswer, SqueueRun
from gpufleet.io import squeue_command
from gpufleet.server import squeue as run
from gpufleet.server.auth import Principal, require
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService

router = APIRouter(tags=["jobs"])
USERS = require("user", "admin")
LOCAL = "the format prints times of day, in the reader's time zone: print it where typed"


@router.post("/squeue", response_model=SqueueAnswer, operation_id="runSqueue")
async def squeue(
    body: SqueueRun,
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    try:
        q = squeue_command.read(list(body.argv), body.me)
    except squeue_command.Usage as e:
        return _error(400, str(e), str(e))
    if q.local_time:
        return _error(428, LOCAL, LOCAL)
    printed = await run.squeue(svc, request.app.state.listings, who, q)
    doc = {"out": printed.out, "errors": printed.errors, "code": printed.code}
    return JSONResponse(doc)  # FastAPI would validate the table again


def _error(status: int, detail: str, message: str) -> JSONResponse:
    problem = s.FieldProblem(field="body.argv", message=message)
    return JSONResponse(s.ErrorOut(detail=detail, errors=[problem]).model_dump(), status)


TABLE_HERE = "print the table where the command runs (a job id not found, or a cell rich folds)"


@router.post("/jobs/table", response_model=JobsTableOut, operation_id="jobsTable")
async def jobs_table(
    body: JobsTable,
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    """``gpufleet jobs``'s table made here (issue 27: a listing of thousands of jobs with no
    JSON per job); 428 where the command is to print it itself, 403 as ``GET /jobs``."""
    try:
        made = await run.jobs_table(svc, request.app.state.listings, who, body)
    except run.Refused as e:
        return JSONResponse(s.ErrorOut(detail=e.detail).model_dump(), e.status)
    if made is None:
        return JSONResponse(s.ErrorOut(detail=TABLE_HERE).model_dump(), 428)
    return JSONResponse({"out": made[0], "jobs": made[1]})
