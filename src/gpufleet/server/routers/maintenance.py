"""/maintenance: rolling maintenance (``gpufleet maintain``), admins only; the controller drives
each rollout (server/service/maintenance.py), so it survives the CLI and a controller restart."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from gpufleet.api.bounds import Name
from gpufleet.api.maintenance import MaintenanceCreate, MaintenanceOut
from gpufleet.core.rollout import Cancel, Confirmed
from gpufleet.server.auth import Principal, require
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService

router = APIRouter(tags=["maintenance"])
ADMINS = require("admin")


@router.post(
    "/maintenance", response_model=MaintenanceOut, status_code=201, operation_id="startMaintenance"
)
async def create(
    body: MaintenanceCreate, who: Principal = ADMINS, svc: ControllerService = Depends(service)
) -> Any:
    return svc.maintenance_view(await svc.create_maintenance(body, who))


@router.get("/maintenance", response_model=list[MaintenanceOut], operation_id="listMaintenance")
async def listing(_: Principal = ADMINS, svc: ControllerService = Depends(service)) -> Any:
    return [svc.maintenance_view(r) for r in svc.maintenances()]


@router.get("/maintenance/{mid}", response_model=MaintenanceOut, operation_id="showMaintenance")
async def show(mid: Name, _: Principal = ADMINS, svc: ControllerService = Depends(service)) -> Any:
    return svc.maintenance_view(svc.maintenance(mid))


@router.post(
    "/maintenance/{mid}/confirm", response_model=MaintenanceOut, operation_id="confirmMaintenance"
)
async def confirm(
    mid: Name, who: Principal = ADMINS, svc: ControllerService = Depends(service)
) -> Any:
    return svc.maintenance_view(await svc.maintenance_event(mid, Confirmed(who.name), who))


@router.post(
    "/maintenance/{mid}/cancel", response_model=MaintenanceOut, operation_id="cancelMaintenance"
)
async def cancel(
    mid: Name, who: Principal = ADMINS, svc: ControllerService = Depends(service)
) -> Any:
    return svc.maintenance_view(await svc.maintenance_event(mid, Cancel(who.name), who))
