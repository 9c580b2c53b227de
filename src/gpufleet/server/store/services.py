"""Services, their history and their replica jobs, on a connection inside the caller's
transaction. A service's row holds the ServiceMaster's ``RestoredService`` as JSON (every
generation's spec, the rollout, each replica's generation, port and readiness): what a
restart gives back to ``Controller.restore(services=...)``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from gpufleet.core.commands import ReplicaAdded, ServiceEvent, ServiceRecord
from gpufleet.core.services import RestoredReplica, RestoredService
from gpufleet.model.service import ServiceSpec
from gpufleet.server.store.jobs import _BUMP, _INSERT_EVENTS, _INSERT_JOBS, _row, _submitted
from gpufleet.server.store.records import NewJob, StoreError
from gpufleet.server.store.schema import jobs, service_events, services

_SVC = services.c


@dataclass(frozen=True, slots=True)
class ServiceRow:
    name: str
    user: str
    queue: str
    record: RestoredService
    created_time: float
    updated_time: float

    @property
    def spec(self) -> ServiceSpec:
        return dict(self.record.specs)[self.record.generation]


@dataclass(frozen=True, slots=True)
class ServiceEventRecord:
    seq: int
    service: str
    time: float
    what: str
    why: str


# ----- the record as JSON ------------------------------------------------------------------


def record_to_dict(r: RestoredService) -> dict[str, Any]:
    return {
        "specs": [[g, spec.to_dict()] for g, spec in r.specs],
        "generation": r.generation,
        "desired": r.desired,
        "replicas": [
            {
                "job_id": x.job_id,
                "generation": x.generation,
                "index": x.index,
                "port": x.port,
                "created": x.created,
                "ready_since": x.ready_since,
                "stopping": x.stopping,
                "failed": x.failed,
                "moving": list(x.moving),
                "moving_since": x.moving_since,
            }
            for x in r.replicas
        ],
        "previous": r.previous,
        "rollout_since": r.rollout_since,
        "progress_at": r.progress_at,
        "rollout_failures": r.rollout_failures,
        "failures": r.failures,
        "not_before": r.not_before,
        "node_failures": [[n, k] for n, k in r.node_failures],
        "next_index": r.next_index,
        "deleting": r.deleting,
        "note": r.note,
    }


def record_from_dict(d: dict[str, Any]) -> RestoredService:
    specs = tuple(
        (int(g), ServiceSpec.from_dict(spec, source="store", path=f"specs[{i}]"))
        for i, (g, spec) in enumerate(d["specs"])
    )
    return RestoredService(
        specs,
        int(d["generation"]),
        int(d["desired"]),
        tuple(
            RestoredReplica(
                str(x["job_id"]),
                int(x["generation"]),
                int(x["index"]),
                int(x["port"]),
                float(x["created"]),
                x["ready_since"],
                bool(x["stopping"]),
                str(x["failed"]),
                tuple(str(n) for n in x.get("moving", ())),
                x.get("moving_since"),
            )
            for x in d["replicas"]
        ),
        d["previous"],
        d["rollout_since"],
        float(d["progress_at"]),
        int(d["rollout_failures"]),
        int(d["failures"]),
        float(d["not_before"]),
        tuple((str(n), int(k)) for n, k in d["node_failures"]),
        int(d["next_index"]),
        bool(d["deleting"]),
        str(d["note"]),
    )


# ----- writing (the step commit) -----------------------------------------------------------


def add_replicas(conn: sa.Connection, added: Sequence[ReplicaAdded], now: float) -> None:
    """Each replica's job row (its Transition to PENDING follows in the same transaction),
    numbered from the jobs' counter like any job, linked to its service and generation."""
    if not added:
        return
    n = len(added)
    start: int = conn.execute(_BUMP, {"n": n}).scalar_one() - n
    rows = []
    for k, a in enumerate(added):
        row = _row(a.job_id, start + k + 1, NewJob(a.spec, now), None)
        row["service"], row["generation"] = a.service, a.generation
        rows.append(row)
    conn.execute(_INSERT_JOBS, rows)
    conn.execute(_INSERT_EVENTS, [_submitted(r) for r in rows])


def put_records(conn: sa.Connection, records: Sequence[ServiceRecord], now: float) -> None:
    """Upsert each service's row, or delete it (a record of None: the service is gone)."""
    for r in records:
        if r.record is None:
            conn.execute(sa.delete(services).where(_SVC.name == r.service))
            continue
        spec = dict(r.record.specs)[r.record.generation]
        values = {
            "user": spec.replica.user,
            "queue": spec.replica.queue,
            "spec": spec.to_dict(),
            "record": record_to_dict(r.record),
            "updated_time": now,
        }
        done = conn.execute(sa.update(services).where(_SVC.name == r.service).values(**values))
        if done.rowcount == 0:
            conn.execute(sa.insert(services).values(name=r.service, created_time=now, **values))


def add_events(conn: sa.Connection, events: Sequence[ServiceEvent]) -> None:
    if events:
        conn.execute(
            sa.insert(service_events),
            [{"service": e.service, "time": e.time, "what": e.what, "why": e.why} for e in events],
        )


# ----- reading -----------------------------------------------------------------------------


def _service_row(r: sa.Row[Any]) -> ServiceRow:
    try:
        record = record_from_dict(r.record)
    except (KeyError, TypeError, ValueError) as e:
        raise StoreError(f"service {r.name}: its stored record does not read back ({e})") from e
    return ServiceRow(r.name, r.user, r.queue, record, r.created_time, r.updated_time)


def all_services(conn: sa.Connection, user: str | None = None) -> list[ServiceRow]:
    q = sa.select(services).order_by(_SVC.name)
    if user is not None:
        q = q.where(_SVC.user == user)
    return [_service_row(r) for r in conn.execute(q)]


def service(conn: sa.Connection, name: str) -> ServiceRow | None:
    r = conn.execute(sa.select(services).where(_SVC.name == name)).first()
    return None if r is None else _service_row(r)


def events(conn: sa.Connection, name: str, limit: int | None) -> list[ServiceEventRecord]:
    """The newest ``limit`` events of a service, oldest first."""
    e = service_events.c
    q = sa.select(service_events).where(e.service == name).order_by(e.seq.desc())
    if limit is not None:
        q = q.limit(limit)
    rows = [ServiceEventRecord(r.seq, r.service, r.time, r.what, r.why) for r in conn.execute(q)]
    return rows[::-1]


def next_index(conn: sa.Connection, name: str) -> int:
    """The first replica number a new service of this name may use: after every replica job
    a service of that name ever had (job ids are never reused)."""
    ids: list[str] = list(
        conn.execute(sa.select(jobs.c.id).where(jobs.c.service == name)).scalars()
    )
    top = 0
    for job_id in ids:
        tail = str(job_id).rpartition(".")[2]
        if tail.isdigit():
            top = max(top, int(tail))
    return top + 1
