"""GET /jobs, one page at a time, without stalling the loop that answers the agents.

A page holds at most MAX_PAGE jobs, newest first; its ``Link: <…>; rel="next"`` header (RFC
8288) carries the cursor of the next one (the seq of the last job given, exclusive). The loop
only picks the page's records and copies the few fields a response shows (microseconds a
job); the store's part of a page is read, and the page turned into JSON, in a worker thread.
Listings take turns (one at a time: ``Listings``), so however many clients list at once, the
loop shares the interpreter with one worker thread only and a heartbeat waits milliseconds,
not the sum of everybody's pages (an 8 MB page took ~460 ms on the loop).

Each job's row is kept as its JSON bytes (``Rows``), remade only when something it shows has
changed: a page is then a join of bytes, not a model and its encoding for each job (~0.2 ms a
job: squeue over 2,000 pending jobs spent most of its time here, issue 27)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from fastapi import HTTPException
from pydantic import TypeAdapter

from gpufleet.api import schemas as s
from gpufleet.core.state import JobRecord
from gpufleet.model.job import JobState
from gpufleet.model.reason import Reason
from gpufleet.server.auth import Principal
from gpufleet.server.service import ControllerService
from gpufleet.server.store import StoredJob
from gpufleet.server.views import job_out

MAX_PAGE = 1000
# the spec's fields a listing prints (squeue's formats, gpufleet jobs' table; sacct's state)
BRIEF_SPEC = frozenset({"queues", "time_limit_s", "cpus", "priority", "max_retries"})
_ROW = TypeAdapter(s.JobOut)
ROWS_KEPT = 200_000  # rows cached at most (then the cache starts again: a bound, not an LRU)


@dataclass(frozen=True, slots=True)
class Query:
    user: str | None
    queue: str | None
    state: JobState | None
    all: bool
    limit: int
    before: int | None  # the cursor: only jobs with a smaller seq
    brief: bool = False  # spec: only BRIEF_SPEC (what a listing prints), not the whole

    def keep(self, rec: JobRecord) -> bool:
        j = rec.job
        if (self.user and j.spec.user != self.user) or (self.queue and j.spec.queue != self.queue):
            return False
        if self.before is not None and rec.seq >= self.before:
            return False
        if self.state is not None:
            return j.state is self.state
        return self.all or not j.finished  # FAILED with no retry left has ended too


@dataclass(frozen=True, slots=True)
class Page:
    body: bytes
    next_before: int | None  # the cursor of the next page; None: this was the last


class Rows:
    """Each job's row as JSON bytes, with what it was made from: used again while that is
    unchanged. Only the worker thread of the listing whose turn it is touches it."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, bool], tuple[tuple[Any, ...], bytes]] = {}

    def row(self, rec: JobRecord, reason: Reason | None, brief: bool) -> bytes:
        key = (rec.job.id, brief)
        made_of = _shown(rec, reason)
        hit = self._rows.get(key)
        if hit is not None and hit[0] == made_of:
            return hit[1]
        out = job_out(rec, reason)
        if brief:  # squeue over thousands of jobs: a tenth of the bytes to make, send and read
            out.spec = {k: v for k, v in out.spec.items() if k in BRIEF_SPEC}
        data = _ROW.dump_json(out)
        if len(self._rows) >= ROWS_KEPT:
            self._rows.clear()
        self._rows[key] = (made_of, data)
        return data


def _shown(rec: JobRecord, reason: Reason | None) -> tuple[Any, ...]:
    """Everything ``job_out`` reads of a record (the spec is immutable: compared as the same
    object first, which a tuple's == does), and of its reason (whose == leaves out data)."""
    j = rec.job
    why = None if reason is None else (reason.code, reason.message, reason.estimated_start,
                                       reason.start_low, reason.start_high,
                                       reason.data, reason.slurm)  # fmt: skip
    return (j.spec, j.state, j.attempt, j.retries_used, j.submit_time, j.start_time,
            j.end_time, j.ended, rec.allocation, rec.array_id, rec.array_index, why)  # fmt: skip


class Listings:
    """One page is serialized at a time (see the module's docstring)."""

    def __init__(self) -> None:
        self._turn: asyncio.Semaphore | None = None  # made on the loop that uses it
        self.rows = Rows()

    async def page(self, svc: ControllerService, q: Query) -> Page:
        async with self.turn():
            return await _page(svc, q, self.rows)

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """One listing's turn (a page, or squeue's table: server/squeue.py)."""
        if self._turn is None:
            self._turn = asyncio.Semaphore(1)
        async with self._turn:
            yield


async def _page(svc: ControllerService, q: Query, rows: Rows) -> Page:
    page, cursor = await records(svc, q)
    mine = {r.job.id: svc.reason(r.job.id) for r in page}
    body = await asyncio.to_thread(_serialize, page, mine, q.brief, rows)
    return Page(body, cursor)


async def records(
    svc: ControllerService, q: Query, *, copies: bool = True
) -> tuple[list[JobRecord], int | None]:
    """The page's records, newest first, and the cursor of the next page (None: this was the
    last). ``copies``: what a worker thread may read while the loop goes on changing the
    records; without, the records themselves, for a caller that reads them on the loop (they
    are copied at most a few ms a page, and squeue reads 2,000 fields in less)."""
    _copy = _copied if copies else _same
    want = q.limit + 1  # one more than a page: whether a next page exists
    cut = svc.restored_seq
    # newest first: the jobs this process accepted (all in memory, in seq order), then those
    # it found in the store at start (unfinished ones in memory, finished ones in the store)
    found = [_copy(r) for r in islice(_newer(svc, cut, q), want)]
    scanned: int | None = None  # the store's rows were read down to this seq, and more remain
    if len(found) < want and cut and (q.before is None or q.before > 1):
        top = cut if q.before is None else min(cut, q.before - 1)
        if q.all or q.state is not None:
            need = want - len(found)
            stored = await asyncio.to_thread(_stored, svc, q, top, need)
            if len(stored) == need:  # a row dropped below must not end the listing early
                scanned = stored[-1].seq
            for st in stored:
                rec = svc.job(st.id)
                rec = _copy(rec) if rec is not None else record(st)
                if q.keep(rec):
                    found.append(rec)
        else:  # every unfinished job is in memory
            older = [r for r in svc.job_records() if r.seq <= top and q.keep(r)]
            older.sort(key=lambda r: -r.seq)
            found += [_copy(r) for r in older[: want - len(found)]]
    page = found[: q.limit]
    return page, page[-1].seq if len(found) > q.limit else scanned


async def owned_job(svc: ControllerService, job_id: str, who: Principal) -> JobRecord:
    """The job ``job_id`` as ``who`` may read it: 404 when there is none, 403 when it is
    another user's and ``who`` a user."""
    await svc.until_held(job_id)  # just submitted: the core holds it after this turn's step
    rec = svc.job(job_id)
    if rec is None:
        # after a restart the controller holds only unfinished jobs: the rest are in the store
        stored = svc.stored_job(job_id)
        if stored is None:
            raise HTTPException(404, f"no job {job_id}")
        rec = record(stored)
    if who.role == "user" and rec.job.spec.user != who.user:
        raise HTTPException(
            403, f"job {job_id} belongs to {rec.job.spec.user}; this token is {who.user}'s"
        )
    return rec


async def owned_unfinished_job(svc: ControllerService, job_id: str, who: Principal) -> JobRecord:
    """``owned_job``, and 409 when it has ended: what cancel, hold and update act on."""
    rec = await owned_job(svc, job_id, who)
    if rec.job.finished:
        raise HTTPException(409, f"job {job_id} has already ended ({rec.job.state.value})")
    return rec


def _newer(svc: ControllerService, cut: int, q: Query) -> Iterator[JobRecord]:
    # in seq order, but for the finished jobs a submission's dependency brought back from the
    # store (service.submit): those are skipped, not a reason to stop
    for r in svc.jobs_newest_first():
        if r.seq > cut and q.keep(r):
            yield r


def _stored(svc: ControllerService, q: Query, top: int, n: int) -> list[StoredJob]:
    return svc.stored_jobs(user=q.user, queue=q.queue, state=q.state, limit=n, max_seq=top)


def _same(rec: JobRecord) -> JobRecord:
    return rec


def _copied(rec: JobRecord) -> JobRecord:
    """What a response shows of a record the loop goes on changing: its job's fields (the
    spec is immutable, the allocation a tuple)."""
    return JobRecord(
        copy.copy(rec.job),
        rec.seq,
        rec.allocation,
        rec.borrowing,
        array_id=rec.array_id,
        array_index=rec.array_index,
    )


def record(stored: StoredJob) -> JobRecord:
    """A job only the store holds (it ended before this process started), as a record."""
    return JobRecord(
        stored.to_job(),
        stored.seq,
        stored.allocation,
        stored.borrowing,
        depends_on=stored.depends_on,
        array_id=stored.array_id,
        array_index=stored.array_index,
    )


def _serialize(
    page: list[JobRecord], reasons: dict[str, Reason | None], brief: bool, rows: Rows
) -> bytes:
    """The page's JSON array: what ``TypeAdapter(list[JobOut]).dump_json`` writes, a row at a
    time."""
    return b"[" + b",".join(rows.row(r, reasons[r.job.id], brief) for r in page) + b"]"


def next_link(url: Any, before: int) -> str:
    """The ``Link`` header's value for the page after ``before``: a path, not a full URL, so
    it holds behind a proxy or TLS that the controller does not see."""
    nxt = url.include_query_params(cursor=str(before))
    return f'<{nxt.path}?{nxt.query}>; rel="next"'
