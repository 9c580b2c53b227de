"""``POST /sbatch``: sbatch's command line, read here (``io/sbatch_command.py``) and submitted
as ``POST /jobs`` submits, so that the ``sbatch`` shim sends it as typed and imports next to
nothing (issue 27: a submission at Slurm's pace).

Answers: 201 ``{"ids", "warnings", "parsable", "quiet", "wait"}``; errors in the API's one shape
(``ErrorOut``), what a program needs in ``errors``: 400 for what sbatch refuses (``body.argv``:
sbatch's message); 428 with ``body.script`` (its message the script's path as typed, empty for
stdin) when the script is a file of the submitter's, sent again with it; 428 with ``body.argv``
when the command line names another file of theirs (``--export-file``): the shim reads it all
where it runs; 428 with ``body.test_only`` for ``--test-only``: sent to ``POST /sbatch/test``,
which answers 200 ``SbatchTrial`` (when and where it would start; nothing stored) or the same
400 and 428, and the submission's refusals (every problem at once)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from gpufleet.api import schemas as s
from gpufleet.api.sbatch import SbatchAnswer, SbatchSubmit, SbatchTrial
from gpufleet.io import sbatch_command
from gpufleet.model import replicas
from gpufleet.scheduler.snapshot import PendingJob
from gpufleet.server import submitting
from gpufleet.server.auth import Principal, require
from gpufleet.server.routers import jobs
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService
from gpufleet.server.views import iso8601

router = APIRouter(tags=["jobs"])
USERS = require("user", "admin")


@router.post("/sbatch", status_code=201, response_model=SbatchAnswer, operation_id="submitSbatch")
async def sbatch(
    body: SbatchSubmit,
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    batch = _read(body, svc)
    if isinstance(batch, JSONResponse):
        return batch
    if batch.test_only:
        said = "a --test-only command line: POST /sbatch/test answers it, storing nothing"
        return _error(428, said, "body.test_only", said)
    answer = await jobs.submit(await _submission(batch, svc), request, who, svc)
    ids = json.loads(answer.body)["ids"]
    doc = {"ids": ids, "warnings": batch.warnings, "parsable": batch.parsable, "quiet": batch.quiet,
           "wait": batch.wait}  # fmt: skip
    return JSONResponse(doc, status_code=201)


@router.post("/sbatch/test", response_model=SbatchTrial, operation_id="testSbatch")
async def sbatch_test(
    body: SbatchSubmit,
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    """sbatch --test-only: the command line read and the job checked as ``POST /sbatch`` does
    (400 with every problem, 428 for the script), then when and where it would start if it
    were submitted now (scheduler/trial.py); nothing is stored."""
    batch = _read(body, svc)
    if isinstance(batch, JSONResponse):
        return batch
    state = request.app.state
    spec, _ = await submitting.checked(await _submission(batch, svc), who, svc, state)
    now = svc.clock.now()
    # behind every pending job; with --begin, not eligible before then (as the core holds it)
    begins = spec.begin_time if spec.begin_time > now else 0.0
    job = PendingJob("test-only", spec, now, seq=1 << 62, eligible_time=begins)
    got = svc.trial(job, now)
    return SbatchTrial(
        job_id=svc.next_job_id(),
        start=got.start,
        start_at=None if got.start is None else iso8601(got.start),
        cpus=got.cpus,
        nodes=list(got.nodes),
        partition=got.queue,
    )


def _read(body: SbatchSubmit, svc: ControllerService) -> sbatch_command.Batch | JSONResponse:
    """The command line read, or the answer that refuses it or asks for more."""

    def script(path: str | None) -> str:
        if body.script is None:
            raise sbatch_command.NeedScript(path)
        return body.script

    try:
        return sbatch_command.read(
            list(body.argv),
            script=script,
            environ=body.environ,
            cwd=body.cwd,
            host=body.host,
            local_files=False,
            replicas=tuple({replicas.of(n.spec.labels) for _, n in svc.nodes_by_name()} - {0}),
        )
    except sbatch_command.Usage as e:
        return _error(400, str(e), "body.argv", str(e))
    except sbatch_command.NeedScript as e:
        return _error(
            428, "send the script: it is a file of the submitter's", "body.script", e.path or ""
        )
    except sbatch_command.NeedsLocalFiles:
        local = "names another file of the submitter's: read the command line where typed"
        return _error(428, local, "body.argv", local)


async def _submission(batch: sbatch_command.Batch, svc: ControllerService) -> s.JobSubmit:
    deps = [
        s.Dependency(type=t, job=j)  # type: ignore[arg-type]
        for t, j in batch.depends_on
        if await _known(svc, j)
    ]
    try:
        return s.JobSubmit(spec=batch.spec, array=batch.array, depends_on=deps)
    except ValidationError as e:  # what the command line asked for is refused as POST /jobs's
        errors = e.errors(include_url=False)
        raise RequestValidationError([{**x, "loc": ("body", *x["loc"])} for x in errors]) from None


async def _known(svc: ControllerService, job: str) -> bool:
    """Whether ``job`` is one the controller knows (running, waiting or ended). sbatch's
    dependency on a job Slurm does not know (purged, or never there) is dropped and the job
    runs (Slurm 22.05: ``-d afterok:999999`` accepted, ``Dependency=(null)``); gpufleet's own
    submissions (POST /jobs) refuse it instead."""
    await svc.until_held(job)
    return svc.job(job) is not None or svc.stored_job(job) is not None


def _error(status: int, detail: str, field: str, message: str) -> JSONResponse:
    problem = s.FieldProblem(field=field, message=message)
    return JSONResponse(s.ErrorOut(detail=detail, errors=[problem]).model_dump(), status)
