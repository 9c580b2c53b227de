"""/gateway/sync: a gateway process (``gpufleet gateway``, ``--gateway remote``; ADR 0044)
says what it serves and its counters, and long-polls for the routes it should serve. Only
the leader answers (the standby gate turns the process to it, as it does agents); a poll that
waited across the end of the lease answers 503, never a deposed leader's routes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, Field

from gpufleet.gateway import ServiceStats
from gpufleet.server.auth import Principal, require
from gpufleet.server.remote_gateway import RemoteGateway, answerable, routes_json
from gpufleet.server.routers.deps import service_any
from gpufleet.server.service import ControllerService

router = APIRouter(tags=["gateway"])
ADMIN = require("admin")
POLL_S = 0.05


class GatewaySync(BaseModel):
    instance: str = Field("", max_length=64, description="the controller process it synced with")
    applied: int = Field(0, ge=0, description="that process's newest version it serves")
    known: int = Field(0, ge=0, description="answer once the version is past this one")
    wait_s: float = Field(0.0, ge=0, le=30, allow_inf_nan=False)
    # service → [requests, 4xx, 5xx, refused by the token check, connections open now]
    # (the counters since the process started)
    stats: dict[str, list[int]] = Field(default_factory=dict, max_length=10_000)
    proxy: str = Field(
        "", max_length=16, description="the proxy it runs (haproxy, nginx, builtin; '' unsaid)"
    )


def _remote(svc: ControllerService) -> RemoteGateway:
    gw = svc.gateway.gateway if svc.gateway is not None else None
    if not isinstance(gw, RemoteGateway):
        raise HTTPException(409, "this controller runs its own proxy (not --gateway remote)")
    return gw


class GatewayRouteOut(BaseModel):
    name: str
    port: int
    token: str
    backends: list[str]  # host:port
    viewers: list[str] = []  # a desktop's: SHA-256 of each token that may open it
    keys: list[str] = []  # a desktop's: each backend's key, in the backends' order


class GatewayRoutesOut(BaseModel):
    """The whole route set the gateway process is to serve, and its version."""

    instance: str
    version: int
    routes: list[GatewayRouteOut]


@router.post("/gateway/sync", response_model=GatewayRoutesOut, operation_id="syncGateway")
async def sync(
    body: GatewaySync,
    request: Request,
    who: Principal = ADMIN,
    svc: ControllerService = Depends(service_any),
) -> Any:
    gw = _remote(svc)
    stats = {k: ServiceStats(*[*v, 0, 0, 0, 0, 0][:5]) for k, v in body.stats.items()}
    gw.report(body.instance, body.applied, stats, body.proxy)
    deadline = time.monotonic() + body.wait_s

    def ready_to_answer() -> bool:  # routes to come: the services a takeover opened
        coming = svc.gateway is not None and bool(svc.gateway.routes)
        return answerable(gw.published(), body.instance, body.known, coming)

    while not ready_to_answer() and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
    ha = getattr(request.app.state, "ha", None)
    if ha is not None and not ha.ready():  # the lease ended while the poll waited
        raise HTTPException(503, "this controller no longer leads: ask the leader")
    published = gw.published()
    if published.version == 0 and not ready_to_answer():
        # never an empty set in place of the routes still on their way: the gateway
        # process serves its last ones meanwhile
        raise HTTPException(503, "this controller has not published its first routes yet")
    return routes_json(published)
