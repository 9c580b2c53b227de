"""GPU-hours per user or queue over a period, from the transitions log.

An attempt runs from its ``→ STARTING`` event to the first event that leaves STARTING or
RUNNING for an end state, or is still running at ``until``. Its share of the period is the
overlap of that interval with ``[since, until)``, times the job's GPUs (whole GPUs, fractions
counted as shares). Plain SQL via Core (CASE rather than LEAST/GREATEST, which SQLite lacks)."""

from __future__ import annotations

from typing import Literal

import sqlalchemy as sa

from gpufleet.model.job import JobState
from gpufleet.model.resources import MILLI
from gpufleet.server.store.records import Usage
from gpufleet.server.store.schema import job_events, jobs

GroupBy = Literal["user", "queue"]
S = JobState
_ENDED = (S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMED_OUT, S.PREEMPTED, S.NODE_LOST)
_ENDS = [s.value for s in _ENDED]


def attempt_bounds(hi: sa.BindParameter[float]) -> tuple[sa.Subquery, sa.Subquery]:
    """Each attempt's start (its first STARTING before ``hi``: ``t0``) and end (its first move
    from STARTING or RUNNING to an end state: ``t1``), by job and attempt: what accounting and
    the fairness figure both charge GPU-time between."""
    e = job_events.c
    starts = (
        sa.select(e.job_id, e.attempt, sa.func.min(e.time).label("t0"))
        .where(e.new_state == S.STARTING.value, e.time < hi)
        .group_by(e.job_id, e.attempt)
        .subquery("starts")
    )
    ends = (
        sa.select(e.job_id, e.attempt, sa.func.min(e.time).label("t1"))
        .where(e.old_state.in_([S.STARTING.value, S.RUNNING.value]), e.new_state.in_(_ENDS))
        .group_by(e.job_id, e.attempt)
        .subquery("ends")
    )
    return starts, ends


def accounting(
    conn: sa.Connection, since: float, until: float, group_by: GroupBy = "user"
) -> list[Usage]:
    if group_by not in ("user", "queue"):
        raise ValueError(f"group_by must be 'user' or 'queue', got {group_by!r}")
    if until < since:
        raise ValueError(f"until ({until}) is before since ({since})")
    lo = sa.bindparam("since", since, type_=sa.Double)
    hi = sa.bindparam("until", until, type_=sa.Double)
    starts, ends = attempt_bounds(hi)
    t1 = sa.func.coalesce(ends.c.t1, hi)
    end = sa.case((t1 < hi, t1), else_=hi)
    begin = sa.case((starts.c.t0 > lo, starts.c.t0), else_=lo)
    key = jobs.c.user if group_by == "user" else jobs.c.queue
    gpu_s = sa.func.sum((end - begin) * jobs.c.total_gpu_milli)
    q = (
        sa.select(
            key.label("key"),
            gpu_s.label("gpu_milli_s"),
            sa.func.count().label("attempts"),
            sa.func.count(sa.distinct(starts.c.job_id)).label("jobs"),
        )
        .select_from(
            starts.join(jobs, jobs.c.id == starts.c.job_id).outerjoin(
                ends, (ends.c.job_id == starts.c.job_id) & (ends.c.attempt == starts.c.attempt)
            )
        )
        .where(t1 > lo)
        .group_by(key)
    )
    rows = [
        Usage(r.key, float(r.gpu_milli_s or 0.0) / MILLI / 3600.0, r.attempts, r.jobs)
        for r in conn.execute(q)
    ]
    return sorted(rows, key=lambda u: (-u.gpu_hours, u.key))
