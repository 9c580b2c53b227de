"""What routers get from the application: the service, the store, the clock."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from gpufleet.server.service import ControllerService


def service(request: Request) -> ControllerService:
    svc: ControllerService = request.app.state.service
    return svc


def store(request: Request) -> Any:
    return request.app.state.store
