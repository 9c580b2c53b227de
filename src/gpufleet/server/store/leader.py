"""The leader lease in PostgreSQL (ADR 0032): one row, taken by a compare-and-set on what a
standby last saw of it, renewed by its holder, and checked by every write of the leader.

Every statement here is short and bounded (``lock_timeout``): a lease operation that waits
longer than the lease is no use. The times in the row are for people; the lease is timed by
each process on its own monotonic clock (``server/ha/lease.py``)."""

from __future__ import annotations

import json
import time

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from gpufleet.server.store.engine import WRITE
from gpufleet.server.store.records import Deposed, LeaderRow
from gpufleet.server.store.schema import leader, leader_claims

_ROW = 1
# how long a lease statement waits for a row lock (a write of the leader holds a share lock)
LOCK_TIMEOUT_MS = 1000


def _bounded(c: sa.Connection) -> None:
    c.execute(sa.text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
    c.execute(sa.text(f"SET LOCAL statement_timeout = {4 * LOCK_TIMEOUT_MS}"))


def read(engine: sa.Engine) -> LeaderRow | None:
    with engine.connect() as c, c.begin():
        _bounded(c)
        r = c.execute(
            sa.select(leader.c.epoch, leader.c.version, leader.c.holder, leader.c.address).where(
                leader.c.id == _ROW
            )
        ).first()
    return None if r is None else LeaderRow(int(r[0]), int(r[1]), str(r[2]), str(r[3]))


def take(engine: sa.Engine, holder: str, address: str, seen: LeaderRow | None) -> int | None:
    """Lead, if the row is still as ``seen`` (None: there is none yet); the new epoch, or None
    when another changed it first. The epoch rises by one, and at least to the wall clock's
    nanoseconds >> 32 (one unit per 4.3 s), so that epochs rise even across a lost table."""
    floor = time.time_ns() >> 32
    with engine.connect().execution_options(**WRITE) as c, c.begin():
        _bounded(c)
        c.execute(
            postgresql.insert(leader)
            .values(id=_ROW, epoch=0, version=0, holder="", address="", renewed_time=0.0)
            .on_conflict_do_nothing(index_elements=["id"])
        )
        epoch, version = (seen.epoch, seen.version) if seen is not None else (0, 0)
        r = c.execute(
            leader.update()
            .where(leader.c.id == _ROW, leader.c.epoch == epoch, leader.c.version == version)
            .values(
                epoch=sa.func.greatest(leader.c.epoch + 1, floor),
                version=leader.c.version + 1,
                holder=holder,
                address=address,
                renewed_time=time.time(),
            )
            .returning(leader.c.epoch)
        ).first()
        if r is not None:  # every claim was against an older leader: none counts any more
            c.execute(leader_claims.delete())
    return None if r is None else int(r[0])


def renew(engine: sa.Engine, epoch: int) -> int | None:
    """Renew the lease held under ``epoch``: the row's new version, or None when another
    controller took it (deposed)."""
    with engine.connect().execution_options(**WRITE) as c, c.begin():
        _bounded(c)
        r = c.execute(
            leader.update()
            .where(leader.c.id == _ROW, leader.c.epoch == epoch)
            .values(version=leader.c.version + 1, renewed_time=time.time())
            .returning(leader.c.version)
        ).first()
        return None if r is None else int(r[0])


def claim(
    engine: sa.Engine, standby: str, address: str, seen: LeaderRow | None, nodes: frozenset[str]
) -> None:
    """A standby's claim (ADR 0048): ``nodes`` told it lately that they cannot reach the
    leader of the lease as ``seen``; none: the claim is withdrawn."""
    with engine.connect().execution_options(**WRITE) as c, c.begin():
        _bounded(c)
        if not nodes or seen is None:
            c.execute(leader_claims.delete().where(leader_claims.c.standby == standby))
            return
        row = {"address": address, "epoch": seen.epoch, "version": seen.version,
               "nodes": json.dumps(sorted(nodes))}  # fmt: skip
        c.execute(
            postgresql.insert(leader_claims)
            .values(standby=standby, **row)
            .on_conflict_do_update(index_elements=["standby"], set_=row)
        )


def claims(engine: sa.Engine, epoch: int, since: int) -> dict[str, frozenset[str]]:
    """The claims against the leader of ``epoch`` made on a lease of version ``since`` or
    later (fresh: the version counts the leader's renewals, no host's clock is compared), by
    the standby's address."""
    with engine.connect() as c, c.begin():
        _bounded(c)
        rows = c.execute(
            sa.select(leader_claims.c.address, leader_claims.c.nodes).where(
                leader_claims.c.epoch == epoch, leader_claims.c.version >= since
            )
        ).all()
    return {str(a): frozenset(json.loads(str(n))) for a, n in rows}


def let_go(engine: sa.Engine, epoch: int) -> None:
    """Leave the lease (a clean stop): a standby takes it at once instead of a lease later."""
    with engine.connect().execution_options(**WRITE) as c, c.begin():
        _bounded(c)
        c.execute(
            leader.update()
            .where(leader.c.id == _ROW, leader.c.epoch == epoch)
            .values(holder="", address="", version=leader.c.version + 1)
        )


def check(c: sa.Connection, epoch: int) -> None:
    """Inside a write transaction of the leader, first: the lease is still ``epoch``'s, and it
    stays so until this transaction ends (a share lock: a takeover waits for the commit, and a
    deposed leader's write fails here). Raises Deposed."""
    r = c.execute(
        sa.select(leader.c.epoch)
        .where(leader.c.id == _ROW, leader.c.epoch == epoch)
        .with_for_update(read=True)
    ).first()
    if r is None:
        raise Deposed(
            f"this controller no longer leads (its epoch {epoch} was taken over): "
            "nothing was written; ask the leader"
        )


def idle_timeout(engine: sa.Engine, timeout_ms: int) -> None:
    """Sessions of this engine that sit idle inside a transaction longer than this are ended
    by the server: a leader frozen (SIGSTOP) mid-write then holds its share lock on the lease
    row no longer than this, and a standby can take over."""

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: object, _record: object) -> None:
        cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
        cur.execute(f"SET idle_in_transaction_session_timeout = {int(timeout_ms)}")
        cur.close()
        dbapi_conn.commit()  # type: ignore[attr-defined]

    engine.dispose()  # connections made before get the setting too (made again)
