"""``PATCH /jobs/{id}``'s body: Slurm's ``scontrol update JobId=… KEY=VALUE…`` (ADR 0076).
Only the fields given change; who may change what, and when, is model/job_amend.py's."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gpufleet.api.bounds import Name
from gpufleet.api.schemas import Input
from gpufleet.model.limits import MAX_NODE_NAMES, MAX_QUEUES, SPEC_BOUNDS


def _bounded(key: str, doc: str) -> Any:
    lo, hi = SPEC_BOUNDS[key]
    return Field(None, ge=lo, le=hi, description=doc)


class JobUpdateRequest(Input):
    name: Name | None = Field(None, description="Slurm's JobName= (any time before it ends)")
    time_limit_s: float | None = _bounded(
        "time_limit_s",
        "TimeLimit=, seconds; null: unlimited. A user raises only a pending job's; an admin any",
    )
    priority: int | None = _bounded("priority", "Priority=: an admin's alone")
    queues: list[Name] | None = Field(
        None,
        max_length=MAX_QUEUES,
        description="Partition=a,b: a pending job's queues (the first ordered by), each one "
        "that exists and admits the job",
    )
    begin_time: float | None = _bounded(
        "begin_time", "StartTime=: a pending job waits until then (seconds since the epoch)"
    )
    workers: int | None = _bounded("workers", "NumNodes=: a pending job's")
    nodelist: list[Name] | None = Field(
        None, max_length=MAX_NODE_NAMES, description="ReqNodeList=: a pending job's"
    )
    exclude: list[Name] | None = Field(
        None, max_length=MAX_NODE_NAMES, description="ExcNodeList=: a pending job's"
    )

    nice: int | None = _bounded(
        "priority",
        "Nice=: the priority becomes -nice (unless an admin set one); negative: an admin's",
    )
    memory_mib: int | None = _bounded("memory_mib", "MinMemoryNode=, MiB per node: a pending job's")
    gpus_per_worker: int | None = _bounded("gpus_per_worker", "Gres=gpu:N: a pending job's")

    def changes(self) -> dict[str, Any]:
        """The fields given (``time_limit_s``: null given is unlimited; the others' null is
        refused by the rules as no value)."""
        return {k: getattr(self, k) for k in self.model_fields_set}
