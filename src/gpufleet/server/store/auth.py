"""Tokens (only their SHA-256 is stored) and the audit log."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa

from gpufleet.server.store.records import (
    ROLES,
    AuditEntry,
    LastAdminToken,
    Role,
    StoreError,
    TokenInfo,
)
from gpufleet.server.store.schema import audit, tokens

PREFIX = "gf_"  # makes a leaked secret easy to recognise (secret scanners, logs)


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(
    conn: sa.Connection, name: str, role: str, user: str | None, node: str | None, now: float
) -> tuple[TokenInfo, str]:
    if role not in ROLES:
        raise StoreError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if role == "user" and not user:
        raise StoreError("a user token needs the user it acts for")
    if role == "agent" and not node:
        raise StoreError("an agent token needs the node it reports for")
    if not name:
        raise StoreError("a token needs a name")
    secret = new_secret()
    row = {
        "name": name,
        "role": role,
        "user": user if role == "user" else None,
        "node": node if role == "agent" else None,
        "secret_sha256": digest(secret),
        "created_time": now,
        "revoked_time": None,
    }
    if conn.execute(sa.select(tokens.c.id).where(tokens.c.name == name)).first() is not None:
        raise StoreError(f"a token named {name!r} exists already")
    tid: int = conn.execute(sa.insert(tokens).values(row).returning(tokens.c.id)).scalar_one()
    return _info_of(tid, row), secret


def verify_token(conn: sa.Connection, secret: str) -> TokenInfo | None:
    """The active token with this secret, or None (unknown or revoked)."""
    h = digest(secret)
    r = conn.execute(sa.select(tokens).where(tokens.c.secret_sha256 == h)).first()
    # The lookup is by hash, so its timing tells nothing about the secret; the compare is
    # constant-time anyway in case an index ever matches on a prefix.
    if r is None or not hmac.compare_digest(r.secret_sha256, h) or r.revoked_time is not None:
        return None
    return _info(r)


def has_admin(conn: sa.Connection) -> bool:
    t = tokens.c
    q = sa.select(t.id).where(t.role == "admin", t.revoked_time.is_(None)).limit(1)
    return conn.execute(q).first() is not None


def revoke_token(conn: sa.Connection, name: str, now: float) -> bool:
    """False: no active token of that name. The last active admin token is never revoked
    (LastAdminToken): without one nobody could manage the cluster or make a new admin."""
    t = tokens.c
    # the active admin rows locked (PostgreSQL; SQLite's write lock is held already), so two
    # revokes at once cannot each leave the other's token as the last and revoke both
    active_admins: set[str] = set(
        conn.execute(
            sa.select(t.name).where(t.role == "admin", t.revoked_time.is_(None)).with_for_update()
        ).scalars()
    )
    if active_admins == {name}:
        raise LastAdminToken(
            f"token {name!r} is the last active admin token: create another admin token "
            "before revoking it"
        )
    stmt = sa.update(tokens).where(t.name == name, t.revoked_time.is_(None))
    return conn.execute(stmt.values(revoked_time=now)).rowcount > 0


def free_name(conn: sa.Connection, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``…: the first name no token has (revoked ones keep
    theirs, so a revoked bootstrap ``admin`` does not block making a new one)."""
    taken: set[str] = set(
        conn.execute(
            sa.select(tokens.c.name).where(
                sa.or_(tokens.c.name == base, tokens.c.name.like(f"{base}-%"))
            )
        ).scalars()
    )
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def active_tokens(conn: sa.Connection) -> list[tuple[str, TokenInfo]]:
    """(SHA-256 of the secret, token) of every active token: what the server keeps in memory,
    so that verifying a token costs no database read."""
    q = sa.select(tokens).where(tokens.c.revoked_time.is_(None))
    return [(r.secret_sha256, _info(r)) for r in conn.execute(q)]


def list_tokens(conn: sa.Connection, include_revoked: bool) -> list[TokenInfo]:
    q = sa.select(tokens).order_by(tokens.c.id)
    if not include_revoked:
        q = q.where(tokens.c.revoked_time.is_(None))
    return [_info(r) for r in conn.execute(q)]


def _info(r: sa.Row[Any]) -> TokenInfo:
    return _info_of(r.id, dict(r._mapping))


def _info_of(tid: int, m: Mapping[str, Any]) -> TokenInfo:
    return TokenInfo(
        tid,
        m["name"],
        cast(Role, m["role"]),
        m["user"],
        m["node"],
        m["created_time"],
        m["revoked_time"],
    )


def add_audit(
    conn: sa.Connection,
    time: float,
    actor: str,
    actor_role: str,
    action: str,
    target: str,
    detail: Mapping[str, Any],
) -> int:
    row = {
        "time": time,
        "actor": actor,
        "actor_role": actor_role,
        "action": action,
        "target": target,
        "detail": dict(detail),
    }
    return int(conn.execute(sa.insert(audit).values(row).returning(audit.c.seq)).scalar_one())


def add_audits(
    conn: sa.Connection,
    time: float,
    rows: Sequence[tuple[str, str, str, str, Mapping[str, Any]]],
) -> None:
    """(actor, role, action, target, detail) rows at one time, as one executemany."""
    if rows:
        conn.execute(
            sa.insert(audit),
            [
                {
                    "time": time,
                    "actor": actor,
                    "actor_role": role,
                    "action": action,
                    "target": target,
                    "detail": dict(detail),
                }
                for actor, role, action, target, detail in rows
            ],
        )


def audit_log(
    conn: sa.Connection,
    *,
    actor: str | None,
    target: str | None,
    since: float | None,
    after: int | None,
    limit: int | None,
    newest_first: bool = False,
) -> list[AuditEntry]:
    a = audit.c
    q = sa.select(audit).order_by(a.seq.desc() if newest_first else a.seq)
    if actor is not None:
        q = q.where(a.actor == actor)
    if target is not None:
        q = q.where(a.target == target)
    if since is not None:
        q = q.where(a.time >= since)
    if after is not None:
        q = q.where(a.seq > after)
    if limit is not None:
        q = q.limit(limit)
    return [
        AuditEntry(r.seq, r.time, r.actor, r.actor_role, r.action, r.target, r.detail)
        for r in conn.execute(q)
    ]
