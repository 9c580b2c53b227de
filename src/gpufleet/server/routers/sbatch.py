"""``POST /sbatch``: sbatch's command line, read here (``io/sbatch_command.py``) and submitted
as ``POST /jobs`` submits, so that the ``sbatch`` shim sends it as typed and imports next to
nothing (issue 27: a submission at Slurm's pace).

Answers: 201 ``{"ids", "warnings", "parsable", "quiet", "wait"}``; errors in the API's one shape
(``ErrorOut``), what a program needs in ``errors``: 400 for what sbatch refuses (``body.argv``:
sbatch's message); 428 with ``body.script`` (its message the script's path as typed, empty for
stdin) when the script is a file of the submitter's, sent again with it; 428 with ``body.argv``
when the command line names another file of theirs (``--export-file``): the shim reads it all
where it runs."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from gpufleet.api import schemas as s
from gpufleet.api.sbatch import SbatchAnswer, SbatchSubmit
from gpufleet.io import sbatch_command
from gpufleet.model import replicas
from gpufleet.server.auth import Principal, require
from gpufleet.server.routers import jobs
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService

router = APIRouter(tags=["jobs"])
USERS = require("user", "admin")


@router.post("/sbatch", status_code=201, response_model=SbatchAnswer, operation_id="submitSbatch")
async def sbatch(
    body: SbatchSubmit,
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    def script(path: str | None) -> str:
        if body.script is None:
            raise sbatch_command.NeedScript(path)
        return body.script

    try:
        batch = sbatch_command.read(
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
    deps = [s.Dependency(type=t, job=j) for t, j in batch.depends_on]  # type: ignore[arg-type]
    submit = s.JobSubmit(spec=batch.spec, array=batch.array, depends_on=deps)
    answer = await jobs.submit(submit, request, who, svc)
    ids = json.loads(answer.body)["ids"]
    doc = {"ids": ids, "warnings": batch.warnings, "parsable": batch.parsable, "quiet": batch.quiet,
           "wait": batch.wait}  # fmt: skip
    return JSONResponse(doc, status_code=201)


def _error(status: int, detail: str, field: str, message: str) -> JSONResponse:
    problem = s.FieldProblem(field=field, message=message)
    return JSONResponse(s.ErrorOut(detail=detail, errors=[problem]).model_dump(), status)
