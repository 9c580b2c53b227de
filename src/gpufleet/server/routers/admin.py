"""/tokens, /audit, /accounting, /accounting/fairness."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request

from gpufleet.api import schemas as s
from gpufleet.api.accounting import EntitlementOut
from gpufleet.api.bounds import Finite, Name
from gpufleet.scheduler.entitlement import WINDOW_S, entitlement_fairness
from gpufleet.server.auth import Principal, require
from gpufleet.server.errors import FieldErrors
from gpufleet.server.routers.deps import service, store
from gpufleet.server.service import ControllerService
from gpufleet.server.store import LastAdminToken, Store
from gpufleet.server.store.accounting import GroupBy

router = APIRouter(tags=["admin"])
MAX_FAIRNESS_PERIOD_S = 400 * 86400.0  # /accounting/fairness: 9,600 hourly windows at most


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
    if svc.gateway is not None:
        svc.gateway.viewers_changed()  # a desktop's owner may open it with this one too
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
    if svc.gateway is not None:
        svc.gateway.viewers_changed()  # a desktop's proxy refuses it from its next apply
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
    used = st.gpu_used_hours(start, min(end, now), group) if start <= now else {}
    out = [
        s.AccountingRow(
            key=r.key, jobs=r.jobs, gpu_hours=r.gpu_hours, used_gpu_hours=used.pop(r.key, 0.0)
        )
        for r in rows
    ]
    # used in an hour the period overlaps, by attempts that ran outside the period itself
    out += [
        s.AccountingRow(key=k, jobs=0, gpu_hours=0.0, used_gpu_hours=v) for k, v in used.items()
    ]
    if who.role == "user" and by == "user":
        out = [r for r in out if r.key == who.user]
    return out


@router.get("/accounting/fairness", response_model=EntitlementOut, operation_id="getFairness")
async def fairness(
    who: Principal = require("user", "admin"),
    st: Store = Depends(store),
    svc: ControllerService = Depends(service),
    since: Finite | None = None,
    until: Finite | None = None,
) -> Any:
    """Fairness against entitlement over the period, per hour (default: the last 7 days)."""
    now = svc.clock.now()
    end = min(until or now, now)
    start = since if since is not None else end - 7 * 86400.0
    if start > end:
        raise FieldErrors([("query.until", f"must not be before since ({start:g}), got {end:g}")])
    if end - start > MAX_FAIRNESS_PERIOD_S:  # one array cell per hour: bounded before it is made
        raise FieldErrors(
            [("query.since", f"a period of at most {MAX_FAIRNESS_PERIOD_S / 86400:g} days")]
        )
    weights, gpus = svc.entitlement_terms()
    spans = st.job_spans(start, end)
    f = entitlement_fairness(spans, gpus, weights, until=end, since=start)
    return EntitlementOut(jain=f.jain, windows=f.windows, window_s=WINDOW_S, queues=dict(f.ratio))
