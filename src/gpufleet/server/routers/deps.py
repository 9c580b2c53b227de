"""What routers get from the application: the service, the store, the clock.

Dependencies are ``async def`` (auth.py's too): FastAPI runs a plain ``def`` dependency in its
thread pool, and four thread hops per submission held the service's batches to ~8 jobs and the
API to half its rate (BENCHMARKS.md, "Live cluster")."""

from __future__ import annotations

from fastapi import Request

from gpufleet.server.service import ControllerService
from gpufleet.server.store import Store


async def service(request: Request) -> ControllerService:
    """The service; 503 while it rebuilds its state from the store (store_down.py)."""
    svc: ControllerService = request.app.state.service
    svc.down.check()
    return svc


async def service_any(request: Request) -> ControllerService:
    """The service even while the store is down: agents' heartbeats and command polls."""
    svc: ControllerService = request.app.state.service
    return svc


async def store(request: Request) -> Store:
    """The store, for what only it holds (tokens, the audit log, accounting)."""
    st: Store = request.app.state.store
    return st
