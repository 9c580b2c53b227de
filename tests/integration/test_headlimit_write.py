"""The controller's HTTP protocol (server/headlimit.py) with a client that does not read its
answer: uvicorn paused the application's writes and kept the unsent rest in memory, and the
connection open, for as long as the client liked. Against uvicorn on a real socket, the
protocol the controller runs, and an application whose answer is larger than the kernel's
buffers hold."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from gpufleet.server.headlimit import head_limited

ANSWER = 16 * 1024 * 1024  # well over what loopback's buffers hold for a 4 KiB receive window


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    head = [(b"content-length", str(ANSWER).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    await send({"type": "http.response.body", "body": b"x" * ANSWER})


@pytest.fixture
def server() -> Iterator[tuple[int, threading.Event]]:
    closed = threading.Event()  # the server's side of a connection was lost

    base = head_limited(1.0)

    class Watched(base):  # type: ignore[misc, valid-type]
        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            closed.set()

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)  # a connection made before the server runs waits in the backlog
    cfg = uvicorn.Config(app, log_level="warning", http=Watched, lifespan="off")
    srv = uvicorn.Server(cfg)
    started = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    started.start()
    try:
        yield sock.getsockname()[1], closed
    finally:
        srv.should_exit = True
        started.join(30)


def _ask(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: writes pause
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    s.settimeout(30)
    return s


def _read_all(s: socket.socket) -> int:
    n = 0
    try:
        while data := s.recv(1 << 20):
            n += len(data)
    except ConnectionResetError:
        pass
    return n


def test_an_answer_the_client_never_reads_is_dropped_and_its_connection_closed(
    server: tuple[int, threading.Event],
) -> None:
    port, closed = server
    s = _ask(port)
    assert closed.wait(30), "the server kept the connection of a client that reads nothing"
    got = _read_all(s)  # what the kernels held before the abort, then the end
    assert 0 < got < ANSWER


def test_an_answer_read_at_the_clients_pace_comes_whole(
    server: tuple[int, threading.Event],
) -> None:
    port, _ = server
    got = _read_all(_ask(port))
    assert got > ANSWER  # the whole body, and its head
