"""A tiny HTTP model server (stdlib only) for services: what `make demo`, the end-to-end tests
and the failover benchmark run as a service's replicas.

    python -m gpufleet.examples.model_stub [--port N] [--delay-ms MS]

It listens on ``$PORT`` (the port gpufleet gives each replica; ``--port`` overrides it) on all
addresses, with HTTP/1.1 keep-alive. ``GET /healthz``: 200 ``ok`` (the readiness and liveness
probes). ``POST /v1/predict`` (and ``GET /``, ``GET /v1/predict``): JSON with which replica
answered (``$GPUFLEET_JOB_ID`` or ``$REPLICA_ID``, its port, host and pid, and ``$MODEL_VERSION``)
and a fake score of the request body. ``--delay-ms`` holds each answer that long (a model's
compute time)."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def replica_id() -> str:
    return os.environ.get("GPUFLEET_JOB_ID") or os.environ.get("REPLICA_ID") or f"pid-{os.getpid()}"


def answer(port: int, body: bytes) -> dict[str, Any]:
    # a stable fake score in [0, 1): the same input gets the same score from every replica
    score = int.from_bytes(hashlib.sha256(body).digest()[:4], "big") / 2**32
    return {
        "replica": replica_id(),
        "port": port,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "version": os.environ.get("MODEL_VERSION", ""),
        "score": round(score, 6),
    }


def make_handler(port: int, delay_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a proxy reuses its connections
        # headers and body are two writes: without TCP_NODELAY the second waits for the
        # peer's delayed ACK (40 ms on Linux)
        disable_nagle_algorithm = True

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _predict(self, body: bytes) -> None:
            if delay_s:
                time.sleep(delay_s)
            out = json.dumps(answer(port, body)).encode()
            self._send(200, out, "application/json")

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            elif self.path in ("/", "/v1/predict"):
                self._predict(b"")
            else:
                self._send(404, b"not found\n", "text/plain")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            if self.path == "/v1/predict":
                self._predict(body)
            else:
                self._send(404, b"not found\n", "text/plain")

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request would fill the replica's log under load

    return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpufleet.examples.model_stub", description=__doc__)
    p.add_argument("--port", type=int, default=None, help="default: $PORT")
    p.add_argument("--delay-ms", type=float, default=0.0, help="hold each answer this long")
    a = p.parse_args(argv)
    port = a.port if a.port is not None else os.environ.get("PORT")
    if port is None:
        p.error("no port: set $PORT (gpufleet does for a service's replicas) or pass --port")
    try:
        port = int(port)
    except ValueError:
        p.error(f"port {port!r} is not a number")
    if not 0 <= port <= 65535 or a.delay_ms < 0:
        p.error(f"port {port} must be 0-65535 and --delay-ms {a.delay_ms:g} at least 0")
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.allow_reuse_address = True
    srv = ThreadingHTTPServer(("", port), make_handler(port, a.delay_ms / 1000))
    print(f"model stub {replica_id()} listening on port {srv.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # ^C when run by hand
        srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
