"""``POST /sbatch``'s body: sbatch's command line as the submitter typed it, the script when it
is a file or stdin of theirs, and where it is submitted from (issue 27: the controller reads it,
so that the ``sbatch`` shim imports next to nothing)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpufleet.api.bounds import Text
from gpufleet.api.schemas import Input, Strict
from gpufleet.model.validate import MAX_COMMAND, MAX_ENV, MAX_ITEMS

# the environment is bounded as a whole by the request's size; which variables go with the job,
# and what their bounds are, is sbatch's --export, read with the script (io/export.py)
Environ = Annotated[dict[str, str], Field(max_length=8 * MAX_ITEMS)]


class SbatchSubmit(Input):
    argv: list[Annotated[str, Field(max_length=MAX_COMMAND)]] = Field(max_length=MAX_ITEMS)
    script: Annotated[str, Field(max_length=8 * MAX_ENV)] | None = Field(
        None, description="the script's text, when the answer asked for it (need: script)"
    )
    environ: Environ = Field(default_factory=dict)
    cwd: Text
    host: Text


class SbatchAnswer(Strict):
    """``POST /sbatch``'s 201: the ids (one per array task, or the job's) and what the shim
    prints as sbatch would."""

    ids: list[str]
    warnings: list[str]
    parsable: bool
    quiet: bool
    wait: bool = False  # --wait: the shim waits for the job's end and exits with its code


class SbatchTrial(Strict):
    """``POST /sbatch/test``'s 200 (sbatch --test-only): when and where the job would start if
    it were submitted now; nothing is stored."""

    job_id: str = Field(description="the id the next job submitted gets (none is taken)")
    start: float | None = Field(description="seconds since the epoch; null: no estimate")
    start_at: str | None = Field(description="the same, ISO 8601 in UTC")
    cpus: int = Field(description="the processors it would hold in all")
    nodes: list[str] = Field(description="where it would run")
    partition: str = Field(description="the queue it would start in")
