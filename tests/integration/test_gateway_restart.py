"""The controller service with its gateway (the built-in proxy, real) on a store on SQLite: a
service's endpoint answers from its creation on, 503 while no replica is ready, and after a
restart of the controller it serves again at once, with the same port and token, before the
core has sent any Routes (the restored services are opened by the restart itself)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gpufleet.base.clock import ManualClock
from gpufleet.core.events import ServiceCreated
from gpufleet.gateway import make_gateway
from gpufleet.model.service import ServiceSpec
from gpufleet.ops.http_backends import Client, free_port
from gpufleet.scheduler.framework import Profile
from gpufleet.server.endpoints import Endpoint, EndpointBook
from gpufleet.server.gateway_executor import ServiceGateway
from gpufleet.server.logs import LogStore
from gpufleet.server.service import ControllerService
from gpufleet.server.store import Store, sqlite_url

T0 = 1_700_000_000.0
WAIT_S = 30.0


def status(e: Endpoint) -> int:
    c = Client(e.port, e.token)
    try:
        return c.get(fresh=True)[0]
    finally:
        if c.conn is not None:
            c.conn.close()


def test_an_endpoint_answers_from_the_creation_and_again_at_once_after_a_restart(
    tmp_path: Path,
) -> None:
    book = tmp_path / "gateway" / "endpoints.json"
    port = free_port()
    spec = ServiceSpec.from_dict(
        {"name": "web", "replicas": 1, "replica": {"user": "alice", "command": ["serve"]}}
    )

    def service(store: Store) -> tuple[ControllerService, ServiceGateway]:
        gw = ServiceGateway(make_gateway("builtin"), EndpointBook(book, port, 1), {})
        svc = ControllerService(
            store, Profile.build(), ManualClock(T0), logs=LogStore(tmp_path / "logs"), gateway=gw
        )
        return svc, gw

    async def first() -> Endpoint:
        store = Store.open(sqlite_url(tmp_path / "db"))
        svc, gw = service(store)
        await svc.start()
        try:
            await svc.event(ServiceCreated(spec))
            await asyncio.wait_for(asyncio.wrap_future(gw.applied), WAIT_S)
            e = gw.endpoint("web")
            assert e is not None
            assert await asyncio.to_thread(status, e) == 503  # no replica is ready (no node)
            return e
        finally:
            await svc.stop()
            store.close()

    async def again(e: Endpoint) -> None:
        store = Store.open(sqlite_url(tmp_path / "db"))
        svc, gw = service(store)
        await svc.start()
        try:
            # opened by the restart itself: the controller has not had a turn yet
            assert gw.routes == {"web": ()} and svc.turns == 0
            assert gw.endpoint("web") == e
            await asyncio.wait_for(asyncio.wrap_future(gw.applied), WAIT_S)
            assert await asyncio.to_thread(status, e) == 503
        finally:
            await svc.stop()
            store.close()
        assert not gw.started

    e = asyncio.run(first())
    asyncio.run(again(e))
