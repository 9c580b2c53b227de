"""The gateway on Debian's nginx: config checked with ``nginx -t``, graceful reload by SIGHUP.

nginx reloads gracefully (new workers take the inherited listening sockets; old workers finish
their requests), but an old worker closes its idle keep-alive client connections at once, so a
client that sends on such a connection at that instant sees it closed and must retry on a new
one (as browsers and HTTP libraries do for idempotent requests). HAProxy avoids that race
(``idle-close-on-response``); this is why HAProxy is preferred when both are installed.
Request counts come from the access log (one line per request: port and status, and a mark
on those the token check refused).
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from gpufleet.gateway.files import REFUSED, children, tail
from gpufleet.gateway.process import ProcessGateway
from gpufleet.gateway.routes import ServiceRoute


def render(services: list[ServiceRoute], bind_host: str, run_dir: Path) -> str:
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
    for s in services:
        if s.backends:
            lines.append(f"  upstream be_{s.name} {{")
            # shared memory: one round-robin (and weights) across all workers, not one each
            lines.append(f"    zone be_{s.name} 64k;")
            lines += [f"    server {b.address} weight={b.weight};" for b in s.backends]
            lines += ["    keepalive 32;", "  }"]
        if s.desktop:  # nginx cannot hash a client's token to check it: no way in
            lines += [
                "  server {",
                f"    listen {bind_host}:{s.listen_port};",
                "    default_type text/plain;",
                "    return 501 'desktops need the haproxy or builtin gateway\\n';",
                "  }",
            ]
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

    def render(self, services: list[ServiceRoute]) -> str:
        return render(services, self.bind_host, self.run_dir)

    def prepare(self) -> None:
        (self.run_dir / "tmp").mkdir(parents=True, exist_ok=True)

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


def _retired(pid: int) -> bool:
    """An old nginx worker that no longer accepts: gone, or shutting down gracefully."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return not title or b"shutting down" in title
