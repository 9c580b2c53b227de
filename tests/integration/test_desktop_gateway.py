"""A desktop's endpoint on the real proxies (the built-in one, HAProxy and nginx, whose
``auth_request`` asks the gateway's viewer check, gateway/nginx_viewers.py):
only its viewers' own tokens get in (a bearer, or the cookie of the login form), never the
service's token or another user's; the credential does not reach the desktop; a WebSocket
upgrade passes and carries bytes both ways; an open WebSocket is counted as a connection.
The session's door (ops/desktop_key.py) lets in the proxy, which presents the replica's key,
and refuses a connection straight to it without that key."""

from __future__ import annotations

import base64
import hashlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from gpufleet.gateway import Backend, Gateway, ServiceRoute, make_gateway
from gpufleet.gateway import viewers as v
from gpufleet.gateway.routes import KEY_HEADER, ConfigError, validate
from gpufleet.ops.desktop_key import Door, checked
from gpufleet.ops.http_backends import free_port
from realparts import require

ALICE = "alice-" + "0123456789abcdef"
BOB = "bob-" + "0123456789abcdef"
SERVICE_TOKEN = "svc-" + "0123456789abcdef"
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's


class _Echo(socketserver.BaseRequestHandler):
    """HTTP: the request head back as the body; an Upgrade: 101, then every byte back."""

    def handle(self) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        if b"\r\nupgrade: websocket" in head.lower():
            key = next(
                line.split(b":", 1)[1].strip()
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"sec-websocket-key:")
            )
            accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
            self.request.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n" + rest
            )
            while chunk := self.request.recv(65536):
                self.request.sendall(chunk)
            return
        self.request.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (len(head), head)
        )


@pytest.fixture
def echo() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _gateway(kind: str) -> Iterator[Gateway]:
    if kind != "builtin":
        require(kind)
    gw = make_gateway(kind)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(params=["haproxy", "builtin", "nginx"])
def gateway(request: pytest.FixtureRequest) -> Iterator[Gateway]:
    yield from _gateway(request.param)


def _desktop(port: int, backend: int) -> ServiceRoute:
    return ServiceRoute(
        "desk",
        port,
        SERVICE_TOKEN,
        (Backend("127.0.0.1", backend),),
        (v.digest(ALICE),),
    )


def _upgrade(port: int, cookie: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(
        b"GET /websockify HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        + f"Cookie: {v.COOKIE}={cookie}\r\n\r\n".encode()
    )
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    assert got.startswith(b"HTTP/1.1 101"), got
    return s


def test_only_the_viewers_own_tokens_open_it(gateway: Gateway, echo: int) -> None:
    port = free_port()
    gateway.apply([_desktop(port, echo)])
    url = f"http://127.0.0.1:{port}"
    with httpx.Client() as c:
        first = c.get(url + "/vnc.html")
        assert (first.status_code, first.headers["location"]) == (303, v.LOGIN)
        assert c.get(url + v.LOGIN).status_code == 200
        for token in (SERVICE_TOKEN, BOB):
            r = c.get(url + "/", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 403, (token, r.text)
            assert c.post(url + v.LOGIN, data={"token": token}).status_code == 403
            r = c.get(url + "/", headers={"Cookie": f"{v.COOKIE}={token}"})
            assert r.status_code == 403
        ok = c.get(url + "/x", headers={"Authorization": f"Bearer {ALICE}"})
        assert ok.status_code == 200 and b"authorization" not in ok.content.lower()
        login = c.post(url + v.LOGIN, data={"token": ALICE})
        assert login.status_code == 303 and login.headers["location"] == v.AFTER_LOGIN
        assert "HttpOnly" in login.headers["set-cookie"]
        assert "SameSite=Strict" in login.headers["set-cookie"]
        page = c.get(url + "/y", headers={"Cookie": f"theme=dark; {v.COOKIE}={ALICE}"})
        assert page.status_code == 200
        assert ALICE.encode() not in page.content  # the desktop never sees the token
        assert b"theme=dark" in page.content  # its own cookies pass
    deadline = time.monotonic() + 10  # each proxy's counters: HAProxy's and nginx's from logs
    while gateway.stats()["desk"].unauthorized < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    st = gateway.stats()["desk"]
    assert (st.unauthorized, st.requests) == (6, 11), st  # the 303 to the login page: none


def test_a_websocket_passes_and_counts_as_a_connection(gateway: Gateway, echo: int) -> None:
    port = free_port()
    gateway.apply([_desktop(port, echo)])
    s = _upgrade(port, ALICE)
    try:
        s.sendall(b"RFB 003.008\n")
        assert s.recv(64) == b"RFB 003.008\n"
        deadline = time.monotonic() + 10
        while gateway.stats()["desk"].connections < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gateway.stats()["desk"].connections == 1
    finally:
        s.close()
    deadline = time.monotonic() + 10
    while gateway.stats()["desk"].connections > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gateway.stats()["desk"].connections == 0


def test_a_websocket_with_another_users_token_is_refused(gateway: Gateway, echo: int) -> None:
    port = free_port()
    gateway.apply([_desktop(port, echo)])
    with pytest.raises(AssertionError, match="403"):
        _upgrade(port, BOB)


def test_a_desktop_with_no_ready_replica_says_it_is_starting(gateway: Gateway) -> None:
    port = free_port()
    gateway.apply([replace(_desktop(port, 1), backends=())])
    r = httpx.get(f"http://127.0.0.1:{port}/vnc.html", headers={"Authorization": f"Bearer {ALICE}"})
    assert r.status_code == 503 and 'http-equiv="refresh"' in r.text, r.text
    r = httpx.get(f"http://127.0.0.1:{port}/vnc.html", headers={"Authorization": f"Bearer {BOB}"})
    assert r.status_code == 403  # the token check comes first


KEY = "0b" * 32  # a desktop replica's key (hex), as the controller derives one


def _door(echo: int) -> Iterator[int]:
    """The session's door (ops/desktop_key.py) in front of the echo backend."""
    port = free_port()
    door = Door("127.0.0.1", port, echo, KEY)
    door.start()
    try:
        yield port
    finally:
        door.stop()


@pytest.fixture
def door(echo: int) -> Iterator[int]:
    yield from _door(echo)


def test_the_proxy_presents_the_replicas_key_and_nothing_else_opens_the_door(
    gateway: Gateway, door: int
) -> None:
    port = free_port()
    route = _desktop(port, door)
    gateway.apply([replace(route, backends=(Backend("127.0.0.1", door, key=KEY),))])
    url = f"http://127.0.0.1:{port}"
    forged = {"Authorization": f"Bearer {ALICE}", KEY_HEADER: "cd" * 32}
    ok = httpx.get(url + "/vnc.html", headers=forged)
    # through the gateway: the proxy's key, the client's forged one dropped, and the door
    # takes the key out before the session sees the request
    assert ok.status_code == 200, ok.text
    assert b"desktop-key" not in ok.content.lower()
    s = _upgrade(port, ALICE)  # the WebSocket: through the door too
    try:
        s.sendall(b"RFB 003.008\n")
        assert s.recv(64) == b"RFB 003.008\n"
    finally:
        s.close()
    direct = f"http://127.0.0.1:{door}"
    for headers in ({}, {KEY_HEADER: "cd" * 32}, {"Authorization": f"Bearer {ALICE}"}):
        r = httpx.get(direct + "/vnc.html", headers=headers)
        assert r.status_code == 403 and "only through the gpufleet gateway" in r.text
    assert httpx.get(direct + "/.gpufleet/ready").status_code == 200  # the agent's probe
    assert httpx.get(direct + "/vnc.html", headers={KEY_HEADER: KEY}).status_code == 200


def websocket_upgrade(extra: bytes = b"") -> bytes:
    """A WebSocket upgrade's request head, with ``extra`` header lines."""
    return (
        b"GET /websockify HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n" + extra + b"\r\n"
    )


def test_a_websocket_straight_to_the_door_without_the_key_is_refused(door: int) -> None:
    s = socket.create_connection(("127.0.0.1", door), timeout=10)
    with s:
        s.sendall(websocket_upgrade())
        assert s.recv(4096).startswith(b"HTTP/1.1 403")
        assert s.recv(4096) == b""  # and closed


def test_a_key_with_two_values_or_a_bad_one_is_refused() -> None:
    head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Gpufleet-Desktop-Key: " + KEY.encode()
    assert checked(head, KEY.encode()) == b"GET / HTTP/1.1\r\nHost: x"
    assert checked(head + b"\r\nx-gpufleet-desktop-key: " + KEY.encode(), KEY.encode()) is None
    assert checked(head.replace(b"0b", b"cd"), KEY.encode()) is None
    with pytest.raises(ConfigError, match="a key must be"):
        validate([ServiceRoute("d", 1, SERVICE_TOKEN, (Backend("h", 2, key="NOT-HEX"),))])


def test_stopping_the_door_ends_its_open_connections_on_its_own_loop(echo: int) -> None:
    """A WebSocket spliced through the door when it stops: ended by the stop (the client
    reads its end), the door's thread gone, nothing left for the garbage collector to end on
    a closed loop."""
    port = free_port()
    door = Door("127.0.0.1", port, echo, KEY)
    door.start()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    with s:
        s.sendall(websocket_upgrade(KEY_HEADER.encode() + b": " + KEY.encode() + b"\r\n"))
        assert s.recv(4096).startswith(b"HTTP/1.1 101")
        s.sendall(b"RFB 003.008\n")
        assert s.recv(64) == b"RFB 003.008\n"
        door.stop()
        assert not door._thread.is_alive()
        assert s.recv(64) == b""  # the door ended the spliced connection
