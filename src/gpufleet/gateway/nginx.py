"""The gateway on Debian's nginx: config checked with ``nginx -t``, graceful reload by SIGHUP.

nginx reloads gracefully (new workers take the inherited listening sockets; old workers finish
their requests), but an old worker closes its idle keep-alive client connections at once, so a
client that sends on such a connection at that instant sees it closed and must retry on a new
one (as browsers and HTTP libraries do for idempotent requests). HAProxy avoids that race
(``idle-close-on-response``); this is why HAProxy is preferred when both are installed.
Request counts come from the access log (one line per request: port and status, and a mark
on those the token check refused); the client connections open on each port from the host's
socket table (a desktop's WebSocket among them, for its idle suspension).

A desktop's viewers are checked by an ``auth_request`` subrequest to the gateway's own
``ViewerCheck`` on a Unix socket (nginx_viewers.py), which also serves the login page and its
form: nginx cannot hash a token itself (ADR 0057).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from gpufleet.gateway import viewers as v
from gpufleet.gateway.files import REFUSED, children, tail
from gpufleet.gateway.nginx_viewers import DESKTOP_HEADER, ViewerCheck
from gpufleet.gateway.process import ProcessGateway
from gpufleet.gateway.routes import KEY_HEADER, ServiceRoute

DESKTOP_TIMEOUT = "3600s"  # a desktop's WebSocket may sit quiet between frames (HAProxy: 1h)


def render(
    services: list[ServiceRoute], bind_host: str, run_dir: Path, check: Path | None = None
) -> str:
    d = run_dir
    lines = [
        "daemon off;",
        "master_process on;",
        "worker_processes auto;",
        f"pid {d}/nginx.pid;",
        f"error_log {d}/error.log notice;",
        "events { worker_connections 4096; }",
        "http {",
        f"  client_body_temp_path {d}/tmp/body;",
        f"  proxy_temp_path {d}/tmp/proxy;",
        f"  fastcgi_temp_path {d}/tmp/fastcgi;",
        f"  uwsgi_temp_path {d}/tmp/uwsgi;",
        f"  scgi_temp_path {d}/tmp/scgi;",
        "  log_format gw '$server_port $status';",
        # what the token check refused: marked (files.LogCounter), a backend's 401 is not
        f"  log_format gw_refused '$server_port $status {REFUSED}';",
        f"  access_log {d}/access.log gw;",
        "  keepalive_timeout 30s;",
        "  proxy_http_version 1.1;",
        '  proxy_set_header Connection "";',
        "  proxy_set_header Host $http_host;",
        "  proxy_set_header X-Forwarded-For $remote_addr;",
        "  proxy_request_buffering off;",
        "  proxy_buffering off;",
        "  proxy_connect_timeout 2s;",
        "  proxy_read_timeout 600s;",
        "  client_max_body_size 0;",
        # a refused connection: the next backend (non-idempotent requests only if never sent)
        "  proxy_next_upstream error timeout;",
    ]
    if any(s.desktop for s in services):
        assert check is not None, "desktops need the viewer check's socket"
        lines += [
            "  map $http_upgrade $gw_connection { default upgrade; '' ''; }",
            "  map $upstream_http_x_gpufleet_refused $gw_kept { '' 1; default 0; }",
        ]
    for s in services:
        # a desktop has one replica: its key goes to the one server (no header per server)
        backends = s.backends[:1] if s.desktop else s.backends
        if backends:
            lines.append(f"  upstream be_{s.name} {{")
            # shared memory: one round-robin (and weights) across all workers, not one each
            lines.append(f"    zone be_{s.name} 64k;")
            lines += [f"    server {b.address} weight={b.weight};" for b in backends]
            lines += ["    keepalive 32;", "  }"]
        if s.desktop:
            assert check is not None
            lines += _desktop(s, bind_host, d, check)
            continue
        lines += [
            "  server {",
            f"    listen {bind_host}:{s.listen_port};",
            "    location / {",
            f'      if ($http_authorization != "Bearer {s.token}") {{',
            f"        add_header WWW-Authenticate 'Bearer realm=\"{s.name}\"' always;",
            f"        access_log {d}/access.log gw_refused;",
            "        return 401;",
            "      }",
            f"      proxy_pass http://be_{s.name};" if s.backends else "      return 503;",
            "    }",
            "  }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _desktop(s: ServiceRoute, bind_host: str, d: Path, check: Path) -> list[str]:
    """A desktop's server: each request checked by a subrequest to the viewer check, the
    credential taken out, the replica's key put in, and a WebSocket carried."""
    sock = f"http://unix:{check}:"
    name = f"      proxy_set_header {DESKTOP_HEADER} {s.name};"
    key = s.backends[0].key if s.backends else ""
    to = f"proxy_pass http://be_{s.name};" if s.backends else f"proxy_pass {sock}/starting;"
    return [
        "  server {",
        f"    listen {bind_host}:{s.listen_port};",
        "    absolute_redirect off;",
        f"    proxy_read_timeout {DESKTOP_TIMEOUT};",
        f"    proxy_send_timeout {DESKTOP_TIMEOUT};",
        f"    location = {v.LOGIN} {{",
        f"      proxy_pass {sock}/login;",
        name,
        "      proxy_hide_header X-Gpufleet-Refused;",
        f"      access_log {d}/access.log gw if=$gw_kept;",
        f"      access_log {d}/access.log gw_refused if=$upstream_http_x_gpufleet_refused;",
        "    }",
        "    location = /.gpufleet/auth {",
        "      internal;",
        f"      proxy_pass {sock}/auth;",
        "      proxy_pass_request_body off;",
        '      proxy_set_header Content-Length "";',
        name,
        "      proxy_set_header X-Gpufleet-Method $request_method;",
        "      proxy_set_header X-Gpufleet-Upgrade $http_upgrade;",
        "    }",
        "    location @gw_401 {",
        f"      add_header WWW-Authenticate 'Bearer realm=\"{s.name}\"' always;",
        f"      access_log {d}/access.log gw_refused;",
        f"      if ($gw_to = login) {{ access_log {d}/access.log gw; return 303 {v.LOGIN}; }}",
        "      return 401;",
        "    }",
        f"    location @gw_403 {{ access_log {d}/access.log gw_refused; return 403; }}",
        "    location / {",
        "      auth_request /.gpufleet/auth;",
        "      auth_request_set $gw_cookie $upstream_http_x_gpufleet_cookie;",
        "      auth_request_set $gw_to $upstream_http_x_gpufleet_to;",
        "      error_page 401 = @gw_401;",
        "      error_page 403 = @gw_403;",
        "      proxy_set_header Host $http_host;",
        "      proxy_set_header X-Forwarded-For $remote_addr;",
        "      proxy_set_header Upgrade $http_upgrade;",
        "      proxy_set_header Connection $gw_connection;",
        '      proxy_set_header Authorization "";',
        "      proxy_set_header Cookie $gw_cookie;",
        # the replica's key; a client's own header of that name is replaced (or dropped: "")
        f'      proxy_set_header {KEY_HEADER} "{key}";',
        name,
        f"      {to}",
        "    }",
        "  }",
    ]


class NginxGateway(ProcessGateway):
    kind = "nginx"
    config_name = "nginx.conf"
    install_hint = "Debian: apt-get install -y nginx"
    reload_signal = signal.SIGHUP
    # an old worker's retitling is seen on two polls in a row (``serving``)
    settle_polls = 2

    def _cmd(self, cfg: Path, *extra: str) -> list[str]:
        # -e: the log before the config is read, else the compiled-in /var/log/nginx (root's)
        log = str(self.run_dir / "error.log")
        return [self.binary, "-p", str(self.run_dir), "-e", log, "-c", str(cfg), *extra]

    check: ViewerCheck | None = None

    def render(self, services: list[ServiceRoute]) -> str:
        sock = self.check.socket if self.check is not None else None
        return render(services, self.bind_host, self.run_dir, sock)

    def prepare(self) -> None:
        (self.run_dir / "tmp").mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        self.check = ViewerCheck()
        self.check.start()
        try:
            super().start()
        except BaseException:
            self.check.stop()
            raise

    def apply(self, services: list[ServiceRoute]) -> None:
        """The viewer check answers from the new routes from now (a revoked token is refused
        by the old workers too); back to the old ones when nginx refuses the new config."""
        if self.check is None:  # not started: ProcessGateway says so
            super().apply(services)
            return
        old = list(self.check.routes.values())
        self.check.set(services)
        try:
            super().apply(services)
        except BaseException:
            self.check.set(old)
            raise

    def stop(self) -> None:
        super().stop()
        if self.check is not None:
            self.check.stop()
            self.check = None

    def connections(self) -> dict[str, int]:
        """Established TCP connections on each service's port, from the host's socket table
        (nginx has no count per server without a module)."""
        ports = {s.listen_port for s in self.services}
        return {str(p): n for p, n in established(ports).items()}

    def spawn(self) -> subprocess.Popen[bytes]:
        with open(self.run_dir / "stderr.log", "ab") as log:
            return subprocess.Popen(
                self._cmd(self.cfg), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def check_command(self, candidate: Path) -> list[str]:
        return self._cmd(candidate, "-t", "-q")

    def workers(self) -> set[int]:
        assert self.proc is not None
        return children(self.proc.pid)

    def serving(self, before: set[int]) -> bool:
        """A new worker runs and every old one has stopped accepting: until then an old worker
        may take a new connection and serve it with the old routes (a replica that left them
        would get traffic). An old worker retitles itself "worker process is shutting down" as
        it closes its listening sockets."""
        now = self.workers()
        return bool(now - before) and all(_retired(p) for p in now & before)

    def stats_key(self, service: ServiceRoute) -> str:
        return str(service.listen_port)  # the access log's lines start with the port

    def log_tail(self) -> str:
        return tail(self.run_dir / "error.log") + "\n" + tail(self.run_dir / "stderr.log")


def established(ports: set[int]) -> dict[int, int]:
    """How many established TCP connections have one of ``ports`` as their local port
    (/proc/net/tcp and tcp6: the local address's port in hex, state 01)."""
    out = dict.fromkeys(ports, 0)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 3 and f[3] == "01":
                port = int(f[1].rpartition(":")[2], 16)
                if port in out:
                    out[port] += 1
    return out


def _retired(pid: int) -> bool:
    """An old nginx worker that no longer accepts: gone, or shutting down gracefully."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return not title or b"shutting down" in title
