"""Nodes, their events, and queues, on a connection inside the caller's transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gpufleet.core.commands import NodeEvent
from gpufleet.model.queue import QueueSpec
from gpufleet.server.store.codec import (
    node_spec_from_dict,
    node_spec_to_dict,
    queue_from_dict,
    queue_to_dict,
)
from gpufleet.server.store.records import NodeEventRecord, NodeRecord
from gpufleet.server.store.schema import node_events, nodes, queues

# What a NodeEvent's ``what`` means for the node's flags.
_FLAGS: dict[str, dict[str, bool]] = {
    "lost": {"lost": True},
    "drained": {"drained": True},
    "resumed": {"drained": False, "lost": False},
    "unhealthy": {"healthy": False},
    "healthy": {"healthy": True},
    # the heal loop's steps (core/heal.py): the node's reason is the step's; given up, drained
    "remediating": {},
    "burning in": {},
    "heal failed": {},
    "rma": {"drained": True},
}


def _upsert(
    conn: sa.Connection, table: sa.Table, row: dict[str, Any], keep: Sequence[str] = ()
) -> None:
    """INSERT … ON CONFLICT (primary key) DO UPDATE, in either dialect's spelling."""
    ins = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert(table).values(row)
    pk = [c.name for c in table.primary_key.columns]
    changed = {k: ins.excluded[k] for k in row if k not in pk and k not in keep}
    conn.execute(ins.on_conflict_do_update(index_elements=pk, set_=changed))


def upsert_node(conn: sa.Connection, n: NodeRecord) -> None:
    row = {
        "name": n.name,
        "spec": node_spec_to_dict(n.spec),
        "address": n.address,
        "labels": dict(n.labels),
        "healthy": n.healthy,
        "drained": n.drained,
        "lost": n.lost,
        "why": n.why,
        "last_heartbeat": n.last_heartbeat,
        "driver_version": n.driver_version,
        "cuda_version": n.cuda_version,
        "gpu_info": [dict(g) for g in n.gpu_info],
    }
    _upsert(conn, nodes, row, keep=("drained",))  # an admin's drain outlives re-registration


def heartbeats(conn: sa.Connection, beats: Mapping[str, float]) -> None:
    if beats:
        stmt = (
            sa.update(nodes)
            .where(nodes.c.name == sa.bindparam("b_name"))
            .values(last_heartbeat=sa.bindparam("b_time"))
        )
        conn.execute(stmt, [{"b_name": k, "b_time": t} for k, t in beats.items()])


def set_node(conn: sa.Connection, name: str, values: dict[str, Any]) -> bool:
    if not values:
        return conn.execute(sa.select(nodes.c.name).where(nodes.c.name == name)).first() is not None
    return conn.execute(sa.update(nodes).where(nodes.c.name == name).values(values)).rowcount > 0


def add_node_events(conn: sa.Connection, evs: Sequence[NodeEvent]) -> None:
    if not evs:
        return
    conn.execute(
        sa.insert(node_events),
        [{"node": e.node, "time": e.time, "what": e.what, "why": e.why} for e in evs],
    )
    for e in evs:  # few per batch, and order matters (drained then resumed)
        flags = _FLAGS.get(e.what)
        if flags:
            set_node(conn, e.node, {**flags, "why": e.why})


def _record(r: sa.Row[Any]) -> NodeRecord:
    return NodeRecord(
        node_spec_from_dict(r.spec),
        r.address,
        dict(r.labels),
        r.healthy,
        r.drained,
        r.lost,
        r.why,
        r.last_heartbeat,
        r.driver_version,
        r.cuda_version,
        tuple(r.gpu_info),
    )


def node(conn: sa.Connection, name: str) -> NodeRecord | None:
    r = conn.execute(sa.select(nodes).where(nodes.c.name == name)).first()
    return None if r is None else _record(r)


def all_nodes(conn: sa.Connection) -> list[NodeRecord]:
    return [_record(r) for r in conn.execute(sa.select(nodes).order_by(nodes.c.name))]


def events(conn: sa.Connection, name: str | None, limit: int | None) -> list[NodeEventRecord]:
    e = node_events.c
    q = sa.select(node_events).order_by(e.seq.desc())
    if name is not None:
        q = q.where(e.node == name)
    if limit is not None:
        q = q.limit(limit)
    rows = [NodeEventRecord(r.seq, r.node, r.time, r.what, r.why) for r in conn.execute(q)]
    return rows[::-1]  # the newest ``limit``, oldest first


def put_queue(conn: sa.Connection, spec: QueueSpec, now: float) -> None:
    _upsert(conn, queues, {"name": spec.name, "spec": queue_to_dict(spec), "updated_time": now})


def delete_queue(conn: sa.Connection, name: str) -> bool:
    return conn.execute(sa.delete(queues).where(queues.c.name == name)).rowcount > 0


def queue(conn: sa.Connection, name: str) -> QueueSpec | None:
    r = conn.execute(sa.select(queues.c.spec).where(queues.c.name == name)).first()
    return None if r is None else queue_from_dict(r.spec)


def all_queues(conn: sa.Connection) -> list[QueueSpec]:
    q = sa.select(queues.c.spec).order_by(queues.c.name)
    specs: list[dict[str, Any]] = list(conn.execute(q).scalars())
    return [queue_from_dict(s) for s in specs]
