"""The controller's side of ``gpufleet gateway`` (ADR 0044): an apply is done once the gateway
process says it serves that set (or newer) of this controller process, never on the word of
an acknowledgement given to another one; no acknowledgement: GatewayError, the old set on."""

from __future__ import annotations

import threading

import pytest

from gpufleet.gateway import Backend, GatewayError, ServiceRoute
from gpufleet.server.remote_gateway import RemoteGateway, routes_json

ROUTE = ServiceRoute("web", 31500, "t" * 43, (Backend.parse("10.0.0.5:8000"),))


def apply_in_thread(gw: RemoteGateway) -> tuple[threading.Thread, list[BaseException | None]]:
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            gw.apply([ROUTE])
            out.append(None)
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_an_apply_ends_when_the_gateway_process_serves_it() -> None:
    gw = RemoteGateway(apply_wait_s=60)
    t, out = apply_in_thread(gw)
    while gw.published().version == 0:  # published, waiting for the acknowledgement
        t.join(0.01)
    p = gw.published()
    assert routes_json(p)["routes"] == [
        {"name": "web", "port": 31500, "token": "t" * 43, "backends": ["10.0.0.5:8000"]}
    ]
    gw.report("another-controller", p.version, {})  # an old leader's number: not ours
    t.join(0.05)
    assert t.is_alive()
    gw.report(p.instance, p.version, {})
    t.join(10)
    assert not t.is_alive() and out == [None]


def test_an_apply_nobody_serves_fails_and_says_why() -> None:
    gw = RemoteGateway(apply_wait_s=0.01)
    with pytest.raises(GatewayError, match="no gateway process served the routes"):
        gw.apply([ROUTE])


def test_a_bad_route_is_refused_before_it_is_published() -> None:
    gw = RemoteGateway(apply_wait_s=60)
    with pytest.raises(GatewayError):
        gw.apply([ServiceRoute("web", 0, "short", ())])
    assert gw.published().version == 0


def test_a_desktop_replicas_key_reaches_the_gateway_process() -> None:
    from gpufleet.ops.gatewayd import _backends
    from gpufleet.server.remote_gateway import Published

    keyed = (Backend("10.0.0.5", 8000, key="0f" * 32), Backend("10.0.0.6", 8000))
    desk = ServiceRoute("desk", 31501, "t" * 43, keyed, ("a" * 64,))
    doc = routes_json(Published("i", 1, (ROUTE, desk)))
    web, got = doc["routes"]
    assert "keys" not in web  # an ordinary service's route is as it was
    assert _backends(got) == keyed and _backends(web) == ROUTE.backends


def test_a_new_leader_never_answers_an_empty_set_while_its_first_routes_are_on_their_way() -> None:
    """Issue 26: a takeover opens the services' endpoints and hands the first set to the
    proxy's worker thread; a gateway sync that came first got version 0's empty set, and the
    gateway process closed every endpoint until the next sync (10 requests refused)."""
    from gpufleet.server.remote_gateway import answerable

    fresh = RemoteGateway(apply_wait_s=60).published()  # nothing published yet: version 0
    assert fresh.version == 0 and fresh.routes == ()
    # the gateway process served the old leader's set (another instance, version 7)
    assert not answerable(fresh, "old-leader", 7, coming=True)
    assert answerable(fresh, "old-leader", 7, coming=False)  # no service at all: [] is true
    assert answerable(fresh, "", 0, coming=False)  # a gateway process's first sync
    gw = RemoteGateway(apply_wait_s=0.01)
    with pytest.raises(GatewayError):  # published, not acknowledged
        gw.apply([ROUTE])
    first = gw.published()
    assert answerable(first, "old-leader", 7, coming=True)  # this process's first set
    assert not answerable(first, first.instance, first.version, coming=True)  # nothing newer
    assert answerable(first, first.instance, first.version - 1, coming=True)


def test_the_gateway_says_which_controller_it_follows_each_time_that_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failover the transport rides out raises nothing in the follower: the log still says
    the syncs now reach another controller (what an operator, and the HA README test, read)."""
    from types import SimpleNamespace

    from gpufleet.ops.gatewayd import Follower

    transport = SimpleNamespace(current="http://a:1")
    f = Follower(transport, gateway=None)  # type: ignore[arg-type]
    with caplog.at_level("WARNING", logger="gpufleet"):
        f._say_whom()
        f._say_whom()  # the same: said once
        transport.current = "http://b:2"
        f._say_whom()
    said = [r.getMessage() for r in caplog.records if "following the leading" in r.getMessage()]
    assert said == [
        "following the leading controller at http://a:1",
        "following the leading controller at http://b:2",
    ]
