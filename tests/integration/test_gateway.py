"""The service gateway with real proxies (HAProxy, nginx, the built-in one) in front of real
backend processes on 127.0.0.1: spreading, the token check, reloads under load that fail no
request, a killed backend, and refused configs that leave the old one serving."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.gateway import (
    Backend,
    ConfigError,
    Gateway,
    ServiceRoute,
    ServiceStats,
    make_gateway,
)
from gpufleet.ops.http_backends import BackendProcess, Client, LoadLoop, free_port
from realparts import require

TOKEN = "tok-" + "a1b2c3d4e5f6a7b8c9d0"


@pytest.fixture(params=["haproxy", "nginx", "builtin"])
def gateway(request: pytest.FixtureRequest) -> Iterator[Gateway]:
    if request.param != "builtin":
        require(request.param)
    gw = make_gateway(request.param)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def backends() -> Iterator[list[BackendProcess]]:
    procs = [BackendProcess(f"b{i}") for i in range(3)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()


def route(port: int, procs: list[BackendProcess], token: str = TOKEN) -> ServiceRoute:
    return ServiceRoute("llm", port, token, tuple(Backend.parse(p.address) for p in procs))


def counted(gateway: Gateway, ok: Callable[[ServiceStats], bool]) -> ServiceStats:
    """The service's counters once ``ok`` holds: a proxy counts (or logs) a request just after
    its answer went out, so the last ones may show a moment after the client has them."""
    deadline = time.monotonic() + 10
    while not ok(st := gateway.stats()["llm"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ok(st), st
    return st


def answers(port: int, n: int, fresh: bool = False) -> Counter[str]:
    client = Client(port, TOKEN)
    seen: Counter[str] = Counter()
    for _ in range(n):
        status, body = client.get(fresh=fresh)
        assert status == 200, body
        seen[body.split()[0].decode()] += 1
    return seen


def test_round_robin_spreads_requests(gateway: Gateway, backends: list[BackendProcess]) -> None:
    port = free_port()
    gateway.apply([route(port, backends)])
    for fresh in (False, True):
        seen = answers(port, 30, fresh=fresh)
        assert set(seen) == {"b0", "b1", "b2"}, seen
        assert max(seen.values()) - min(seen.values()) <= 2, seen
    assert counted(gateway, lambda st: st.requests >= 60)


def test_weights_share_requests(gateway: Gateway, backends: list[BackendProcess]) -> None:
    port = free_port()
    weighted = (Backend.parse(backends[0].address, 3), Backend.parse(backends[1].address, 1))
    gateway.apply([ServiceRoute("llm", port, TOKEN, weighted)])
    seen = answers(port, 40)
    assert abs(seen["b0"] - 30) <= 2 and seen["b0"] + seen["b1"] == 40, seen


def test_bodies_stream_both_ways(gateway: Gateway, backends: list[BackendProcess]) -> None:
    port = free_port()
    gateway.apply([route(port, backends[:1])])
    body = bytes(range(256)) * 4096  # 1 MiB
    headers = {"Authorization": f"Bearer {TOKEN}"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/", body=body, headers=headers)  # Content-Length
        assert conn.getresponse().read() == b"b0 1048576"
        chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))
        conn.request("POST", "/", body=chunks, headers=headers, encode_chunked=True)
        assert conn.getresponse().read() == b"b0 1048576"
        conn.request("POST", "/", body=b"x" * 10, headers=headers)  # the same connection after
        assert conn.getresponse().read() == b"b0 10"
        conn.request("GET", "/stream/64", headers=headers)  # a chunked 4 MiB answer
        resp = conn.getresponse()
        assert resp.read() == b"s" * 65536 * 64
        conn.request("GET", "/", headers=headers)
        assert conn.getresponse().read() == b"b0 0"
    finally:
        conn.close()


def test_missing_or_wrong_token_is_401(gateway: Gateway, backends: list[BackendProcess]) -> None:
    port = free_port()
    gateway.apply([route(port, backends)])
    for token in (None, "wrong-token-0123456789", TOKEN + "x", TOKEN[:-1]):
        status, _ = Client(port, token).get()
        assert status == 401, token
    status, _ = Client(port, TOKEN).get()
    assert status == 200
    assert counted(gateway, lambda st: st.status_4xx >= 4 and st.requests >= 5)


def test_requests_refused_for_the_token_are_counted_apart(
    gateway: Gateway, backends: list[BackendProcess]
) -> None:
    """The load is what was served: the token check's 401s are counted as ``unauthorized``,
    a backend's own 401 is not one of them."""
    port = free_port()
    gateway.apply([route(port, backends)])
    for token in (None, "wrong-token-0123456789", None):
        bad = Client(port, token)
        assert bad.get(fresh=True)[0] == 401, token
    good = Client(port, TOKEN)
    assert [good.get()[0] for _ in range(4)] == [200] * 4
    assert good.get(path="/status/401")[0] == 401  # the backend's answer, through the proxy
    st = counted(gateway, lambda st: st.requests >= 8)
    # (``connections``: the good client's keep-alive connection may still be open)
    assert replace(st, connections=0) == ServiceStats(
        requests=8, status_4xx=4, status_5xx=0, unauthorized=3
    )
    gateway.apply([route(port, backends[:1])])  # a reload: the counts go on
    assert Client(port, None).get(fresh=True)[0] == 401
    st = counted(gateway, lambda st: st.requests >= 9)
    assert (st.requests, st.unauthorized) == (9, 4)


def test_reloads_under_load_fail_no_request(
    gateway: Gateway, backends: list[BackendProcess]
) -> None:
    port = free_port()
    gateway.apply([route(port, backends)])
    load = LoadLoop(port, TOKEN)
    thread = threading.Thread(target=load.run)
    thread.start()
    try:
        sets = [backends[:2], backends[1:], backends, [backends[0]], backends[::2], backends]
        for procs in sets:
            before = load.ok
            gateway.apply([route(port, procs)])
            # let the load loop get requests through the new config before the next reload
            while load.ok < before + 20 and thread.is_alive() and not load.failures:
                threading.Event().wait(0.01)
    finally:
        load.stop.set()
        thread.join()
    assert load.failures == [], load.failures[:5]
    assert load.ok >= 120
    # the counters go on across the reloads (HAProxy's new worker starts its own at 0)
    assert counted(gateway, lambda st: st.requests >= load.ok)
    assert load.client is not None
    print(f"{gateway.kind}: {load.ok} ok, stale keep-alive retries {load.client.stale_retries}")
    if gateway.kind != "nginx":
        # HAProxy answers idle keep-alive clients once more before its old worker goes
        # (idle-close-on-response); the built-in proxy closes nothing: no client retry needed.
        # nginx closes them at once, so a client may have to resend (module docstring).
        assert load.client.stale_retries == 0


def test_killed_backend_then_removed(gateway: Gateway, backends: list[BackendProcess]) -> None:
    port = free_port()
    gateway.apply([route(port, backends)])
    answers(port, 6)
    backends[0].kill()  # SIGKILL: its connections reset, its port refuses
    gateway.apply([route(port, backends[1:])])
    seen = answers(port, 20) + answers(port, 20, fresh=True)
    assert set(seen) == {"b1", "b2"}, seen


def test_refused_config_keeps_the_old_one(gateway: Gateway, backends: list[BackendProcess]) -> None:
    port = free_port()
    gateway.apply([route(port, backends[:1])])
    if gateway.kind == "builtin":
        # resolves names only when it connects: what it can refuse is a port it cannot bind
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            bad = ServiceRoute("other", taken.getsockname()[1], TOKEN, ())
            with pytest.raises(ConfigError, match="cannot listen") as err:
                gateway.apply([route(port, backends), bad])
    else:
        bad_route = ServiceRoute("llm", port, TOKEN, (Backend("nosuchhost.invalid", 80),))
        with pytest.raises(ConfigError) as err:
            gateway.apply([bad_route])
        # the proxy's own words, naming what it could not use
        assert "nosuchhost.invalid" in str(err.value)
    assert "old" in str(err.value)
    assert answers(port, 5) == Counter({"b0": 5})


def test_invalid_routes_listed_at_once(gateway: Gateway) -> None:
    bad = [
        ServiceRoute("Bad_Name", 0, "short", (Backend("127.0.0.1", 1, weight=0),)),
        ServiceRoute("ok", 0, "x" * 20, ()),
    ]
    with pytest.raises(ConfigError) as err:
        gateway.apply(bad)
    text = str(err.value)
    for what in ("name must be", "listen port 0", "token must be", "weight 0", "service[1] 'ok'"):
        assert what in text, text


@pytest.mark.parametrize("kind", ["haproxy", "nginx"])
def test_a_proxy_left_by_a_dead_controller_is_stopped_by_the_next(
    kind: str, tmp_path: Path, backends: list[BackendProcess]
) -> None:
    """A proxy runs in a session of its own, so it outlives a SIGKILLed controller. The next
    controller's gateway (same pidfile, in its data dir) stops it before it starts its own:
    else HAProxy's SO_REUSEPORT lets both listen on a service's port, and the old routes and
    token keep answering a share of the connections."""
    require(kind)
    pidfile = tmp_path / "proxy.pid"
    old = make_gateway(kind, pidfile=pidfile)
    old.start()
    port = free_port()
    try:
        old.apply([route(port, backends[:1], token="tok-old-" + "x" * 20)])
        assert old.proc is not None and pidfile.read_text().startswith(f"{old.proc.pid} ")
        # the controller dies here: no stop(); a new one starts with the same data dir
        new = make_gateway(kind, pidfile=pidfile)
        new.start()
        try:
            assert old.proc.wait(timeout=10) is not None  # stopped, workers with it
            new.apply([route(port, backends[1:2])])
            assert answers(port, 10, fresh=True) == Counter({"b1": 10})  # only the new routes
        finally:
            new.stop()
        assert not pidfile.exists()  # a clean stop leaves nothing to reap
    finally:
        old.stop()


def test_a_pidfile_naming_another_process_stops_nothing(tmp_path: Path) -> None:
    """A PID reused by an unrelated process (its command line names no proxy config of ours)
    is left alone."""
    from gpufleet.gateway.files import reap_previous

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pidfile = tmp_path / "proxy.pid"
        pidfile.write_text(f"{bystander.pid} {tmp_path}/haproxy.cfg")
        reap_previous(pidfile)
        assert bystander.poll() is None and not pidfile.exists()
    finally:
        bystander.kill()
        bystander.wait()
