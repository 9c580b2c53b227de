"""A job's ends on the wire: how it ended (``JobOut.ended``, model/job_end.py), and what its
ranks wrote (``LogOut``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class JobEndOut(BaseModel):
    """How a job ended, in Slurm's words: ``reason`` as ``scontrol show job``'s ``Reason=``
    and squeue's ``%r`` print it (NonZeroExitCode, TimeLimit, JobLaunchFailure for a script
    killed by a signal, NodeDown, DependencyNeverSatisfied; ``None`` for one that completed or
    was cancelled running; a job cancelled pending keeps why it waited), and its exit status
    as ``ExitCode=`` prints it."""

    model_config = ConfigDict(extra="forbid")

    reason: str
    exit_code: str = Field(description="CODE:SIGNAL, as Slurm's ExitCode (3:0, 0:15)")
    code: int  # the exit code of the process that decided the end (0 when a signal killed it)
    signal: int  # the signal that killed it; 0: none
    dependency: str = Field(
        "",
        description="a job that ended pending: its dependencies not met then, as Slurm's "
        "Dependency= keeps them (afterok:1(failed)); empty: none, or it ran",
    )


class LogOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job: str
    rank: int
    stream: Literal["stdout", "stderr"]
    offset: int
    next_offset: int
    data: str
    complete: bool  # the rank has exited and everything it wrote is here
