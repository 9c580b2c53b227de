"""The jobs of a period as the fairness-against-entitlement figure reads them
(``scheduler/entitlement.py``): each job's queue, GPUs, submit and end, and its attempts' runs
(from ``→ STARTING`` to the first event that leaves STARTING or RUNNING for an end state, as
``accounting`` bills them), for every job that wanted GPUs during ``[since, until)``."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.model.job import JobState
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.entitlement import Span
from gpufleet.server.store.accounting import attempt_bounds
from gpufleet.server.store.schema import job_events, jobs

S = JobState
_FINAL = [S.SUCCEEDED.value, S.CANCELLED.value, S.TIMED_OUT.value]  # never followed by more


def spans(conn: sa.Connection, since: float, until: float) -> list[Span]:
    e, j = job_events.c, jobs.c
    hi = sa.bindparam("until", until, type_=sa.Double)
    lo = sa.bindparam("since", since, type_=sa.Double)
    starts, ends = attempt_bounds(hi)
    runs: dict[str, list[tuple[float, float]]] = {}
    q = (
        sa.select(starts.c.job_id, starts.c.t0, ends.c.t1)
        .select_from(
            starts.outerjoin(
                ends, (ends.c.job_id == starts.c.job_id) & (ends.c.attempt == starts.c.attempt)
            )
        )
        .where(sa.func.coalesce(ends.c.t1, hi) > lo)
    )
    for r in conn.execute(q):
        runs.setdefault(r.job_id, []).append((float(r.t0), until if r.t1 is None else r.t1))
    # its end: the record's, else its last final event (a record written without one)
    final = (
        sa.select(e.job_id, sa.func.max(e.time).label("t"))
        .where(e.new_state.in_(_FINAL))
        .group_by(e.job_id)
        .subquery("final")
    )
    end = sa.func.coalesce(j.end_time, final.c.t).label("end")
    wanted = (
        sa.select(j.id, j.queue, j.total_gpu_milli, j.submit_time, end)
        .select_from(jobs.outerjoin(final, final.c.job_id == j.id))
        .where(j.submit_time < hi, sa.or_(end.is_(None), end > lo))
    )
    return [
        Span(r.queue, r.total_gpu_milli / MILLI, r.submit_time, r.end, runs.get(r.id, ()))
        for r in conn.execute(wanted)
    ]
