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

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from gpufleet.gateway.base import Gateway, ServiceStats
from gpufleet.gateway.files import (
    REFUSED,
    LogCounter,
    check_output,
    children,
    forget_pid,
    note_pid,
    reap_previous,
    tail,
    write_atomic,
)
from gpufleet.gateway.routes import ConfigError, GatewayError, ServiceRoute, validate

RELOAD_WAIT_S = 10.0


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


class NginxGateway(Gateway):
    kind = "nginx"

    def __init__(
        self,
        bind_host: str = "127.0.0.1",
        run_dir: Path | None = None,
        binary: str = "nginx",
        pidfile: Path | None = None,
    ) -> None:
        super().__init__(bind_host)
        self.pidfile = pidfile  # names the running proxy, for the next controller after a crash
        found = shutil.which(binary)
        if found is None:
            raise GatewayError(f"{binary} not found (Debian: apt-get install -y nginx)")
        self.binary = found
        self.own_dir = run_dir is None  # made by start(), removed by stop()
        self.run_dir = Path(run_dir) if run_dir is not None else Path()
        self.proc: subprocess.Popen[bytes] | None = None
        self.services: list[ServiceRoute] = []
        self.access = LogCounter(self.run_dir / "access.log")

    @property
    def cfg(self) -> Path:
        return self.run_dir / "nginx.conf"

    def _cmd(self, cfg: Path, *extra: str) -> list[str]:
        # -e: the log before the config is read, else the compiled-in /var/log/nginx (root's)
        log = str(self.run_dir / "error.log")
        return [self.binary, "-p", str(self.run_dir), "-e", log, "-c", str(cfg), *extra]

    def start(self) -> None:
        if self.own_dir:
            self.run_dir = Path(tempfile.mkdtemp(prefix="gpufleet-nginx-"))
        (self.run_dir / "tmp").mkdir(parents=True, exist_ok=True)
        self.access = LogCounter(self.run_dir / "access.log")
        write_atomic(self.cfg, render([], self.bind_host, self.run_dir))
        reap_previous(self.pidfile)
        with open(self.run_dir / "stderr.log", "ab") as log:
            self.proc = subprocess.Popen(
                self._cmd(self.cfg), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        note_pid(self.pidfile, self.proc.pid, self.cfg)
        try:
            self._wait_workers(set(), "start")
        except GatewayError:
            self.stop()  # a master that never got a worker up is not left behind
            raise

    def apply(self, services: list[ServiceRoute]) -> None:
        validate(services)
        if self.proc is None:
            raise GatewayError("nginx gateway not started")
        candidate = self.run_dir / "nginx.conf.new"
        write_atomic(candidate, render(services, self.bind_host, self.run_dir))
        rc, out = check_output(self._cmd(candidate, "-t", "-q"))
        if rc != 0:
            raise ConfigError(f"nginx refused the new config (old one still serving):\n{out}")
        before = children(self.proc.pid)
        os.replace(candidate, self.cfg)
        self.proc.send_signal(signal.SIGHUP)
        self._wait_workers(before, "reload")
        self.services = list(services)

    def _wait_workers(self, before: set[int], what: str) -> None:
        """Until a new worker runs and every old one has stopped accepting: until then an old
        worker may take a new connection and serve it with the old routes (a replica that
        left them would get traffic). An old worker retitles itself "worker process is
        shutting down" as it closes its listening sockets; seen on two polls in a row."""
        deadline = time.monotonic() + RELOAD_WAIT_S
        settled = False
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise GatewayError(f"nginx exited during {what}:\n{self._log()}")
            now = children(self.proc.pid)
            done = bool(now - before) and all(_retired(p) for p in now & before)
            if done and settled:
                return
            settled = done
            time.sleep(0.02)
        raise GatewayError(f"nginx {what}: no new worker after {RELOAD_WAIT_S:g} s:\n{self._log()}")

    def _log(self) -> str:
        return tail(self.run_dir / "error.log") + "\n" + tail(self.run_dir / "stderr.log")

    def stats(self) -> dict[str, ServiceStats]:
        counts = self.access.read()  # keyed by listen port
        return {
            s.name: ServiceStats(*counts.get(str(s.listen_port), [0, 0, 0, 0]))
            for s in self.services
        }

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # the master stops its workers and reaps them; whatever is left, SIGKILL
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            forget_pid(self.pidfile)
        self.proc = None
        if self.own_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def _retired(pid: int) -> bool:
    """An old nginx worker that no longer accepts: gone, or shutting down gracefully."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return not title or b"shutting down" in title
