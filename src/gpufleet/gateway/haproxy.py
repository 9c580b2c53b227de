"""The gateway on Debian's HAProxy (2.6): master-worker mode, reloads that keep connections.

How a reload keeps every connection: ``apply`` writes the config beside the live one, checks it
with ``haproxy -c -f`` (refused: ConfigError with HAProxy's message, nothing changes), renames it
over the live one and sends SIGUSR2 to the master. The master re-executes itself; the new worker
takes the listening sockets over from the old one (``expose-fd listeners``), so no SYN is refused,
and the old worker finishes the requests it holds, answering idle keep-alive clients once more
with ``Connection: close`` (``option idle-close-on-response``) before it exits.
Counters come from a one-line-per-request log on stdout (``access.log``: frontend, status, and a
mark on those the token check refused): every worker of every reload writes it, where
``show stat`` counters start at 0 in each new worker.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from gpufleet.gateway.base import Gateway, ServiceStats
from gpufleet.gateway.files import (
    REFUSED,
    LogCounter,
    check_output,
    forget_pid,
    note_pid,
    reap_previous,
    tail,
    write_atomic,
)
from gpufleet.gateway.routes import ConfigError, GatewayError, ServiceRoute, validate

RELOAD_WAIT_S = 10.0


def render(services: list[ServiceRoute], bind_host: str, run_dir: Path) -> str:
    """The whole haproxy.cfg for ``services``."""
    lines = [
        "global",
        "    master-worker",
        f"    stats socket {run_dir}/admin.sock mode 600 level admin expose-fd listeners",
        "    maxconn 8000",
        # one line per request to stdout (our access.log): the counters, across reloads
        "    log stdout format raw local0 info",
        # an old worker still holding requests after this long is stopped: bounds how many
        # generations frequent reloads can leave behind (longer than timeout server)
        "    hard-stop-after 15m",
        "",
        "defaults",
        "    mode http",
        "    log global",
        # the third field: "unauth" when the token check refused it (files.LogCounter)
        '    log-format "%ft %ST %[var(txn.gw_refused)]"',
        "    timeout connect 2s",
        "    timeout client 120s",
        # model inference can take minutes per request
        "    timeout server 600s",
        "    timeout http-keep-alive 30s",
        "    option idle-close-on-response",
        "    option http-keep-alive",
        # a backend that refuses the connection: try another one (the request was never sent)
        "    retries 2",
        "    option redispatch 1",
        "    retry-on conn-failure",
        "",
    ]
    for s in services:
        lines += [
            f"frontend svc_{s.name}",
            f"    bind {bind_host}:{s.listen_port}",
            # exact, whole-header comparison (fhdr: commas are not list separators here)
            f'    acl token_ok req.fhdr(authorization) -m str "Bearer {s.token}"',
            f"    http-request set-var(txn.gw_refused) str({REFUSED}) unless token_ok",
            "    http-request return status 401 content-type text/plain"
            ' string "unauthorized\\n"'
            f' hdr WWW-Authenticate "Bearer realm=\\"{s.name}\\"" unless token_ok',
            f"    default_backend be_{s.name}",
            "",
            f"backend be_{s.name}",
            "    balance roundrobin",
        ]
        for i, b in enumerate(s.backends):
            lines.append(f"    server r{i} {b.address} weight {b.weight}")
        lines.append("")
    return "\n".join(lines)


class HAProxyGateway(Gateway):
    kind = "haproxy"

    def __init__(
        self,
        bind_host: str = "127.0.0.1",
        run_dir: Path | None = None,
        binary: str = "haproxy",
        pidfile: Path | None = None,
    ) -> None:
        super().__init__(bind_host)
        self.pidfile = pidfile  # names the running proxy, for the next controller after a crash
        found = shutil.which(binary)
        if found is None:
            raise GatewayError(f"{binary} not found (Debian: apt-get install -y haproxy)")
        self.binary = found
        self.own_dir = run_dir is None  # made by start(), removed by stop()
        self.run_dir = Path(run_dir) if run_dir is not None else Path()
        self.proc: subprocess.Popen[bytes] | None = None
        self.services: list[ServiceRoute] = []
        self.access = LogCounter(self.run_dir / "access.log")

    @property
    def cfg(self) -> Path:
        return self.run_dir / "haproxy.cfg"

    @property
    def log(self) -> Path:
        return self.run_dir / "haproxy.log"

    def start(self) -> None:
        if self.own_dir:
            self.run_dir = Path(tempfile.mkdtemp(prefix="gpufleet-haproxy-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.cfg, render([], self.bind_host, self.run_dir))
        self.access = LogCounter(self.run_dir / "access.log")
        reap_previous(self.pidfile)
        with open(self.log, "ab") as log, open(self.access.path, "ab") as access:
            self.proc = subprocess.Popen(
                [self.binary, "-W", "-f", str(self.cfg), "-S", f"{self.run_dir}/master.sock"],
                stdout=access,
                stderr=log,
                start_new_session=True,
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
            raise GatewayError("haproxy gateway not started")
        text = render(services, self.bind_host, self.run_dir)
        candidate = self.run_dir / "haproxy.cfg.new"
        write_atomic(candidate, text)
        rc, out = check_output([self.binary, "-c", "-f", str(candidate)])
        if rc != 0:
            raise ConfigError(f"haproxy refused the new config (old one still serving):\n{out}")
        before = self._workers()
        os.replace(candidate, self.cfg)
        self.proc.send_signal(signal.SIGUSR2)
        self._wait_workers(before, "reload")
        self.services = list(services)

    def _master_cli(self, command: str) -> str:
        return _ask(self.run_dir / "master.sock", command)

    def _workers(self) -> set[int]:
        """The current (not old) worker PIDs, from the master CLI's ``show proc``."""
        try:
            text = self._master_cli("show proc")
        except OSError:
            return set()
        current: set[int] = set()
        section = ""
        for line in text.splitlines():
            if line.startswith("#"):
                section = line
                continue
            parts = line.split()
            if len(parts) >= 2 and parts[1] == "worker" and "old" not in section:
                current.add(int(parts[0]))
        return current

    def _wait_workers(self, before: set[int], what: str) -> None:
        """Return once a worker other than ``before`` serves; else the master's own log."""
        deadline = time.monotonic() + RELOAD_WAIT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise GatewayError(f"haproxy exited during {what}:\n{tail(self.log)}")
            now = self._workers()
            if now and not (now & before):
                return
            time.sleep(0.02)
        raise GatewayError(
            f"haproxy {what}: no new worker after {RELOAD_WAIT_S:g} s:\n{tail(self.log)}"
        )

    def stats(self) -> dict[str, ServiceStats]:
        """From the access log (one line per request, every worker of every reload writes it:
        HAProxy's own counters restart at 0 in each new worker)."""
        counts = self.access.read()
        return {
            s.name: ServiceStats(*counts.get(f"svc_{s.name}", [0, 0, 0, 0])) for s in self.services
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


def _ask(path: Path, command: str) -> str:
    """One command on an HAProxy CLI socket; the whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(path))
        s.sendall(command.encode() + b"\n")
        s.shutdown(socket.SHUT_WR)  # as socat does: the master CLI answers, then closes
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")
