"""``POST /jobs/{id}/signal``'s body: Slurm's ``scancel --signal=SIG [--batch|--full] JOB``
(ADR 0078)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from gpufleet.api.bounds import Name
from gpufleet.api.schemas import Input
from gpufleet.model.limits import signal_number

SignalScope = Literal["steps", "batch", "full"]


class JobSignalRequest(Input):
    signal: int | Name = Field(
        description="the signal: its Linux number (1-64) or its name as Slurm reads one "
        "(USR1, SIGUSR1, usr1)"
    )
    scope: SignalScope = Field(
        "steps",
        description="steps: the job's steps, not its batch shell (scancel's default); batch: "
        "the batch shell alone, not its children (--batch); full: the batch shell, its "
        "children and the steps (--full). A plain job's rank is its own step, and its main "
        "process its batch shell",
    )

    @field_validator("signal")
    @classmethod
    def _known(cls, v: int | str) -> int:
        return signal_number(v)
