"""The server's gateway executor with a real proxy in front of real backend processes on
127.0.0.1: the core's Routes become the proxy's config (nodes mapped to their agents'
addresses), the endpoint needs the service's token, the Kill of a replica that left the routes
waits for the apply and the drain after it, the endpoint survives a restart, a new service's
endpoint answers 503 before it has a backend, a removed service's endpoint closes, and the
request rate comes from the proxy's counters, without the requests refused for a bad token."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gatewayfakes import Agents, Link
from gpufleet.core.commands import Kill, RouteBackend, Routes, ServiceRecord
from gpufleet.core.events import ServiceLoad
from gpufleet.core.services import RestoredService
from gpufleet.gateway import make_gateway
from gpufleet.ops.http_backends import BackendProcess, Client, free_port
from gpufleet.server.endpoints import EndpointBook
from gpufleet.server.gateway_executor import ServiceGateway, WithGateway
from realparts import require

WAIT_S = 30.0


@pytest.fixture(params=["haproxy", "nginx", "builtin"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param != "builtin":
        require(request.param)
    return str(request.param)


@pytest.fixture
def backends() -> Iterator[list[BackendProcess]]:
    procs = [BackendProcess(f"b{i}") for i in range(2)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()


@pytest.fixture
def book_path(tmp_path: Path) -> Path:
    return tmp_path / "gateway" / "endpoints.json"


@pytest.fixture
def gw(kind: str, book_path: Path) -> Iterator[ServiceGateway]:
    links = {"n1": Link("127.0.0.1"), "n2": Link("127.0.0.1")}
    g = ServiceGateway(make_gateway(kind), EndpointBook(book_path, free_port(), 1), links)
    try:
        yield g
    finally:
        g.stop()


def served_by(client: Client, n: int) -> set[bytes]:
    out = set()
    for _ in range(n):
        status, body = client.get(fresh=True)
        assert status == 200, (status, body)
        out.add(body.split()[0])
    close(client)
    return out


def close(client: Client) -> None:
    """Its connection closed (the proxy stops with none open)."""
    if client.conn is not None:
        client.conn.close()
        client.conn = None


def test_routes_reach_the_proxy_with_the_token_and_a_leaving_replica_is_killed_after_the_drain(
    gw: ServiceGateway, backends: list[BackendProcess], book_path: Path
) -> None:
    agents = Agents()
    later: list[tuple[float, Callable[[], None]]] = []
    hops: queue.Queue[Callable[[], None]] = queue.Queue()  # back on the "loop": this thread
    ex = WithGateway(agents, gw, lambda d, f: later.append((d, f)), hops.put)
    b0, b1 = backends
    one, two = RouteBackend("llm.1", "n1", b0.port), RouteBackend("llm.2", "n2", b1.port)
    assert not gw.started  # no service yet: no proxy
    ex.apply([Routes("llm", (one, two))])
    gw.applied.result(WAIT_S)
    e = gw.endpoint("llm")
    assert e is not None and gw.started
    assert served_by(Client(e.port, e.token), 8) == {b"b0", b"b1"}
    for token in (None, "x" * 43):  # no token, a wrong one: nothing reaches a replica
        c = Client(e.port, token)
        assert c.get(fresh=True)[0] == 401
        close(c)

    # llm.2 leaves: the routes change at once, its Kill waits for the drain; others go now
    other = Kill("batch-7", 1, (0,), "cancelled")
    gone = Kill("llm.2", 1, (0,), "scaled down")
    ex.apply([Routes("llm", (one,)), gone, other])
    assert agents.sent == [other] and later == []
    gw.applied.result(WAIT_S)  # the proxy routes to llm.1 only: the drain begins
    hops.get(timeout=WAIT_S)()
    assert [d for d, _ in later] == [gw.drain_s] and gw.drain_s == 2.0
    assert served_by(Client(e.port, e.token), 6) == {b"b0"}  # b1 still runs, gets nothing
    later[0][1]()  # the drain is over
    assert agents.sent == [other, gone]

    # the endpoint is the same after a restart (the book is on disk, 0600)
    assert os.stat(book_path).st_mode & 0o777 == 0o600
    again = EndpointBook(book_path, e.port, 1).get("llm")
    assert again == e

    # a removed service: its endpoint closes, its port and token are freed
    ex.apply([Routes("llm", ()), ServiceRecord("llm", None)])
    gw.applied.result(WAIT_S)
    assert gw.endpoint("llm") is None and json.loads(book_path.read_text()) == {}
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", e.port), timeout=2):
        pass


def test_a_new_service_answers_503_until_it_has_a_backend(
    gw: ServiceGateway, backends: list[BackendProcess]
) -> None:
    ex = WithGateway(Agents(), gw, lambda d, f: None, lambda f: None)
    ex.apply([ServiceRecord("llm", RestoredService((), 1, 1))])  # its creation
    gw.applied.result(WAIT_S)
    e = gw.endpoint("llm")
    assert e is not None
    c = Client(e.port, e.token)
    assert c.get(fresh=True)[0] == 503  # the proxy answers: no refused connection
    close(c)
    ex.apply([Routes("llm", (RouteBackend("llm.1", "n1", backends[0].port),))])
    gw.applied.result(WAIT_S)
    assert served_by(Client(e.port, e.token), 2) == {b"b0"}


def sample(gw: ServiceGateway, now: float) -> list[ServiceLoad]:
    return asyncio.run(gw.sample(now))


def test_the_request_rate_comes_from_the_proxys_counters_and_a_reset_counts_from_zero(
    gw: ServiceGateway, backends: list[BackendProcess]
) -> None:
    gw.on_routes(Routes("llm", (RouteBackend("llm.1", "n1", backends[0].port),)))
    gw.applied.result(WAIT_S)
    e = gw.endpoint("llm")
    assert e is not None
    assert sample(gw, 100.0) == []  # the first sample: nothing to compare with
    for token in (None, "x" * 43):  # refused by the proxy: no load
        for _ in range(3):
            bad = Client(e.port, token)
            assert bad.get(fresh=True)[0] == 401
            close(bad)
    client = Client(e.port, e.token)
    served_by(client, 10)
    client.get(fresh=True)  # and one more: 11 in 2 s
    close(client)
    assert wait_load(gw, 102.0, 11 / 2.0) == ServiceLoad("llm", 5.5, 102.0)

    gw.stop()  # a restarted proxy counts from 0 again
    gw.on_routes(Routes("llm", (RouteBackend("llm.1", "n1", backends[0].port),)))
    gw.applied.result(WAIT_S)
    again = Client(e.port, e.token)
    served_by(again, 4)
    close(again)  # as above: a kept-alive connection would count as open
    assert wait_load(gw, 104.0, 2.0) == ServiceLoad("llm", 2.0, 104.0)


def wait_load(gw: ServiceGateway, now: float, want: float) -> ServiceLoad:
    """A proxy counts (or logs) a request a moment after its answer went out: sample again at
    the same instant until the count is whole and the test's closed connections are gone (the
    rate is over the clock the test gives)."""
    import time

    last = gw._last["llm"]
    deadline = time.monotonic() + 10
    while True:
        (load,) = sample(gw, now)
        # likewise a closed client's connection is seen closed a moment later
        if (load.qps >= want and not load.connections) or time.monotonic() > deadline:
            return load
        gw._last["llm"] = last
        time.sleep(0.02)


def test_a_node_without_a_known_address_is_left_out_and_ipv6_is_bracketed(
    book_path: Path,
) -> None:
    class Recorder:
        kind = "record"

        def __init__(self) -> None:
            self.applied: list[list[object]] = []

        def start(self) -> None:
            pass

        def apply(self, services: list[object]) -> None:
            self.applied.append(services)

        def stop(self) -> None:
            pass

    rec = Recorder()
    links = {"v6": Link("fd00::7")}
    g = ServiceGateway(rec, EndpointBook(book_path, 40000, 3), links)  # type: ignore[arg-type]
    g.on_routes(Routes("a", (RouteBackend("a.1", "v6", 20000), RouteBackend("a.2", "gone", 1))))
    g.applied.result(WAIT_S)
    g.stop()
    (route,) = rec.applied[-1]
    assert [b.address for b in route.backends] == ["[fd00::7]:20000"]  # type: ignore[attr-defined]
    assert route.listen_port == 40000 and len(route.token) >= 32  # type: ignore[attr-defined]
