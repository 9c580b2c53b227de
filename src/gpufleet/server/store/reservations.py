"""The reservations table: advance reservations (model/reservation.py) as JSON documents."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from gpufleet.model.reservation import NodeReservation
from gpufleet.server.store.codec import CodecError
from gpufleet.server.store.nodes import _upsert
from gpufleet.server.store.schema import reservations

_KEYS = ("name", "nodes", "start", "end", "users", "maint", "created_by")


def to_dict(r: NodeReservation) -> dict[str, Any]:
    return {
        "name": r.name,
        "nodes": list(r.nodes),
        "start": r.start,
        "end": r.end,
        "users": list(r.users),
        "maint": r.maint,
        "created_by": r.created_by,
    }


def from_dict(d: dict[str, Any]) -> NodeReservation:
    unknown = sorted(set(d) - set(_KEYS))
    if unknown:
        raise CodecError(f"reservation: unknown key {unknown[0]!r}")
    return NodeReservation(
        str(d["name"]),
        tuple(str(n) for n in d["nodes"]),
        float(d["start"]),
        float(d["end"]),
        tuple(str(u) for u in d.get("users", ())),
        bool(d.get("maint", False)),
        str(d.get("created_by", "")),
    )


def put(conn: sa.Connection, r: NodeReservation, now: float) -> None:
    _upsert(conn, reservations, {"name": r.name, "spec": to_dict(r), "updated_time": now})


def delete(conn: sa.Connection, name: str) -> bool:
    return conn.execute(sa.delete(reservations).where(reservations.c.name == name)).rowcount > 0


def all_reservations(conn: sa.Connection) -> list[NodeReservation]:
    q = sa.select(reservations.c.spec).order_by(reservations.c.name)
    docs: list[dict[str, Any]] = list(conn.execute(q).scalars())
    return [from_dict(d) for d in docs]
