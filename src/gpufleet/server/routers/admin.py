"""/tokens, /audit, /accounting."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request

from gpufleet.api import schemas as s
from gpufleet.api.bounds import Finite, Name
from gpufleet.server.auth import Principal, require
from gpufleet.server.errors import FieldErrors
from gpufleet.server.routers.deps import service, store
from gpufleet.server.service import ControllerService
from gpufleet.server.store import LastAdminToken, Store
from gpufleet.server.store.accounting import GroupBy

router = APIRouter(tags=["admin"])


@router.post("/tokens", response_model=s.TokenOut, status_code=201, operation_id="createToken")
async def create_token(
    body: s.TokenCreate,
    request: Request,
    who: Principal = require("admin"),
    st: Store = Depends(store),
    svc: ControllerService = Depends(service),
) -> Any:
    if body.role == "user" and not body.user:
        raise FieldErrors([("body.user", "a user token needs the user whose jobs it touches")])
    if body.role == "agent" and not body.node:
        raise FieldErrors([("body.node", "an agent token needs the node it reports for")])
    audit = (who.name, who.role, "token.create", body.name, {"role": body.role})
    try:  # the token and its audit entry in one transaction: a 503 means neither exists
        _, secret = st.create_token(
            body.name, body.role, body.user, body.node, svc.clock.now(), audit=audit
        )
    except ValueError as e:
        raise HTTPException(409, str(e)) from None
    request.app.state.tokens.refresh()  # known at once, and no longer a cached failure
    return s.TokenOut(name=body.name, role=body.role, user=body.user, node=body.node, token=secret)


@router.get("/tokens", response_model=list[s.TokenOut], operation_id="listTokens")
async def tokens(_: Principal = require("admin"), st: Store = Depends(store)) -> Any:
    return [s.TokenOut(name=t.name, role=t.role, user=t.user, node=t.node) for t in st.tokens()]


@router.delete("/tokens/{name}", status_code=204, operation_id="revokeToken")
async def revoke(
    name: Name,
    request: Request,
    who: Principal = require("admin"),
    st: Store = Depends(store),
    svc: ControllerService = Depends(service),
) -> None:
    try:
        revoked = st.revoke_token(name)
    except LastAdminToken as e:
        raise HTTPException(409, str(e)) from None
    if not revoked:
        raise HTTPException(404, f"no token named {name}")
    request.app.state.tokens.refresh()
    st.audit(who.name, who.role, "token.revoke", name, {}, time=svc.clock.now())


@router.get("/audit", response_model=list[s.AuditOut], operation_id="getAuditLog")
async def audit(
    _: Principal = require("admin"),
    st: Store = Depends(store),
    limit: int = Query(100, ge=1, le=10_000),
) -> Any:
    # the newest ``limit`` only (the log grows with every submission), read off the loop
    entries = await asyncio.to_thread(st.audit_log, limit=limit, newest_first=True)
    return [
        s.AuditOut(
            time=a.time,
            actor=f"{a.actor_role}:{a.actor}",
            action=a.action,
            target=a.target,
            detail=dict(a.detail),
        )
        for a in entries
    ]


@router.get("/accounting", response_model=list[s.AccountingRow], operation_id="getAccounting")
async def accounting(
    who: Principal = require("user", "admin"),
    st: Store = Depends(store),
    svc: ControllerService = Depends(service),
    since: Finite | None = None,
    until: Finite | None = None,
    by: str = Query("user", pattern="^(user|queue)$"),
) -> Any:
    start, end = since or 0.0, until or svc.clock.now()
    if start > end:
        raise FieldErrors([("query.until", f"must not be before since ({start:g}), got {end:g}")])
    # what runs now is billed up to now, never up to a future --until (as sacct)
    now = svc.clock.now()
    group: GroupBy = "queue" if by == "queue" else "user"  # the pattern allows only these
    rows = st.accounting(start, min(end, now), group) if start <= now else []
    out = [s.AccountingRow(key=r.key, jobs=r.jobs, gpu_hours=r.gpu_hours) for r in rows]
    if who.role == "user" and by == "user":
        out = [r for r in out if r.key == who.user]
    return out
