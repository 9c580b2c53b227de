"""/reservations: advance reservations and maintenance windows (as Slurm's ``scontrol
create|show|delete reservation``): admins create and remove them, everyone may list them; the
logic is server/service/reservations.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response

from gpufleet.api.bounds import Name
from gpufleet.api.reservations import ReservationCreate, ReservationOut
from gpufleet.server.auth import Principal, require
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService

router = APIRouter(tags=["reservations"])
ADMINS = require("admin")
READERS = require("user", "admin")  # whom a job may name in --reservation, users see too


@router.post(
    "/reservations",
    response_model=ReservationOut,
    status_code=201,
    operation_id="createReservation",
)
async def create(
    body: ReservationCreate, who: Principal = ADMINS, svc: ControllerService = Depends(service)
) -> Any:
    return svc.reservation_view(await svc.create_reservation(body, who))


@router.get("/reservations", response_model=list[ReservationOut], operation_id="listReservations")
async def listing(_: Principal = READERS, svc: ControllerService = Depends(service)) -> Any:
    return [svc.reservation_view(r) for r in svc.reservations()]


@router.get("/reservations/{name}", response_model=ReservationOut, operation_id="showReservation")
async def show(
    name: Name, _: Principal = READERS, svc: ControllerService = Depends(service)
) -> Any:
    return svc.reservation_view(svc.reservation(name))


@router.delete("/reservations/{name}", status_code=204, operation_id="deleteReservation")
async def remove(
    name: Name, who: Principal = ADMINS, svc: ControllerService = Depends(service)
) -> Response:
    await svc.remove_reservation(name, who)
    return Response(status_code=204)
