"""Jobs and their transitions, on a connection inside the caller's transaction."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from gpufleet.core.commands import Transition
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.job_end import JobEnd
from gpufleet.server.store.bodies import BODY, KEY, SPEC_TEXT, STAMP, Bodies, Body, spec_digest
from gpufleet.server.store.codec import (
    allocation_from_list,
    allocation_to_list,
    in_row_queue,
    spec_from_dict,
    spec_to_dict,
)
from gpufleet.server.store.records import (
    DEPENDENCY_KINDS,
    IdempotencyConflict,
    JobEvent,
    JobUpdate,
    NewJob,
    StoredJob,
    StoreError,
)
from gpufleet.server.store.schema import NAME_MAX, counters, job_events, jobs

S = JobState
# FAILED is unfinished only while retries remain (model.job.Job.finished).
_LIVE = (S.PENDING, S.STARTING, S.RUNNING, S.PREEMPTED, S.NODE_LOST)
_ACTIVE = sa.or_(
    jobs.c.state.in_([s.value for s in _LIVE]),
    (jobs.c.state == S.FAILED.value) & (jobs.c.retries_used < jobs.c.max_retries),
)
# Statements built once: building one costs more CPU than running it on SQLite.
_C = counters.c
_BUMP = (
    sa.update(counters)
    .where(_C.name == "job")
    .values(value=_C.value + sa.bindparam("n"))
    .returning(_C.value)
)
_SET_COUNTER = sa.update(counters).where(_C.name == "job").values(value=sa.bindparam("v"))
_BY_KEY = sa.select(jobs.c.idempotency_key, jobs.c.id, jobs.c.user, jobs.c.spec).where(
    jobs.c.idempotency_key.in_(sa.bindparam("keys", expanding=True))
)
_KNOWN = sa.select(jobs.c.id).where(jobs.c.id.in_(sa.bindparam("ids", expanding=True)))
_INSERT_JOBS = sa.insert(jobs)
_INSERT_EVENTS = sa.insert(job_events)
_UPDATE = (
    sa.update(jobs)
    .where(jobs.c.id == sa.bindparam("b_id"))
    .values(
        state=sa.bindparam("b_state"),
        attempt=sa.bindparam("b_attempt"),
        retries_used=sa.bindparam("b_retries_used"),
        start_time=sa.bindparam("b_start_time"),
        end_time=sa.bindparam("b_end_time"),
        ended=sa.bindparam("b_ended", type_=sa.JSON),
        hold=sa.bindparam("b_hold"),
        eligible_time=sa.bindparam("b_eligible_time"),
        attained_gpu_s=sa.bindparam("b_attained_gpu_s"),
        allocation=sa.bindparam("b_allocation", type_=sa.JSON),
        borrowing=sa.bindparam("b_borrowing"),
        queue=sa.func.coalesce(sa.bindparam("b_queue", type_=sa.String), jobs.c.queue),
    )
)
_UPDATE_SPEC = (
    sa.update(jobs)
    .where(jobs.c.id == sa.bindparam("b_id"))
    .values(spec=sa.bindparam("b_spec", type_=sa.JSON))
)
_UPDATE_STATE = (
    sa.update(jobs)
    .where(jobs.c.id == sa.bindparam("b_id"))
    .values(state=sa.bindparam("b_state"), attempt=sa.bindparam("b_attempt"))
)


# ----- writing ---------------------------------------------------------------------------


def encode_specs(new: Sequence[NewJob]) -> list[dict[str, Any]]:
    """The batch's specs as stored: worked out before the transaction (``add_jobs``'s
    ``specs``), so that a batch's CPU is not spent holding its locks (a leader's write
    transaction idle longer than the fencing's guard is ended by PostgreSQL)."""
    return [spec_to_dict(nj.spec) for nj in new]


def add_jobs(
    conn: sa.Connection,
    new: Sequence[NewJob],
    now: float,
    known: set[str] | None = None,
    specs: Sequence[dict[str, Any]] | None = None,
) -> list[str]:
    """Insert a batch (executemany); ids in input order. A key seen before gives back the
    id of the job it created (added to ``known``, where given); the same key twice in one
    batch means one job. ``specs``: ``encode_specs(new)``, if worked out already."""
    new = [nj if nj.submit_time is not None else replace(nj, submit_time=now) for nj in new]
    for i, nj in enumerate(new):
        _check(i, nj)
    if not new:
        return []
    encoded = list(specs) if specs is not None else encode_specs(new)
    first: dict[str, int] = {}  # idempotency key → index of its first job in the batch
    for i, nj in enumerate(new):
        if nj.idempotency_key is not None:
            first.setdefault(nj.idempotency_key, i)
    # Reserve an id for every job that may be new. The counter row is also the lock: with it
    # held, the key check below sees every commit before ours (PostgreSQL READ COMMITTED;
    # SQLite holds the write lock already).
    wanted = sum(1 for i, nj in enumerate(new) if _first_of_key(nj, first, i))
    start: int = conn.execute(_BUMP, {"n": wanted}).scalar_one() - wanted
    last = start
    ids: list[str | None] = [None] * len(new)
    for known_key, known_id in _existing(conn, new, first, encoded).items():
        ids[first[known_key]] = known_id
        if known is not None:
            known.add(known_id)
    _check_dependencies(conn, new)
    rows: list[dict[str, Any]] = []
    array_head: dict[int, str] = {}  # array_group → the id of its first job
    for i, nj in enumerate(new):
        if ids[i] is not None or not _first_of_key(nj, first, i):
            continue
        last += 1
        job_id = str(last)
        ids[i] = job_id
        array_id: str | None = nj.array_id
        if nj.array_index is not None and array_id is None:
            array_id = array_head.setdefault(nj.array_group, job_id)
        rows.append(_row(job_id, last, nj, array_id, encoded[i]))
    for i, nj in enumerate(new):
        if ids[i] is None and nj.idempotency_key is not None:
            ids[i] = ids[first[nj.idempotency_key]]
    if rows:
        conn.execute(_INSERT_JOBS, rows)
        conn.execute(_INSERT_EVENTS, [_submitted(r) for r in rows])
    if last < start + wanted:  # some keys existed: give back the ids reserved for them
        conn.execute(_SET_COUNTER, {"v": last})
    return [str(x) for x in ids]


def _first_of_key(nj: NewJob, first: dict[str, int], i: int) -> bool:
    """Whether job ``i`` of the batch is not a repeat of an earlier key in the same batch."""
    return nj.idempotency_key is None or first[nj.idempotency_key] == i


def _check(i: int, nj: NewJob) -> None:
    where = f"jobs[{i}]"
    if not isinstance(nj.spec, JobSpec):
        raise StoreError(f"{where}: spec must be a JobSpec, got {type(nj.spec).__name__}")
    for what, value in (("user", nj.spec.user), ("queue", nj.spec.queue)):
        if not 0 < len(value) <= NAME_MAX:  # the column's width, checked alike on both dialects
            raise StoreError(f"{where}: {what} must be 1 to {NAME_MAX} characters")
    if nj.submit_time is None or not math.isfinite(nj.submit_time):
        raise StoreError(f"{where}: submit_time must be a finite number")
    if nj.array_index is not None and nj.array_index < 0:
        raise StoreError(f"{where}: array_index must be >= 0, got {nj.array_index}")
    if nj.array_id is not None and nj.array_index is None:
        raise StoreError(f"{where}: array_id needs an array_index")
    if nj.array_limit is not None and (nj.array_index is None or nj.array_limit < 1):
        raise StoreError(f"{where}: array_limit must be >= 1, on an array task")
    key = nj.idempotency_key
    if key is not None and not 0 < len(key) <= 200:
        raise StoreError(f"{where}: idempotency_key must be 1 to 200 characters")
    for kind, _ in nj.depends_on:
        if kind not in DEPENDENCY_KINDS:
            raise StoreError(f"{where}: unknown dependency type {kind!r} (afterok, afterany)")


def _existing(
    conn: sa.Connection,
    new: Sequence[NewJob],
    first: dict[str, int],
    specs: Sequence[dict[str, Any]],
) -> dict[str, str]:
    if not first:
        return {}
    found = conn.execute(_BY_KEY, {"keys": list(first)}).all()
    out: dict[str, str] = {}
    for key, job_id, user, spec in found:
        key, job_id = str(key), str(job_id)
        nj = new[first[key]]
        if user != nj.spec.user or spec != specs[first[key]]:
            raise IdempotencyConflict(
                f"jobs[{first[key]}]: idempotency key {key!r} was used for job {job_id}, "
                "a different submission"
            )
        out[key] = job_id
    return out


def _check_dependencies(conn: sa.Connection, new: Sequence[NewJob]) -> None:
    wanted = {dep for nj in new for _, dep in nj.depends_on}
    if not wanted:
        return
    known: set[str] = set(conn.execute(_KNOWN, {"ids": list(wanted)}).scalars())
    for i, nj in enumerate(new):
        for kind, dep in nj.depends_on:
            if dep not in known:
                raise StoreError(f"jobs[{i}]: dependency {kind}:{dep} is not a known job")


def _row(
    job_id: str, seq: int, nj: NewJob, array_id: str | None, spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The job's row; ``spec``: its ``spec_to_dict``, if worked out already."""
    s = nj.spec
    return {
        "id": job_id,
        "seq": seq,
        "user": s.user,
        "queue": s.queue,
        "state": S.PENDING.value,
        "attempt": 0,
        "retries_used": 0,
        "max_retries": s.max_retries,
        "total_gpu_milli": s.total_gpu_milli,
        "submit_time": nj.submit_time,
        "start_time": None,
        "end_time": None,
        "ended": None,
        "hold": "user" if s.hold else "",
        "eligible_time": 0.0,
        "attained_gpu_s": 0.0,
        "spec": spec if spec is not None else spec_to_dict(s),
        "allocation": [],
        "borrowing": False,
        "depends_on": [list(d) for d in nj.depends_on],
        "array_id": array_id,
        "array_index": nj.array_index,
        "array_limit": nj.array_limit,
        "idempotency_key": nj.idempotency_key,
    }


def _submitted(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "job_id": row["id"],
        "time": row["submit_time"],
        "attempt": 0,
        "old_state": None,
        "new_state": S.PENDING.value,
        "why": "submitted",
    }


def apply_transitions(
    conn: sa.Connection, transitions: Sequence[Transition], updates: Sequence[JobUpdate]
) -> None:
    """Append the transitions to job_events and update the rows (executemany). A job with no
    JobUpdate takes the state and attempt of its last transition. ``old is None`` marks the
    controller's "submitted" transition, which ``add_jobs`` recorded already."""
    events = [_event(t) for t in transitions if t.old is not None]
    if events:
        conn.execute(_INSERT_EVENTS, events)
    full = {u.id: u for u in updates}
    last = {t.job_id: t for t in transitions if t.job_id not in full}
    _update(conn, _UPDATE, [_update_row(u) for u in full.values()])
    # a spec changed (scontrol update, ADR 0076): rare, so its own statement
    specs = [{"b_id": u.id, "b_spec": spec_to_dict(u.spec)} for u in updates if u.spec is not None]
    _update(conn, _UPDATE_SPEC, specs)
    rows = [
        {"b_id": t.job_id, "b_state": t.new.value, "b_attempt": t.attempt} for t in last.values()
    ]
    _update(conn, _UPDATE_STATE, rows)


def _update(conn: sa.Connection, stmt: sa.Update, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    n = conn.execute(stmt, rows).rowcount
    if conn.dialect.supports_sane_multi_rowcount and n != len(rows):
        ids = [r["b_id"] for r in rows]
        known: set[str] = set(conn.execute(_KNOWN, {"ids": ids}).scalars())
        missing = sorted(set(ids) - known)
        raise StoreError(f"unknown job {missing[0] if missing else '?'}; nothing applied")


def _event(t: Transition) -> dict[str, Any]:
    return {
        "job_id": t.job_id,
        "time": t.time,
        "attempt": t.attempt,
        "old_state": t.old.value if t.old is not None else None,
        "new_state": t.new.value,
        "why": t.why,
    }


def _update_row(u: JobUpdate) -> dict[str, Any]:
    return {
        "b_id": u.id,
        "b_state": u.state.value,
        "b_attempt": u.attempt,
        "b_retries_used": u.retries_used,
        "b_start_time": u.start_time,
        "b_end_time": u.end_time,
        "b_ended": None if u.ended is None else u.ended.to_dict(),
        "b_hold": u.held,
        "b_eligible_time": u.eligible_time,
        "b_attained_gpu_s": u.attained_gpu_s,
        "b_allocation": allocation_to_list(u.allocation),
        "b_borrowing": u.borrowing,
        "b_queue": u.queue,
    }


# ----- reading ---------------------------------------------------------------------------


def job(conn: sa.Connection, job_id: str) -> StoredJob | None:
    row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
    return None if row is None else _stored(row)


def list_jobs(
    conn: sa.Connection,
    *,
    user: str | None,
    queue: str | None,
    state: JobState | Collection[JobState] | None,
    limit: int | None,
    after: str | None,
    newest_first: bool = False,
    max_seq: int | None = None,
) -> list[StoredJob]:
    q = sa.select(jobs).order_by(jobs.c.seq.desc() if newest_first else jobs.c.seq)
    if max_seq is not None:
        q = q.where(jobs.c.seq <= max_seq)
    if user is not None:
        q = q.where(jobs.c.user == user)
    if queue is not None:
        q = q.where(jobs.c.queue == queue)
    if isinstance(state, JobState):
        q = q.where(jobs.c.state == state.value)
    elif state is not None:
        q = q.where(jobs.c.state.in_([s.value for s in state]))
    if after is not None:
        q = q.where(jobs.c.seq > sa.select(jobs.c.seq).where(jobs.c.id == after).scalar_subquery())
    if limit is not None:
        q = q.limit(limit)
    return [_stored(r) for r in conn.execute(q)]


def unfinished(
    conn: sa.Connection, known: Bodies | None = None
) -> tuple[list[StoredJob], list[StoredJob]]:
    """Unfinished jobs in seq order, and the finished jobs they depend on. ``known``: bodies
    read ahead (a standby's, ADR 0059): only the mutable columns are read of those jobs, and
    the bodies of the others are read and decoded into it."""
    if known is None:
        q = sa.select(jobs).where(_ACTIVE).order_by(jobs.c.seq)
        active = [_stored(r) for r in conn.execute(q)]
    else:
        active = _unfinished_known(conn, known)
    have = {j.id for j in active}
    deps = {d for j in active for _, d in j.depends_on} - have
    done = _by_ids(conn, deps)
    return active, done


def _unfinished_known(conn: sa.Connection, known: Bodies) -> list[StoredJob]:
    """Each unfinished job's key and mutable columns (raw); the job read ahead where they
    did not change, else built from its body and them; the rows not read ahead read whole."""
    q = sa.select(*KEY, *STAMP, SPEC_TEXT).where(_ACTIVE).order_by(jobs.c.seq)
    heads = conn.execute(q).all()
    had: dict[str, Body] = {}
    missing = []
    for h in heads:
        b = known.get(h.id, h.seq, h.submit_time)
        if b is None or b.spec_digest != spec_digest(h.spec):  # a spec rewritten since
            missing.append(h.id)
        else:
            had[h.id] = b
    for k in range(0, len(missing), 500):  # keep IN lists well under driver limits
        q = sa.select(*BODY).where(jobs.c.id.in_(missing[k : k + 500]))
        had.update(known.add_rows(conn.execute(q)))
    n, m = len(KEY), len(KEY) + len(STAMP)
    return [had[h.id].now(tuple(h[n:m])) for h in heads]


def bodies_after(conn: sa.Connection, cursor: int, span: int) -> tuple[list[sa.Row[Any]], int, int]:
    """A standby's tail (ADR 0059): the ``BODY`` rows of the unfinished jobs whose ``seq`` is
    in ``(cursor, cursor + span]``, undecoded (the caller decodes them after its transaction);
    the ``seq`` read up to and the newest stored, in the same snapshot (the caller's). A range
    of ``seq``, not a LIMIT: each read scans its range of the index only (with a LIMIT,
    PostgreSQL sorted every unfinished job after the cursor at each read)."""
    newest = int(conn.execute(sa.select(sa.func.max(jobs.c.seq))).scalar() or 0)
    upto = min(cursor + span, newest)
    q = sa.select(*BODY).where(jobs.c.seq > cursor, jobs.c.seq <= upto, _ACTIVE)
    return list(conn.execute(q).all()), upto, newest


def unfinished_ids(conn: sa.Connection) -> set[str]:
    return set(conn.execute(sa.select(jobs.c.id).where(_ACTIVE)).scalars())


def _by_ids(conn: sa.Connection, ids: Iterable[str]) -> list[StoredJob]:
    ids = list(ids)
    out: list[StoredJob] = []
    for k in range(0, len(ids), 500):  # keep IN lists well under driver limits
        q = sa.select(jobs).where(jobs.c.id.in_(ids[k : k + 500]))
        out.extend(_stored(r) for r in conn.execute(q))
    return sorted(out, key=lambda j: j.seq)


def events(conn: sa.Connection, job_id: str) -> list[JobEvent]:
    e = job_events.c
    q = sa.select(job_events).where(e.job_id == job_id).order_by(e.seq)
    return [
        JobEvent(
            r.seq,
            r.job_id,
            r.time,
            r.attempt,
            None if r.old_state is None else JobState(r.old_state),
            JobState(r.new_state),
            r.why,
        )
        for r in conn.execute(q)
    ]


def _stored(r: sa.Row[Any]) -> StoredJob:
    """A row as read."""
    return StoredJob(
        r.id,
        r.seq,
        in_row_queue(spec_from_dict(r.spec), r.queue),
        JobState(r.state),
        r.attempt,
        r.retries_used,
        r.submit_time,
        r.start_time,
        r.end_time,
        r.eligible_time,
        r.attained_gpu_s,
        allocation_from_list(r.allocation),
        r.borrowing,
        tuple((str(k), str(d)) for k, d in r.depends_on),
        r.array_id,
        r.array_index,
        r.idempotency_key,
        r.array_limit,
        JobEnd.from_dict(r.ended),
        r.hold,
    )
