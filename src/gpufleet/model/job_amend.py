"""A submitted job's spec changed (Slurm's ``scontrol update JobId=…``, ADR 0076): which
fields may change, when and by whom, as a real Slurm 22.05 answered
(tests/integration/test_update_vs_slurm.py).

- ``name`` and ``time_limit_s``: while the job has not ended. A user may set any time limit of
  a pending job (Slurm's partition has no maximum here), but only lower that of a running one:
  raising it, or making it unlimited, is an admin's (Slurm's "Access/permission denied").
- ``priority``: an admin's alone, whatever the state (a user may never raise their own).
- ``nice`` (Slurm's Nice=N): the job's priority becomes -N until it ends, unless an admin gave
  it a priority above the default (Slurm ignores a nice then); a negative nice, which raises a
  job above the default, is an admin's ("Access/permission denied").
- ``memory_mib`` (MinMemoryNode=MB) and ``gpus_per_worker`` (Gres=gpu:N): a pending job's.
- ``queues``, ``begin_time``, ``nodelist``, ``exclude``: a pending job's only (Slurm's "Job is
  no longer pending execution"); ``workers``: likewise ("Requested operation not supported on
  this system" for a running one, as Slurm answers NumNodes).

Every refusal at once; any refusal changes nothing (``amend`` answers the spec as it was).
Whether the queues exist and admit the new spec is the server's admission's to judge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpufleet.model.job import JobSpec
from gpufleet.model.validate import MAX_NAME

# Slurm's words, each problem's first: the scontrol shim prints them as Slurm does
DENIED = "Access/permission denied"
NOT_PENDING = "Job is no longer pending execution"
UNSUPPORTED = "Requested operation not supported on this system"
INVALID = "Invalid value"

FIELDS = (
    "name",
    "time_limit_s",
    "priority",
    "queues",
    "begin_time",
    "workers",
    "nodelist",
    "exclude",
    "nice",
    "memory_mib",
    "gpus_per_worker",
)
_PENDING_ONLY = ("queues", "begin_time", "nodelist", "exclude", "memory_mib", "gpus_per_worker")


@dataclass(frozen=True, slots=True)
class Refused:
    """One field not changed: ``kind`` is Slurm's words (DENIED, NOT_PENDING, …), ``why``
    gpufleet's."""

    field: str
    kind: str
    why: str

    @property
    def text(self) -> str:
        return f"{self.kind}: {self.why}"


def amend(
    spec: JobSpec, changes: Mapping[str, Any], *, pending: bool, admin: bool
) -> tuple[JobSpec, list[Refused]]:
    """``spec`` with ``changes`` (field → new value; ``time_limit_s`` None: unlimited), and
    every refusal; with any refusal, ``spec`` as it was."""
    refused = [Refused(k, INVALID, f"{k} is not a field a job update changes ({', '.join(FIELDS)})")
               for k in changes if k not in FIELDS]  # fmt: skip
    refused += _values(changes)
    refused += _who_and_when(spec, changes, pending=pending, admin=admin)
    if refused:
        return spec, refused
    kw = dict(changes)
    nice = kw.pop("nice", None)
    if nice is not None and "priority" not in kw and spec.priority <= 0:
        kw["priority"] = -nice  # Slurm's nice: the priority lowered by it from the default
    if kw.get("begin_time", 0.0) is None:  # none: eligible at once
        kw["begin_time"] = 0.0
    if "queues" in kw:  # the first is the one it is ordered in, as sbatch -p a,b's
        queues = tuple(kw.pop("queues"))
        kw["queue"], kw["queues"] = queues[0], (queues if len(queues) > 1 else ())
    for k in ("nodelist", "exclude"):
        if k in kw:
            kw[k] = tuple(kw[k] or ())
    return replace(spec, **kw), []


def _values(changes: Mapping[str, Any]) -> list[Refused]:
    needed = ("priority", "workers", "nice", "memory_mib", "gpus_per_worker")
    out = [Refused(k, INVALID, f"{k} needs a value") for k in needed
           if k in changes and changes[k] is None]  # fmt: skip
    name = changes.get("name")
    if "name" in changes and (not isinstance(name, str) or not name or len(name) > MAX_NAME):
        out.append(Refused("name", INVALID, f"a name of 1 to {MAX_NAME} characters"))
    limit = changes.get("time_limit_s")
    if limit is not None and not limit > 0:
        out.append(Refused("time_limit_s", INVALID, "a time limit above 0 s (null: unlimited)"))
    workers = changes.get("workers")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        out.append(Refused("workers", INVALID, "at least 1 node"))
    if (mem := changes.get("memory_mib")) is not None and (not isinstance(mem, int) or mem < 1):
        out.append(Refused("memory_mib", INVALID, "at least 1 MiB"))
    if (gpus := changes.get("gpus_per_worker")) is not None and (
        not isinstance(gpus, int) or gpus < 0
    ):
        out.append(Refused("gpus_per_worker", INVALID, "0 GPUs or more"))
    if "queues" in changes and not changes["queues"]:
        out.append(Refused("queues", INVALID, "at least one queue"))
    if (begin := changes.get("begin_time")) is not None and begin < 0:
        out.append(Refused("begin_time", INVALID, "a time since the epoch (0: none)"))
    return out


def _who_and_when(
    spec: JobSpec, changes: Mapping[str, Any], *, pending: bool, admin: bool
) -> list[Refused]:
    out: list[Refused] = []
    if "priority" in changes and not admin:
        out.append(Refused("priority", DENIED, "only an admin changes a job's priority"))
    if (changes.get("nice") or 0) < 0 and not admin:
        out.append(Refused("nice", DENIED, "only an admin gives a negative nice"))
    if "time_limit_s" in changes and not admin and not pending:
        new, old = changes["time_limit_s"], spec.time_limit_s
        if old is not None and (new is None or new > old):
            why = f"a running job's time limit only an admin raises (now {old:g} s)"
            out.append(Refused("time_limit_s", DENIED, why))
    if not pending:
        out += [Refused(k, NOT_PENDING, f"{k} changes only while the job is pending")
                for k in _PENDING_ONLY if k in changes]  # fmt: skip
        if "workers" in changes:
            out.append(Refused("workers", UNSUPPORTED, "a running job's node count stays"))
    return out
