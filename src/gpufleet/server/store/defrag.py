"""Each leaf's last defragmentation move (core ``DefragMoved``, ADR 0045), on a connection
inside the caller's transaction: written with the step that made it, read back at a restart
(``Controller.restore(defrag_moves=...)``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from gpufleet.core.commands import DefragMoved
from gpufleet.scheduler.snapshot import DefragMove
from gpufleet.server.store.schema import defrag_moves

__all__ = ["DefragMoved", "all_moves", "move_from_dict", "move_to_dict", "put"]

_M = defrag_moves.c


def move_to_dict(m: DefragMove) -> dict[str, Any]:
    return {
        "for_job": m.for_job,
        "victims": list(m.victims),
        "attempts": list(m.attempts),
        "message": m.message,
        "data": dict(m.data),
        "replacing": list(m.replacing),
    }


def move_from_dict(leaf: str, time: float, d: dict[str, Any]) -> DefragMove:
    return DefragMove(
        leaf,
        float(time),
        str(d["for_job"]),
        tuple(str(v) for v in d["victims"]),
        str(d.get("message", "")),
        dict(d.get("data", {})),
        tuple(str(v) for v in d.get("replacing", ())),
        tuple(int(a) for a in d.get("attempts", ())),
    )


def put(conn: sa.Connection, moved: Sequence[DefragMoved]) -> None:
    """Each move replaces its leaf's last."""
    for c in moved:
        m = c.move
        values = {"time": m.time, "record": move_to_dict(m)}
        done = conn.execute(sa.update(defrag_moves).where(_M.leaf == m.leaf).values(**values))
        if done.rowcount == 0:
            conn.execute(sa.insert(defrag_moves).values(leaf=m.leaf, **values))


def all_moves(conn: sa.Connection) -> list[DefragMove]:
    q = sa.select(defrag_moves).order_by(_M.time)
    return [move_from_dict(r.leaf, r.time, r.record) for r in conn.execute(q)]
