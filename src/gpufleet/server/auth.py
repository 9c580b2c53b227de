"""Bearer tokens: users touch their own jobs, admins manage the cluster, agents report only for
their own node. 401 says the token is missing or wrong; 403 says what the role may not do; 429
says a client failed too often (ratelimit.py)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cachetools import TTLCache
from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpufleet.server.ratelimit import FailedAuthLimiter
from gpufleet.server.store import Store


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: str  # user | admin | agent | metrics
    user: str | None = None
    node: str | None = None

    @property
    def actor(self) -> str:
        return f"{self.role}:{self.name}"


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenCache:
    """Every active token by the hash of its secret, loaded from the store once and again on
    each create and revoke, so verifying a known token costs no database read. A secret it
    does not know (made behind this process's back, e.g. by another controller) is looked up
    once; a failed lookup is remembered for ``negative_ttl_s`` (bounded), so repeating a bad
    token costs no read either."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], float] = time.monotonic,
        *,
        negative_ttl_s: float = 60.0,
        negative_max: int = 10_000,
    ) -> None:
        self.store = store
        self._known: dict[str, Principal] | None = None  # loaded at the first request
        self._bad: TTLCache[str, bool] = TTLCache(
            maxsize=negative_max, ttl=negative_ttl_s, timer=clock
        )
        self.limiter = FailedAuthLimiter(clock)
        self.lookups = 0  # store reads for secrets not known (tests and benches count them)

    def known(self, secret: str) -> Principal | None:
        """The token if this process knows it as active: no store read, never rate limited."""
        if self._known is None:
            self.refresh()
        assert self._known is not None
        return self._known.get(token_hash(secret))

    def verify(self, secret: str) -> Principal | None:
        p = self.known(secret)
        if p is not None:
            return p
        h = token_hash(secret)
        if h in self._bad:
            return None
        self.lookups += 1
        row = self.store.verify_token(secret)
        if row is None:
            self._bad[h] = True
            return None
        p = _principal(row)
        assert self._known is not None
        self._known[h] = p
        return p

    def refresh(self) -> None:
        """Reload the active tokens (after a create or a revoke) and forget failed lookups: a
        secret refused before may be a token now."""
        self._known = {h: _principal(row) for h, row in self.store.active_tokens()}
        self._bad.clear()


def _principal(row: Any) -> Principal:
    return Principal(row.name, row.role, row.user, row.node)


# The OpenAPI schema's ``bearer`` scheme: FastAPI lists it on every operation that depends on
# it (``require``), and only on those. It reads the header; ``principal`` says what is wrong.
BEARER = HTTPBearer(
    scheme_name="bearer",
    description="a user, admin or agent token ('gpufleet token create'); "
    "an admin token is created at the controller's first start (admin.token); "
    "a metrics token (role metrics) reads /metrics only (metricsToken)",
    auto_error=False,
)


async def principal(
    request: Request, credentials: HTTPAuthorizationCredentials | None
) -> Principal:
    """async: no thread-pool hop per request (routers/deps.py). ``credentials``: the bearer
    token of the Authorization header (None: none, or another scheme)."""
    secret = credentials.credentials if credentials is not None else ""
    if not secret.strip():
        raise HTTPException(
            401,
            "missing bearer token: send 'Authorization: Bearer <token>' "
            "(an admin creates one with 'gpufleet token create')",
            headers={"WWW-Authenticate": "Bearer"},
        )
    tokens: TokenCache = request.app.state.tokens
    secret = secret.strip()
    p = tokens.known(secret)
    if p is not None:  # a valid token first: someone else's failures never limit it
        return p
    client = request.client.host if request.client is not None else "unknown"
    wait = tokens.limiter.retry_after(client)
    if wait is not None:
        raise HTTPException(
            429,
            f"too many failed authentications from {client}: retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )
    p = tokens.verify(secret)
    if p is None:
        tokens.limiter.failed(client)
        raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return p


def require(*roles: str) -> Any:
    # one dependency, not a role check on top of ``principal``: FastAPI solves each dependency
    # per request, and this one is on every request
    async def check(
        request: Request, credentials: HTTPAuthorizationCredentials | None = Security(BEARER)
    ) -> Principal:
        p = await principal(request, credentials)
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
    if p.node is None:  # a token from before tokens had to name their node: it speaks for none
        raise HTTPException(403, "this agent token names no node: create one with --node")
    if p.node != node:
        raise HTTPException(403, f"this agent token is for node {p.node}, not {node}")


def _a(role: str) -> str:
    return "an" if role in ("admin", "agent") else "a"
