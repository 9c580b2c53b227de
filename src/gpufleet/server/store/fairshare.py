"""The fair-share ledger's rows: saved whole, read whole."""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa

from gpufleet.server.store.schema import fairshare_usage


def save(conn: sa.Connection, values: Mapping[str, float], as_of: float) -> None:
    """Replace the ledger (a handful of rows: one per queue)."""
    conn.execute(sa.delete(fairshare_usage))
    if values:
        conn.execute(
            sa.insert(fairshare_usage),
            [{"queue": q, "usage": float(u), "as_of": as_of} for q, u in values.items()],
        )


def load(conn: sa.Connection) -> tuple[dict[str, float], float | None]:
    """The ledger and the time it was saved at (None: never saved)."""
    rows = conn.execute(sa.select(fairshare_usage)).all()
    if not rows:
        return {}, None
    return {r.queue: float(r.usage) for r in rows}, max(float(r.as_of) for r in rows)
