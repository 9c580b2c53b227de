"""squeue, run by the controller (``POST /squeue``): the jobs its command line selects, printed
in its format from the records themselves, so that the ``squeue`` shim imports next to nothing
and squeue over thousands of jobs makes, sends and reads no JSON for them (issue 27: at most
60 ms over 2,000 jobs). The same selection as the shim's own path (``cli/selection.py`` over
``GET /jobs``), the same table (``io/slurm_style.py``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from gpufleet.api.squeue import JobsTable
from gpufleet.core.state import JobRecord
from gpufleet.io import jobs_table as table
from gpufleet.io import slurm_style, squeue_command
from gpufleet.io.squeue_command import Squeue
from gpufleet.model.job import JobState
from gpufleet.model.reason import Reason
from gpufleet.model.resources import MILLI
from gpufleet.server.auth import Principal
from gpufleet.server.listing import BRIEF_SPEC, Listings, Query, owned_job, records
from gpufleet.server.service import ControllerService

LIMIT = 10_000  # as the shim's own path lists (cli/selection.py)
ENDED = frozenset({"SUCCEEDED", "CANCELLED", "TIMED_OUT"})  # cli/selection.py's


@dataclass(frozen=True)
class Printed:
    out: str
    errors: list[str]
    code: int


class Refused(Exception):
    """squeue's listing refused as ``GET /jobs`` refuses it (a user token asking for another
    user's jobs): the status and detail the shim's own path would print."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class _Spec:
    """The brief spec a listing prints (``listing.BRIEF_SPEC``), read from the spec itself."""

    __slots__ = ("_spec",)

    def __init__(self, spec: Any) -> None:
        self._spec = spec

    def get(self, key: str, default: Any = None) -> Any:
        if key not in BRIEF_SPEC:
            return default
        value = getattr(self._spec, key, default)
        return list(value) if isinstance(value, tuple) else value


class _Node:
    __slots__ = ("node",)

    def __init__(self, node: str) -> None:
        self.node = node


class Row:
    """A record as ``views.job_out`` shows it, in the fields squeue's table reads."""

    __slots__ = ("array_id", "array_index", "end_time", "ended", "gpus", "id", "name",
                 "placement", "queue", "reason", "spec", "start_time", "state", "submit_time",
                 "user", "workers")  # fmt: skip

    def __init__(self, rec: JobRecord, reason: Reason | None) -> None:
        j = rec.job
        sp = j.spec
        self.id, self.name, self.user, self.queue = j.id, sp.name, sp.user, sp.queue
        self.array_id, self.array_index = rec.array_id, rec.array_index
        self.state = j.state.value
        self.submit_time, self.start_time, self.end_time = j.submit_time, j.start_time, j.end_time
        self.gpus, self.workers = sp.total_gpu_milli / MILLI, sp.workers
        self.spec = _Spec(sp)
        shown = self.state in ("STARTING", "RUNNING") or j.finished
        self.ended = j.ended if j.finished else None  # model/job_end.py's, as JobOut's reads
        self.placement = [_Node(p.node) for p in rec.allocation] if shown else []
        self.reason = reason if self.state == "PENDING" and reason is not None else None


async def squeue(svc: ControllerService, listings: Listings, who: Principal, q: Squeue) -> Printed:
    # a lookup through NSS (LDAP, SSSD) may wait: never on the loop, which answers heartbeats
    q, unresolved = await asyncio.to_thread(squeue_command.named_users, q)
    errors: list[str] = []
    async with listings.turn():
        rows, failed = await _select(svc, who, q, errors)
        listed_users = {j.user for j in rows}
        unknown = [n for n in unresolved if n not in listed_users and not await _seen(svc, who, n)]
        errors[:0] = [squeue_command.invalid_user(n) for n in unknown]  # squeue's first words
        if failed and not rows:
            return Printed("", errors, 1)
        now = svc.clock.now()
        try:
            text = await asyncio.to_thread(
                slurm_style.render, q.fmt, rows, header=q.header, now=now
            )
        except ValueError as e:  # a table over slurm_style.MAX_TABLE: refused, not made
            return Printed("", [*errors, str(e)], 1)
    return Printed(text, errors, 1 if failed else 0)


async def _select(
    svc: ControllerService, who: Principal, q: Squeue, errors: list[str]
) -> tuple[list[Row], bool]:
    # each Row is made from the record as soon as it is had, on the loop, with no await in
    # between: the records are the core's own (no copies), which the loop goes on changing
    failed = False
    # the table prints the code only (no estimated start worked out), but for --start's
    why = svc.reason if q.by_start else svc.reason_code_of
    rows: list[Row] = []
    if q.job_ids is not None:
        ids = [x.strip() for x in q.job_ids.split(",") if x.strip()]
        rows, unknown = await _asked(svc, who, ids, why)
        # as Slurm 22.05's squeue: one id asked and not known is an error (its slurm_load_job's
        # words, nothing on stdout, exit 1); of several, those not known are left out
        if unknown and len(ids) == 1:
            failed = True
            errors.append(squeue_command.INVALID)
    else:
        rows = [Row(r, why(r.job.id)) for r in await _listed(svc, who, q)]
    rows = _of(rows, q.wanted, q.names)
    if q.users is not None:
        rows = [j for j in rows if j.user in q.users]
    if q.partitions is not None:
        rows = [j for j in rows if slurm_style.in_partitions(j, q.partitions)]
    return squeue_command.arranged(rows, q), failed


async def _asked(
    svc: ControllerService, who: Principal, ids: list[str], why: Any
) -> tuple[list[Row], list[str]]:
    """The jobs of ``-j``: a job, an array's id (every task of it), ``ARRAY_N`` (that task),
    as Slurm's squeue; and the ids of none."""
    rows: dict[str, Row] = {}
    unknown: list[str] = []
    for jid in ids:
        head, _, index = jid.partition("_")
        try:
            rec = await owned_job(svc, head, who)
        except HTTPException:
            unknown.append(jid)
            continue
        if rec.array_id != head and not index:
            rows.setdefault(rec.job.id, Row(rec, why(rec.job.id)))
            continue
        every = await listed(svc, who, None, None, None, True, LIMIT)
        tasks = [r for r in every if slurm_style.task_of(r, head, index)]
        for r in tasks:
            rows.setdefault(r.job.id, Row(r, why(r.job.id)))
        if not tasks:
            unknown.append(jid)
    return list(rows.values()), unknown


def _of(rows: list[Row], wanted: set[str] | None, names: str | None) -> list[Row]:
    """Those in one of the ``wanted`` states and of one of the comma list's ``names``."""
    if wanted is not None:
        rows = [j for j in rows if j.state in wanted]
    if names is not None:
        keep = {n.strip() for n in names.split(",")}
        rows = [j for j in rows if j.name in keep]
    return rows


async def _listed(svc: ControllerService, who: Principal, q: Squeue) -> list[JobRecord]:
    """What ``GET /jobs`` lists for the shim's own path: one user's, one state's, the ended
    ones too only when ``-t`` asks for an ended state. A user's token sees only that user's
    jobs (as Slurm's PrivateData=jobs): ``-u`` of another lists none, and is no error."""
    every = q.states_given and (q.wanted is None or any(w in ENDED or w == "FAILED"
                                                       for w in q.wanted))  # fmt: skip
    if who.role == "user" and q.one_user not in (None, who.user):
        return []  # GET /jobs refuses it (403): the shim's own path lists none either
    return await listed(svc, who, q.one_user, None, q.wanted, every, LIMIT)


async def _seen(svc: ControllerService, who: Principal, name: str) -> bool:
    """Whether a job of ``name``, in any state, is one ``who`` may see."""
    if who.role == "user" and name != who.user:
        return False
    return bool(await listed(svc, who, name, None, None, True, 1))


async def listed(
    svc: ControllerService,
    who: Principal,
    user: str | None,
    queue: str | None,
    wanted: set[str] | None,
    every: bool,
    limit: int,
) -> list[JobRecord]:
    """The records ``GET /jobs?user&queue&state&all&limit`` lists (newest first), as they
    are: read them on the loop, before anything awaits."""
    if who.role == "user":
        if user not in (None, who.user):
            raise Refused(403, f"this token lists only {who.user}'s jobs, not {user}'s")
        user = who.user
    one = next(iter(wanted)) if wanted is not None and len(wanted) == 1 else None
    await svc.until_held()  # a job answered just now is listed (held after its turn's step)
    query = Query(user, queue, JobState(one) if one else None, every, limit, None, brief=True)
    return (await records(svc, query, copies=False))[0]


async def jobs_table(
    svc: ControllerService, listings: Listings, who: Principal, t: JobsTable
) -> tuple[str, int] | None:
    """``gpufleet jobs``'s plain table (``io/jobs_table.py``) and how many jobs it lists, as
    its own path over ``GET /jobs`` prints it to a pipe ``t.width`` wide; None where that path
    would print something else (a job id not found, a cell rich would fold)."""
    wanted = set(t.states) if t.states is not None else None
    async with listings.turn():
        rows: list[Row] = []
        if t.job_ids is not None:
            for jid in (x.strip() for x in t.job_ids.split(",") if x.strip()):
                try:
                    rec = await owned_job(svc, jid, who)
                except HTTPException:
                    return None
                rows.append(Row(rec, svc.reason_code_of(jid)))
        else:
            recs = await listed(svc, who, t.user, t.queue, wanted, t.all, t.limit)
            rows = [Row(r, svc.reason_code_of(r.job.id)) for r in recs]
        rows = _of(rows, wanted, t.names)
        if not rows:
            return "", 0
        now = svc.clock.now()
        text = await asyncio.to_thread(_table, rows, now, t.width)
    return None if text is None else (text, len(rows))


def _table(rows: list[Row], now: float, width: int) -> str | None:
    cells = [table.cells(j, now) for j in rows]
    return table.plain_table(table.COLUMNS, cells, table.RIGHT, width)
