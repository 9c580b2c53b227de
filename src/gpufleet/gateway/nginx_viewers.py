"""What nginx asks about a desktop's viewers (ADR 0057): nginx cannot hash a client's token, so
its ``auth_request`` subrequest comes here, to a small HTTP server on a Unix socket run by the
process that runs nginx (the controller, or ``gpufleet gateway``), which holds the routes nginx
was last given. No request leaves the gateway's host and the control plane is not asked: the
digests are the route's (``ServiceRoute.viewers``), as HAProxy's rules and the built-in proxy
check them (``viewers.py``).

Paths (nginx names the desktop in ``X-Gpufleet-Desktop``, set in its config, never the
client's):

- ``/auth``: 204 for a viewer's own token (a bearer, or the login page's cookie), with the
  request's other cookies in ``X-Gpufleet-Cookie`` (nginx sends those on, not ours); 401 with
  no token (``X-Gpufleet-To: login`` for a plain GET, which nginx sends to the login page);
  403 for any other token.
- ``/login``: the login page (GET) and its form (POST): a viewer's token comes back as the
  cookie; a refusal is marked ``X-Gpufleet-Refused`` for nginx's access log.
- ``/starting``: the 503 page that reloads itself (a desktop with no ready replica).

The cost: one round trip on the local socket per request (a WebSocket's one request among
them), none per frame.
"""

from __future__ import annotations

import hmac
import os
import shutil
import socketserver
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from gpufleet.gateway import viewers as v
from gpufleet.gateway.routes import ServiceRoute

DESKTOP_HEADER = "X-Gpufleet-Desktop"
REFUSED = {"X-Gpufleet-Refused": "1"}  # marks a refused login in nginx's access log


class ViewerCheck:
    """The server nginx's subrequests reach, on ``socket`` (in a folder of its own)."""

    def __init__(self) -> None:
        self.routes: dict[str, ServiceRoute] = {}
        # a short path: a Unix socket's is at most 107 bytes, and a run folder's may be longer
        self.dir = Path(tempfile.mkdtemp(prefix="gpufleet-nginx-"))
        self.socket = self.dir / "viewers.sock"
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def set(self, routes: list[ServiceRoute]) -> None:
        self.routes = {r.name: r for r in routes if r.desktop}

    def start(self) -> None:
        server = _Server(str(self.socket), _Handler)
        server.check = self
        # nginx's workers run as another user when its master is root: they must reach it
        os.chmod(self.dir, 0o711)
        os.chmod(self.socket, 0o666)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="nginx-viewers", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def allowed(self, name: str, token: bytes | None) -> bool:
        route = self.routes.get(name)
        if route is None or not token:
            return False
        d = v.digest(token)
        return any(hmac.compare_digest(d, x) for x in route.viewers)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    check: ViewerCheck


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass  # nginx's access log counts the requests

    def address_string(self) -> str:
        return "nginx"

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, val in (headers or {}).items():
            self.send_header(k, val)
        if body:
            self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    @property
    def _desktop(self) -> str:
        return self.headers.get(DESKTOP_HEADER, "")

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/auth":
            self._auth()
        elif path == "/login":
            self._send(200, v.login_page(self._desktop))
        elif path.startswith("/starting"):  # nginx puts the client's path after it
            self._send(503, v.starting_page(self._desktop), {"Retry-After": "1"})
        else:
            self._send(404)

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/login":
            self._send(404)
            return
        name = self._desktop
        length = int(self.headers.get("Content-Length") or "0")
        if not 0 < length <= v.FORM_MAX:
            self._send(400, v.login_page(name, "no token given"), REFUSED)
            return
        token = v.form_token(self.rfile.read(length))
        if not self.server.check.allowed(name, token.encode()):
            said = f"this token may not open desktop {name}: only its owner's and admins' can"
            self._send(403, v.login_page(name, said), REFUSED)
            return
        self._send(303, b"", {"Set-Cookie": v.set_cookie(token), "Location": v.AFTER_LOGIN})

    def _auth(self) -> None:
        """The subrequest's answer (nginx passes only 2xx, 401 and 403 on)."""
        name = self._desktop
        auth = self.headers.get("Authorization", "").encode("latin-1")
        cookie = self.headers.get("Cookie", "").encode("latin-1")
        token = v.bearer(auth) or v.cookie_token(cookie)
        if self.server.check.allowed(name, token):
            rest = v.without_cookie(cookie) if cookie else None
            self._send(204, b"", {"X-Gpufleet-Cookie": rest.decode("latin-1")} if rest else {})
            return
        if token is None:
            method = self.headers.get("X-Gpufleet-Method", "")
            plain = method == "GET" and not self.headers.get("X-Gpufleet-Upgrade")
            said = {"WWW-Authenticate": f'Bearer realm="{name}"'}
            self._send(401, b"", {**said, "X-Gpufleet-To": "login"} if plain else said)
            return
        self._send(403)
