"""/secrets: make, list and remove job secrets (server/secrets.py). No answer holds a value."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from gpufleet.api import secrets as a
from gpufleet.api.bounds import Name
from gpufleet.server.admission import unknown_queue
from gpufleet.server.auth import Principal, require
from gpufleet.server.errors import FieldErrors
from gpufleet.server.secrets import SecretService
from gpufleet.server.store.secrets import SecretInfo

router = APIRouter(tags=["secrets"])
USERS = require("user", "admin")


def _svc(request: Request) -> SecretService:
    svc: SecretService = request.app.state.secrets
    return svc


def _out(i: SecretInfo) -> a.SecretOut:
    return a.SecretOut(
        name=i.name,
        scope=i.scope,  # type: ignore[arg-type]  # the store's check constraint holds it
        owner=i.owner,
        created_by=i.created_by,
        created_time=i.created_time,
        updated_time=i.updated_time,
        last_used_time=i.last_used_time,
    )


def _known_queue(request: Request, scope: str, queue: str | None, field: str) -> None:
    known = request.app.state.service.configured_queues()
    if scope == "queue" and queue not in known:
        raise FieldErrors([(field, unknown_queue(str(queue), known))])


@router.post("/secrets", response_model=a.SecretOut, status_code=201, operation_id="createSecret")
async def create(body: a.SecretCreate, request: Request, who: Principal = USERS) -> Any:
    svc = _svc(request)
    owner = svc.owner_of(who, body.scope, body.user, body.queue, write=True)
    _known_queue(request, body.scope, body.queue, "body.queue")
    info = svc.create(who, body.scope, owner, body.name, body.value, replace=body.replace)
    return _out(info)


@router.get("/secrets", response_model=list[a.SecretOut], operation_id="listSecrets")
async def listing(
    request: Request,
    who: Principal = USERS,
    scope: a.Scope | None = Query(None, description="only this scope"),
) -> Any:
    return [_out(i) for i in _svc(request).listing(who, scope)]


@router.delete("/secrets/{name}", status_code=204, operation_id="deleteSecret")
async def remove(
    name: Name,
    request: Request,
    who: Principal = USERS,
    scope: a.Scope = Query("user"),
    user: Name | None = Query(None, description="scope user, admin tokens: whose secret"),
    queue: Name | None = Query(None, description="scope queue: whose queue"),
) -> None:
    svc = _svc(request)
    owner = svc.owner_of(who, scope, user, queue, write=True, where="query")
    svc.remove(who, scope, owner, name)
