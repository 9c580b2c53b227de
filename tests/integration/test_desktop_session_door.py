"""A real desktop session (``python3 -m gpufleet.ops.desktop``: Xvfb, x11vnc, websockify,
as its service replica runs it) refuses whoever reaches its node port without the replica's
key: noVNC's page and the WebSocket alike; with the key (what the gateway adds) noVNC answers
and the VNC handshake comes through. Only the door listens beyond the loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from gpufleet.gateway.routes import KEY_HEADER
from gpufleet.ops.http_backends import free_port
from realparts import require

KEY = "5e" * 32


@pytest.fixture(scope="module")
def session() -> Iterator[int]:
    require("xvfb", "x11vnc", "websockify", "xsetroot")
    port = free_port()
    env = {**os.environ, "PORT": str(port), "GPUFLEET_DESKTOP_KEY": KEY}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.ops.desktop", "--geometry", "320x200"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # said once the door listens
        assert f"on port {port}" in line, line
        yield port
    finally:
        proc.terminate()
        proc.wait(20)


def _ws(port: int, key: str | None) -> bytes:
    import socket

    extra = f"{KEY_HEADER}: {key}\r\n" if key else ""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            (
                "GET /websockify HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n{extra}\r\n"
            ).encode()
        )
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return got


def test_the_node_port_without_the_key_is_refused(session: int) -> None:
    url = f"http://127.0.0.1:{session}"
    for headers in ({}, {KEY_HEADER: "00" * 32}, {"Authorization": "Bearer anything-at-all"}):
        r = httpx.get(url + "/vnc.html", headers=headers)
        assert r.status_code == 403, r.text
    assert _ws(session, None).startswith(b"HTTP/1.1 403")
    assert _ws(session, "00" * 32).startswith(b"HTTP/1.1 403")


def test_the_key_opens_novnc_and_its_websocket(session: int) -> None:
    url = f"http://127.0.0.1:{session}"
    assert httpx.get(url + "/.gpufleet/ready").status_code == 200  # the readiness probe's
    page = httpx.get(url + "/vnc.html", headers={KEY_HEADER: KEY})
    assert page.status_code == 200 and "noVNC" in page.text
    assert _ws(session, KEY).startswith(b"HTTP/1.1 101")


def test_no_key_no_session() -> None:
    env = {k: v for k, v in os.environ.items() if k != "GPUFLEET_DESKTOP_KEY"}
    env["PORT"] = str(free_port())
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.ops.desktop"], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0 and "GPUFLEET_DESKTOP_KEY" in done.stderr
