"""Reads a standby serves when a client asks for them, saying how stale they may be (issue 26:
"reads may be served by a standby only where they say how stale they are"; Consul's
``?stale`` reads and their ``X-Consul-LastContact`` / ``X-Consul-KnownLeader`` are the model).

A client sends ``X-Gpufleet-Allow-Stale: true`` with ``GET /api/v1/jobs``, ``/api/v1/jobs/{id}``
or ``/api/v1/nodes``. The leader answers as always (its answer is fresh: ``Last-Contact: 0``).
A standby, which holds nothing in memory, answers from the **store**: the jobs and nodes as the
leader last committed them (the leader commits every step before it acts on it), with

- ``X-Gpufleet-Last-Contact``: milliseconds since this standby last saw the leader renew its
  lease, on the standby's own clock (absent: it never saw a leader). The leader had committed
  everything it had acted on by then: the answer is at most that old, plus the step the
  leader had in hand;
- ``X-Gpufleet-Known-Leader``: ``true`` while a leader holds the lease as this standby last
  read it (``false``: a failover is under way, and the data ages as Last-Contact grows);
- ``X-Gpufleet-Role: standby`` and ``X-Gpufleet-Leader``.

What only the leader's memory holds is left out, not guessed: a pending job's Reason (null),
and a node's liveness beyond what the store says (its state is from its stored flags and the
stored allocations of its running jobs; ``last_heartbeat`` is the last one stored). Every
other request, and these without the header, get the standby's 503 (``gate.py``).

The gate hands such a request to the routes below (``STALE_PREFIX``), in the same application:
its authentication (tokens are in the store) and error shapes hold.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from gpufleet.api import schemas as s
from gpufleet.model.job import JobState
from gpufleet.model.resources import MILLI
from gpufleet.server.auth import Principal, require
from gpufleet.server.listing import next_link, record
from gpufleet.server.routers.deps import store
from gpufleet.server.store import Store
from gpufleet.server.store.records import NodeRecord, StoredJob
from gpufleet.server.views import job_out

ALLOW_HEADER = "x-gpufleet-allow-stale"
LAST_CONTACT_HEADER = "x-gpufleet-last-contact"
KNOWN_LEADER_HEADER = "x-gpufleet-known-leader"
API = "/api/v1"
STALE_PREFIX = "/_standby"  # under the API's prefix; never in the OpenAPI schema
_READS = re.compile(r"/(jobs|jobs/[A-Za-z0-9._\-\[\]]+|nodes)")
ACTIVE = (JobState.STARTING, JobState.RUNNING)
MAX_PAGE = 1000

router = APIRouter(prefix=STALE_PREFIX, include_in_schema=False)
USERS = require("user", "admin")


def stale_target(scope: Any) -> str | None:
    """Where the gate sends ``scope`` on a standby: its stale-read route, or None (not one
    of these reads, or the client did not ask for a stale answer)."""
    if scope["method"] != "GET" or not scope["path"].startswith(API):
        return None
    asked = any(
        k == ALLOW_HEADER.encode() and v.strip().lower() in (b"true", b"1")
        for k, v in scope.get("headers", ())
    )
    rest = scope["path"][len(API) :]
    if not asked or _READS.fullmatch(rest) is None:
        return None
    return f"{API}{STALE_PREFIX}{rest}"


@router.get("/jobs")
async def jobs(
    request: Request,
    who: Principal = USERS,
    st: Store = Depends(store),
    user: str | None = Query(None, max_length=128),
    queue: str | None = Query(None, max_length=128),
    state: str | None = Query(None, max_length=32),
    limit: int = Query(200, ge=1, le=MAX_PAGE),
    all: bool = False,
    cursor: str | None = Query(None, max_length=20),
    brief: bool = False,  # accepted as the leader's is; the whole spec is shown
) -> Any:
    """The jobs as the store holds them, newest first, as the leader lists them (unfinished
    ones unless ``all`` or a ``state``; pages by ``Link``); no Reasons (memory only)."""
    if who.role == "user":
        if user not in (None, who.user):
            raise HTTPException(403, f"this token lists only {who.user}'s jobs, not {user}'s")
        user = who.user
    wanted: JobState | list[JobState] | None = None
    if state is not None:
        try:
            wanted = JobState(state.upper())
        except ValueError:
            raise HTTPException(422, f"unknown state {state!r}") from None
    elif not all:
        wanted = [x for x in JobState if not x.terminal]
    if cursor is not None and not (
        (cursor.isascii() and cursor.isdigit()) and 0 < int(cursor) < 2**63
    ):
        raise HTTPException(422, f"cursor {cursor[:40]!r} is not one from a Link header")
    top = int(cursor) - 1 if cursor is not None else None
    rows = st.list_jobs(user=user, queue=queue, state=wanted, limit=limit, newest_first=True,
                        max_seq=top)  # fmt: skip
    shown = [j for j in rows if all or state is not None or not j.to_job().finished]
    headers = {}
    if len(rows) == limit:
        headers["Link"] = next_link(request.url, rows[-1].seq)
    body = [_job(j).model_dump(mode="json") for j in shown]
    return JSONResponse(body, headers=headers)


@router.get("/jobs/{job_id}")
async def job(job_id: str, who: Principal = USERS, st: Store = Depends(store)) -> Any:
    j = st.job(job_id)
    if j is None:
        raise HTTPException(404, f"no job {job_id}")
    if who.role == "user" and j.spec.user != who.user:
        raise HTTPException(
            403, f"job {job_id} belongs to {j.spec.user}; this token is {who.user}'s"
        )
    return job_out(record(j), None, events=st.job_events(job_id))


@router.get("/nodes")
async def nodes(_: Principal = USERS, st: Store = Depends(store)) -> Any:
    active = st.list_jobs(state=ACTIVE, limit=None)
    return [_node(n, active) for n in st.nodes()]


def _job(j: StoredJob) -> s.JobOut:
    return job_out(record(j), None)


def _node(n: NodeRecord, active: list[StoredJob]) -> s.NodeOut:
    """A node from its stored row and the stored allocations of the jobs running on it."""
    sp = n.spec
    gpu_used = [0] * sp.gpus
    cpu = mem = 0
    jobs_here = []
    for j in active:
        mine = [p for p in j.allocation if p.node == sp.name]
        if mine:
            jobs_here.append(j.id)
        for p in mine:
            for d in p.gpus:
                if 0 <= d < sp.gpus:
                    gpu_used[d] += p.gpu_milli
            cpu += p.cpu_milli
            mem += p.memory_mib
    gpu_free = [max(0, MILLI - u) for u in gpu_used]
    if n.lost:
        state = "lost"
    elif not n.healthy:
        state = "unhealthy"
    elif n.drained:
        state = "drained"
    elif not jobs_here:
        state = "idle"
    else:
        state = "allocated" if gpu_free and all(g == 0 for g in gpu_free) else "mixed"
    return s.NodeOut(
        name=sp.name,
        state=state,
        gpu_model=sp.gpu_model,
        gpus=sp.gpus,
        gpus_free=sum(gpu_free) / MILLI,
        cpu_cores=sp.cpu_milli / MILLI,
        cpu_free=max(0, sp.cpu_milli - cpu) / MILLI,
        memory_gib=sp.memory_mib / 1024,
        memory_free_gib=max(0, sp.memory_mib - mem) / 1024,
        leaf=sp.leaf,
        pod=sp.pod,
        why=n.why,
        labels=dict(n.labels or sp.labels),
        features=list(sp.features),
        gres_type=sp.gpu_type,
        last_heartbeat=n.last_heartbeat,
        jobs=sorted(jobs_here),
        address=n.address,
        driver_version=n.driver_version,
        cuda_version=n.cuda_version,
    )
