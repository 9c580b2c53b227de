"""Bearer tokens: users touch their own jobs, admins manage the cluster, agents report only for
their own node. 401 says the token is missing or wrong; 403 says what the role may not do."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, HTTPException, Request


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: str  # user | admin | agent
    user: str | None = None
    node: str | None = None

    @property
    def actor(self) -> str:
        return f"{self.role}:{self.name}"


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenCache:
    """Verified tokens by hash, so a request does not cost a database read; a revoke clears it."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._cache: dict[str, Principal | None] = {}

    def verify(self, secret: str) -> Principal | None:
        h = token_hash(secret)
        if h not in self._cache:
            row = self.store.verify_token(secret)
            self._cache[h] = (
                None if row is None else Principal(row.name, row.role, row.user, row.node)
            )
            if len(self._cache) > 10_000:
                self._cache.clear()
        return self._cache[h]

    def clear(self) -> None:
        self._cache.clear()


async def principal(request: Request) -> Principal:
    """async: no thread-pool hop per request (routers/deps.py)."""
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret:
        raise HTTPException(
            401,
            "missing bearer token: send 'Authorization: Bearer <token>' "
            "(an admin creates one with 'gpufleet token create')",
            headers={"WWW-Authenticate": "Bearer"},
        )
    p: Principal | None = request.app.state.tokens.verify(secret.strip())
    if p is None:
        raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return p


def require(*roles: str) -> Any:
    # one dependency, not a role check on top of ``principal``: FastAPI solves each dependency
    # per request, and this one is on every request
    async def check(request: Request) -> Principal:
        p = await principal(request)
        if p.role not in roles:
            raise HTTPException(
                403, f"{_a(p.role)} {p.role} token may not do this (needs: {', '.join(roles)})"
            )
        return p

    return Depends(check)


def require_node(node: str, p: Principal) -> None:
    if p.role != "agent":
        raise HTTPException(
            403, f"only agent tokens report for nodes (this is {_a(p.role)} {p.role} token)"
        )
    if p.node is not None and p.node != node:
        raise HTTPException(403, f"this agent token is for node {p.node}, not {node}")


def _a(role: str) -> str:
    return "an" if role in ("admin", "agent") else "a"
