"""Job secrets' rows: sealed values (server/secrets_box.py) and what is shown of them."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from gpufleet.server.store.records import StoreError
from gpufleet.server.store.schema import secrets

Key = tuple[str, str, str]  # (scope, owner, name)


class SecretExists(StoreError):
    """A secret of that scope, owner and name exists already (and replacing was not asked)."""


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """What anyone is ever shown of a secret: never its value."""

    scope: str
    owner: str
    name: str
    created_by: str
    created_time: float
    updated_time: float
    last_used_time: float | None


@dataclass(frozen=True, slots=True)
class SealedRow:
    info: SecretInfo
    key_id: str
    nonce: bytes
    ciphertext: bytes = b""

    def __repr__(self) -> str:  # a log line or traceback shows no ciphertext either
        return f"SealedRow({self.info!r}, key_id={self.key_id!r})"


def put(
    conn: sa.Connection,
    info: SecretInfo,
    key_id: str,
    nonce: bytes,
    ciphertext: bytes,
    *,
    replace: bool,
) -> bool:
    """Store a sealed value; True when it is new, False when it replaced one (``replace``)."""
    c = secrets.c
    where = (c.scope == info.scope, c.owner == info.owner, c.name == info.name)
    old = conn.execute(sa.select(c.id, c.created_time).where(*where).with_for_update()).first()
    sealed = {"key_id": key_id, "nonce": nonce, "ciphertext": ciphertext}
    if old is not None:
        if not replace:
            raise SecretExists(f"secret {info.name!r} exists already (replace it with --update)")
        conn.execute(
            sa.update(secrets)
            .where(c.id == old.id)
            .values(updated_time=info.updated_time, **sealed)
        )
        return False
    conn.execute(sa.insert(secrets).values(**_info_row(info), **sealed))
    return True


def get(conn: sa.Connection, scope: str, owner: str, name: str) -> SealedRow | None:
    c = secrets.c
    r = conn.execute(
        sa.select(secrets).where(c.scope == scope, c.owner == owner, c.name == name)
    ).first()
    return None if r is None else SealedRow(_info(r), r.key_id, bytes(r.nonce), bytes(r.ciphertext))


def get_many(conn: sa.Connection, keys: Collection[Key]) -> dict[Key, SealedRow]:
    """The rows of these (scope, owner, name) that exist, in one query."""
    if not keys:
        return {}
    c = secrets.c
    q = sa.select(secrets).where(sa.tuple_(c.scope, c.owner, c.name).in_(list(keys)))
    rows = (
        SealedRow(_info(r), r.key_id, bytes(r.nonce), bytes(r.ciphertext)) for r in conn.execute(q)
    )
    return {(r.info.scope, r.info.owner, r.info.name): r for r in rows}


def exists(
    conn: sa.Connection, keys: Collection[tuple[str, str, str]]
) -> set[tuple[str, str, str]]:
    """Which of these (scope, owner, name) exist."""
    if not keys:
        return set()
    c = secrets.c
    q = sa.select(c.scope, c.owner, c.name).where(
        sa.tuple_(c.scope, c.owner, c.name).in_(list(keys))
    )
    return {(r.scope, r.owner, r.name) for r in conn.execute(q)}


def listing(
    conn: sa.Connection, *, scope: str | None = None, owners: Collection[str] | None = None
) -> list[SecretInfo]:
    """Scope, owner and name order; ``owners``: only these owners."""
    c = secrets.c
    q = sa.select(secrets).order_by(c.scope, c.owner, c.name)
    if scope is not None:
        q = q.where(c.scope == scope)
    if owners is not None:
        q = q.where(c.owner.in_(list(owners)))
    return [_info(r) for r in conn.execute(q)]


def delete(conn: sa.Connection, scope: str, owner: str, name: str) -> bool:
    c = secrets.c
    stmt = sa.delete(secrets).where(c.scope == scope, c.owner == owner, c.name == name)
    return conn.execute(stmt).rowcount > 0


def used(conn: sa.Connection, keys: Collection[tuple[str, str, str]], now: float) -> None:
    c = secrets.c
    for scope, owner, name in keys:
        conn.execute(
            sa.update(secrets)
            .where(c.scope == scope, c.owner == owner, c.name == name)
            .values(last_used_time=now)
        )


def _info_row(info: SecretInfo) -> dict[str, Any]:
    return {
        "scope": info.scope,
        "owner": info.owner,
        "name": info.name,
        "created_by": info.created_by,
        "created_time": info.created_time,
        "updated_time": info.updated_time,
        "last_used_time": info.last_used_time,
    }


def _info(r: sa.Row[Any]) -> SecretInfo:
    return SecretInfo(
        r.scope, r.owner, r.name, r.created_by, r.created_time, r.updated_time, r.last_used_time
    )
