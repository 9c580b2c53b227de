"""What a submission (``POST /jobs``) does once its token and body are read: the spec and
admission's checks (every problem at once), the array expanded, the jobs handed to the service
(stored before the answer). Shared by the router (``routers/jobs.py``) and the fast path
(``submit_fast.py``), so the two cannot drift apart."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import HTTPException

from gpufleet.api import schemas as s
from gpufleet.model.arrays import ArraySpec, parse_array
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec
from gpufleet.server.admission import Refusal
from gpufleet.server.auth import Principal
from gpufleet.server.errors import FieldErrors
from gpufleet.server.service import ControllerService
from gpufleet.server.store import NewJob, SubmitAudit

MAX_MISSING = 20  # dependencies on no job told in one answer (each is a look in the store)


async def submit_jobs(
    body: s.JobSubmit, who: Principal, svc: ControllerService, state: Any
) -> list[str]:
    """The ids of the submission's jobs, stored; ``state``: the application's (config,
    secrets). Raises what the router's caller hears (FieldErrors, HTTPException, refusals)."""
    spec, array = await checked(body, who, svc, state)
    deps = tuple((d.type, d.job) for d in body.depends_on)
    key = body.idempotency_key
    jobs: list[NewJob]
    if array is not None:
        jobs = [
            NewJob(
                _task(spec, i),
                depends_on=deps,
                array_index=i,
                array_limit=array.limit,
                idempotency_key=f"{key}#{i}" if key else None,
            )
            for i in array.indexes
        ]
    else:
        jobs = [NewJob(spec, depends_on=deps, idempotency_key=key)]
    return await svc.submit(jobs, SubmitAudit(who.name, who.role, len(jobs), spec.name))


async def checked(
    body: s.JobSubmit, who: Principal, svc: ControllerService, state: Any
) -> tuple[JobSpec, ArraySpec | None]:
    """The submission's spec and array, every check made (``submit_jobs``'s, and sbatch
    --test-only's, which stores nothing); raises as ``submit_jobs``."""
    raw = dict(body.spec)
    if who.role == "user":
        if raw.get("user") not in (None, who.user):
            raise HTTPException(403, f"this token submits as {who.user}, not {raw.get('user')}")
        raw["user"] = who.user
    if body.probe:  # `gpufleet validate`'s probe jobs run as the service account for them
        if who.role != "admin":
            raise HTTPException(403, "only an admin token submits validation probes")
        raw["user"] = state.config.probe_account
    raw.setdefault("user", who.name)
    # the array's size is checked from its text, before the spec is read or anything expanded
    array = None
    if body.array:
        try:
            array = parse_array(body.array, max_size=state.config.max_array_size, source="request")
        except SpecError as e:
            raise FieldErrors([(f"body.{e.field}", e.reason)]) from None
    # every problem at once: the spec's (model/every.py), then admission's of the fields the
    # spec's problems leave alone, in Slurm's words (admission.py)
    read, problems = JobSpec.read_all(raw, source="request", path="spec")
    bad = [(f"body.{e.field}", e.reason) for e in problems]
    missing = await svc.unknown_jobs([d.job for d in body.depends_on], MAX_MISSING)
    bad += [
        (f"body.depends_on[{i}].job", f"job {d.job} does not exist")
        for i, d in enumerate(body.depends_on)
        if d.job in missing
    ]
    if len(missing) >= MAX_MISSING:
        bad.append(("body.depends_on", f"the first {MAX_MISSING} jobs that do not exist are told"))
    refusal = svc.admission(read, who.role) if read is not None else None
    if read is not None:  # the user's Unix accounts on the nodes (looked up if new)
        if refusal is None:
            refusal = Refusal()
        refusal.invalid += await svc.owner_problems(read)
    if refusal and not bad:
        raise FieldErrors(refusal.problems, refusal.status)
    if bad:
        seen = {f for f, _ in bad}
        more = refusal.problems if refusal else []
        raise FieldErrors(bad + [(f, m) for f, m in more if f not in seen])
    assert read is not None
    return state.secrets.resolve(read), array  # each secret exists and is the job's to use


def _task(spec: JobSpec, i: int) -> JobSpec:
    """An array's task ``i``: its name and Slurm's and gpufleet's index variables."""
    env = {**dict(spec.env), "SLURM_ARRAY_TASK_ID": str(i), "GPUFLEET_ARRAY_INDEX": str(i)}
    return replace(spec, name=f"{spec.name}_{i}", env=tuple(sorted(env.items())))
