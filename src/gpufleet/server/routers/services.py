"""/services: run, list, show, change, scale and remove services (server/service/services.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from gpufleet.api import services as a
from gpufleet.model.service import ServiceSpec
from gpufleet.server.auth import Principal, require
from gpufleet.server.errors import FieldErrors
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService
from gpufleet.server.service.services import merge_patch

router = APIRouter(tags=["services"])
USERS = require("user", "admin")
EVENTS_MAX = 1000


def _secrets(request: Request, spec: ServiceSpec) -> ServiceSpec:
    """Each secret the replica names exists and is its owner's to use (422 otherwise)."""
    replica = request.app.state.secrets.resolve(spec.replica, where="body.spec.replica")
    return replace(spec, replica=replica)


def _named(raw: dict[str, Any], name: str) -> dict[str, Any]:
    if raw.get("name", name) != name:
        raise FieldErrors(
            [("body.spec.name", f"must be the service's name {name!r} (or left out)")]
        )
    return {**raw, "name": name}


async def _update(
    svc: ControllerService, request: Request, who: Principal, raw: dict[str, Any], owner: str
) -> Any:
    """A whole new spec (PUT, or PATCH merged onto the current one): read, secrets checked,
    rolled out; the service as it is then."""
    spec = svc.read_service(raw, who, owner=owner)
    return svc.service_view(await svc.update_service(_secrets(request, spec), who))


@router.post(
    "/services", response_model=a.ServiceOut, status_code=201, operation_id="createService"
)
async def create(
    body: a.ServiceCreate,
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    spec = _secrets(request, svc.read_service(body.spec, who))
    # a desktop's endpoint lets in its viewers' own tokens only: its own token opens nothing
    return svc.service_view(await svc.create_service(spec, who), token=spec.desktop is None)


@router.get("/services", response_model=list[a.ServiceOut], operation_id="listServices")
async def listing(who: Principal = USERS, svc: ControllerService = Depends(service)) -> Any:
    return [svc.service_view(x) for x in svc.visible_services(who)]


@router.get("/services/{name}", response_model=a.ServiceOut, operation_id="getService")
async def show(
    name: a.ServiceName,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
    events: int = Query(50, ge=0, le=EVENTS_MAX, description="how many recent events"),
) -> Any:
    return svc.service_view(svc.owned_service(name, who), events)


@router.put("/services/{name}", response_model=a.ServiceOut, operation_id="replaceService")
async def put(
    name: a.ServiceName,
    body: a.ServiceUpdate,
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    owner = svc.owned_service(name, who).spec.replica.user
    return await _update(svc, request, who, _named(body.spec, name), owner)


@router.patch("/services/{name}", response_model=a.ServiceOut, operation_id="updateService")
async def patch(
    name: a.ServiceName,
    body: a.ServiceUpdate,
    request: Request,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    current = svc.owned_service(name, who)
    raw = merge_patch(current.spec.to_dict(), _named(body.spec, name))
    return await _update(svc, request, who, raw, current.spec.replica.user)


@router.post("/services/{name}/scale", response_model=a.ServiceOut, operation_id="scaleService")
async def scale(
    name: a.ServiceName,
    body: a.ServiceScale,
    who: Principal = USERS,
    svc: ControllerService = Depends(service),
) -> Any:
    x = await svc.scale_service(name, who, body.replicas, body.min, body.max)
    return svc.service_view(x)


@router.post(
    "/services/{name}/token", response_model=a.ServiceOut, operation_id="rotateServiceToken"
)
async def rotate_token(
    name: a.ServiceName, who: Principal = USERS, svc: ControllerService = Depends(service)
) -> Any:
    """A new bearer token for the service's endpoint, shown in this answer only; the old one
    is refused from now on."""
    return svc.service_view(await svc.rotate_service_token(name, who), token=True)


@router.delete("/services/{name}", status_code=204, operation_id="deleteService")
async def remove(
    name: a.ServiceName, who: Principal = USERS, svc: ControllerService = Depends(service)
) -> None:
    await svc.delete_service(name, who)
