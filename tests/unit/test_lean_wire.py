"""The lean client's HTTP (client/wire.py) against a real server on loopback that answers each
request with the bytes a test gives: Content-Length, chunked and close-ended bodies, 100
Continue, keep-alive, and the answers it must refuse (a head or a body over its bound, a body
cut short), with the errors the shims report (``ApiError``, an ``OSError``)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.base.settings import Settings
from gpufleet.client.errors import ApiError
from gpufleet.client.lean import LeanClient
from gpufleet.client.wire import EXPECT_OVER, BadResponse, Connection


class Canned:
    """Accepts connections; for each request read (head and Content-Length body), sends the
    next answer of ``answers`` (raw bytes); an answer ending in ``None`` closes after it."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                buf = b""
                while self.answers:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            break
                        buf += data
                    if b"\r\n\r\n" not in buf:
                        break
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        k, _, v = line.partition(b":")
                        if k.strip().lower() == b"content-length":
                            length = int(v)
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    self.requests.append(head + b"\r\n\r\n" + buf[:length])
                    buf = buf[length:]
                    answer = self.answers.pop(0)
                    if answer is None:
                        break
                    conn.sendall(answer)
                    if self.answers and self.answers[0] is None:
                        self.answers.pop(0)
                        break

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def canned() -> Iterator[list[Canned]]:
    made: list[Canned] = []
    yield made
    for c in made:
        c.close()


def serve(made: list[Canned], *answers: bytes | None) -> Canned:
    c = Canned(list(answers))
    made.append(c)
    return c


def client(c: Canned) -> LeanClient:
    return LeanClient(Settings(f"http://127.0.0.1:{c.port}", "tok", Path("none")), timeout=5)


def ok(body: object, extra: str = "", status: str = "200 OK") -> bytes:
    data = json.dumps(body).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode() + data


def test_a_content_length_answer_reads_as_rows(canned: list[Canned]) -> None:
    c = serve(canned, ok({"id": "7", "state": "PENDING", "reason": {"code": "Priority"}}))
    with client(c) as lean:
        job = lean.job("7")
    assert job.state == "PENDING" and job.reason.code == "Priority"
    request = c.requests[0].decode()
    assert request.startswith("GET /api/v1/jobs/7 HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{c.port}\r\n" in request
    assert "Authorization: Bearer tok\r\n" in request


def test_a_post_sends_its_json_and_a_length(canned: list[Canned]) -> None:
    c = serve(canned, ok({"ids": ["1"]}, status="201 Created"), ok({"id": "1"}))
    with client(c) as lean:
        assert lean.submit({"name": "x"}) == ["1"]
        assert lean.cancel("1").id == "1"
    head, _, body = c.requests[0].partition(b"\r\n\r\n")
    assert json.loads(body) == {"spec": {"name": "x"}, "array": None, "depends_on": []}
    assert b"Content-Type: application/json" in head
    assert b"Content-Length: 0\r\n" in c.requests[1]  # a POST without a body says so
    assert c.connections == 1  # kept alive


def test_a_chunked_answer_with_extensions_and_trailers(canned: list[Canned]) -> None:
    data = json.dumps([{"id": "1"}, {"id": "2"}]).encode()
    a, b = data[:5], data[5:]
    answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(a):x};ext=1\r\n".encode()
        + a
        + b"\r\n"
        + f"{len(b):X}\r\n".encode()
        + b
        + b"\r\n0\r\nX-Trailer: yes\r\n\r\n"
    )
    c = serve(canned, answer, ok([]))
    with client(c) as lean:
        assert [r.id for r in lean.nodes()] == ["1", "2"]
        assert lean.queues() == []  # the connection stays usable after the trailers
    assert c.connections == 1


def test_100_continue_is_skipped(canned: list[Canned]) -> None:
    c = serve(canned, b"HTTP/1.1 100 Continue\r\n\r\n" + ok({"ids": ["3"]}, status="201 Created"))
    with client(c) as lean:
        assert lean.submit({"name": "x"}) == ["3"]


def test_a_body_ended_by_the_close(canned: list[Canned]) -> None:
    c = serve(canned, b"HTTP/1.0 200 OK\r\n\r\n[1, 2]", None)
    with client(c) as lean:
        assert lean.nodes() == [1, 2]


def test_pages_follow_the_link_on_one_connection(canned: list[Canned]) -> None:
    link = 'Link: </api/v1/jobs?limit=2&all=false&cursor=5>; rel="next"\r\n'
    c = serve(canned, ok([{"id": "9"}, {"id": "8"}], link), ok([{"id": "4"}]))
    with client(c) as lean:
        assert [j.id for j in lean.jobs(limit=10)] == ["9", "8", "4"]
    # the Link's page, its size shrunk to what is still wanted (10 - 2)
    assert c.requests[1].startswith(b"GET /api/v1/jobs?limit=8&all=false&cursor=5 HTTP/1.1")
    assert c.connections == 1


def test_a_refusal_is_an_api_error_with_the_servers_detail(canned: list[Canned]) -> None:
    c = serve(
        canned,
        ok({"detail": "no job 5"}, status="404 Not Found"),
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 10\r\n\r\n<h1>x</h1>",
    )
    with client(c) as lean:
        with pytest.raises(ApiError) as e:
            lean.job("5")
        assert e.value.status == 404 and e.value.detail == "no job 5"
        with pytest.raises(ApiError) as e:
            lean.job("6")
        assert e.value.status == 502 and e.value.detail == "<h1>x</h1>"  # not JSON: its text


def test_an_oversized_head_is_refused(canned: list[Canned]) -> None:
    big = b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * 200_000 + b"\r\n\r\n"
    c = serve(canned, big)
    conn = Connection("127.0.0.1", c.port, timeout=5)
    with pytest.raises(BadResponse, match="response head is over 65536 bytes"):
        conn.request("GET", "/", {})
    assert conn._sock is None  # closed: never reused
    assert isinstance(BadResponse("x"), OSError)  # the shims report it as an unreachable server


def test_an_oversized_body_is_refused_before_it_is_read(canned: list[Canned]) -> None:
    c = serve(canned, b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000)
    conn = Connection("127.0.0.1", c.port, timeout=5, max_body=999)
    with pytest.raises(BadResponse, match="a body of 1000 bytes, over 999"):
        conn.request("GET", "/", {})


def test_an_oversized_chunked_body_is_refused(canned: list[Canned]) -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b"x" * 1024
    c = serve(canned, answer + b"\r\n0\r\n\r\n")
    conn = Connection("127.0.0.1", c.port, timeout=5, max_body=1000)
    with pytest.raises(BadResponse, match="chunked body over 1000 bytes"):
        conn.request("GET", "/", {})


def test_a_truncated_body_is_an_error_not_a_short_answer(canned: list[Canned]) -> None:
    c = serve(canned, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n[1, 2", None)
    with client(c) as lean, pytest.raises(BadResponse, match=r"cut short \(5 of 100 bytes\)"):
        lean.nodes()


def test_a_truncated_chunked_body_is_an_error(canned: list[Canned]) -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n[1, 2"
    c = serve(canned, answer, None)
    with client(c) as lean, pytest.raises(BadResponse, match="cut short"):
        lean.nodes()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "is not a number"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
    ],
)
def test_malformed_answers_are_refused(canned: list[Canned], answer: bytes, why: str) -> None:
    c = serve(canned, answer, None)
    with pytest.raises(BadResponse, match=why):
        Connection("127.0.0.1", c.port, timeout=5).request("GET", "/", {})


def test_an_unreachable_server_is_an_os_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(ConnectionRefusedError):
        Connection("127.0.0.1", port, timeout=5).request("GET", "/", {})


class Expecting:
    """One connection: reads a request's head, answers ``first`` (raw bytes), then reads what
    comes until the client closes or ``length`` body bytes came, and answers ``then``."""

    def __init__(self, first: bytes, then: bytes = b"") -> None:
        self.first, self.then = first, then
        self.head = b""
        self.body = b""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            self.head, _, body = buf.partition(b"\r\n\r\n")
            conn.sendall(self.first)
            length = int(self.head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:
                data = conn.recv(1 << 20)
                if not data:  # the client closed: it sent no more
                    break
                body += data
            self.body = body
            if self.then:
                conn.sendall(self.then)


def test_a_large_body_refused_by_its_length_is_never_sent() -> None:
    """Expect: 100-continue over EXPECT_OVER bytes: a server that refuses the request by its
    head (a 413 by Content-Length) answers before the body, none of which is sent; the answer
    cannot be lost in the reset of a body the server would not read (a shim reported nothing
    and exited 0 when it was)."""
    refuse = b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"
    server = Expecting(refuse)
    c = Connection("127.0.0.1", server.port, timeout=30)
    r = c.request("POST", "/x", {}, b"x" * (EXPECT_OVER + 1))
    server.thread.join(30)
    assert (r.status, r.body) == (413, b"no")
    assert b"expect: 100-continue" in server.head.lower()
    assert server.body == b""


def test_a_large_body_is_sent_after_100_continue() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    server = Expecting(b"HTTP/1.1 100 Continue\r\n\r\n", ok)
    c = Connection("127.0.0.1", server.port, timeout=30)
    body = b"y" * (3 * EXPECT_OVER)
    r = c.request("POST", "/x", {}, body)
    server.thread.join(30)
    assert (r.status, r.body) == (200, b"ok")
    assert server.body == body
    small = Expecting(ok)  # under EXPECT_OVER: no expectation, the body with the head
    r = Connection("127.0.0.1", small.port, timeout=30).request("POST", "/x", {}, b"z" * 10)
    small.thread.join(30)
    assert r.status == 200 and b"expect" not in small.head.lower() and small.body == b"z" * 10
