"""Real parts for the gateway's tests and benchmark: backend HTTP server processes that answer
with their id, a free port, and a blocking client that counts what failed."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field

BACKEND = r"""
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ID = sys.argv[1].encode()

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # headers and body go out as two writes: without this, Nagle holds the body back
        # for the client's delayed ACK (40 ms)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _answer(self):
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b""):
                pass  # trailers
        else:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
        out = ID + b" " + str(len(body)).encode()
        if self.path.startswith("/stream/"):  # /stream/N: N chunks of 64 KiB, chunked
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for _ in range(int(self.path.split("/")[2])):
                self.wfile.write(b"10000\r\n" + b"s" * 65536 + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        # /status/N: answered with status N (a backend's own 401 is not the gateway's)
        status = int(self.path.split("/")[2]) if self.path.startswith("/status/") else 200
        self.send_response(status)
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer

    def log_message(self, *a):
        pass

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer.request_queue_size = 1024  # socketserver's 5 drops SYNs under load (1 s stall)
ThreadingHTTPServer.handle_error = lambda *a: None  # resets from a reloading proxy are expected
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


class BackendProcess:
    def __init__(self, ident: str) -> None:
        self.ident = ident
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BACKEND, ident], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL
        self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


@dataclass
class Client:
    """HTTP/1.1 requests to one port; a keep-alive connection is reused between calls."""

    port: int
    token: str | None
    conn: http.client.HTTPConnection | None = None
    stale_retries: int = 0

    def get(self, fresh: bool = False, path: str = "/") -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if fresh and self.conn is not None:
            self.conn.close()
            self.conn = None
        reused = self.conn is not None
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            self.conn.request("GET", path, headers=headers)
            resp = self.conn.getresponse()
            body = resp.read()
        except STALE:
            self.conn.close()
            self.conn = None
            if not reused:
                raise
            # the server closed an idle keep-alive connection as we sent on it: nothing was
            # answered, so a GET goes again on a new connection (what HTTP clients do)
            self.stale_retries += 1
            return self.get(fresh=True, path=path)
        if resp.will_close:
            self.conn.close()
            self.conn = None
        return resp.status, body


@dataclass
class LoadLoop:
    """A thread sending GETs, alternating keep-alive and new connections, until stopped."""

    port: int
    token: str
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    client: Client | None = None

    def run(self) -> None:
        self.client = Client(self.port, self.token)
        i = 0
        while not self.stop.is_set():
            i += 1
            try:
                status, body = self.client.get(fresh=i % 2 == 0)
            except OSError as e:
                self.failures.append(f"request {i}: {type(e).__name__}: {e}")
                self.client.conn = None
                continue
            if status == 200:
                self.ok += 1
            else:
                self.failures.append(f"request {i}: HTTP {status} {body[:80]!r}")
