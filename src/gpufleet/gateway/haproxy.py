"""The gateway on Debian's HAProxy (2.6): master-worker mode, reloads that keep connections.

How a reload keeps every connection (``ProcessGateway.apply``: checked with ``haproxy -c -f``,
renamed over the live config): SIGUSR2 to the master. The master re-executes itself; the new worker
takes the listening sockets over from the old one (``expose-fd listeners``), so no SYN is refused,
and the old worker finishes the requests it holds, answering idle keep-alive clients once more
with ``Connection: close`` (``option idle-close-on-response``) before it exits.
Counters come from a one-line-per-request log on stdout (``access.log``: frontend, status, and a
mark on those the token check refused): every worker of every reload writes it, where
``show stat`` counters start at 0 in each new worker.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

from gpufleet.gateway import viewers as v
from gpufleet.gateway.files import REFUSED, tail
from gpufleet.gateway.process import ProcessGateway
from gpufleet.gateway.routes import KEY_HEADER, ServiceRoute

LOGIN_PAGE = "desktop-login.html"
DENIED_PAGE = "desktop-denied.html"
STARTING_PAGE = "desktop-starting.http"  # a whole response, as errorfile wants


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
        # an upgraded connection (a desktop's WebSocket) may sit quiet between frames
        "    timeout tunnel 1h",
        "    option idle-close-on-response",
        "    option http-keep-alive",
        # a backend that refuses the connection: try another one (the request was never sent)
        "    retries 2",
        "    option redispatch 1",
        "    retry-on conn-failure",
        "",
    ]
    for s in services:
        lines += [f"frontend svc_{s.name}", f"    bind {bind_host}:{s.listen_port}"]
        lines += _desktop_gate(s, run_dir) if s.desktop else _token_gate(s)
        lines += [
            f"    default_backend be_{s.name}",
            "",
            f"backend be_{s.name}",
            "    balance roundrobin",
        ]
        if s.desktop:  # no ready replica yet: a page that reloads itself
            lines.append(f"    errorfile 503 {run_dir}/{STARTING_PAGE}")
        if any(b.key for b in s.backends):
            # each replica's key, sent to it as the name of the server chosen (HAProxy has no
            # header per server; the log format names no server, and the CLI socket is 0600)
            lines.append(f"    http-send-name-header {KEY_HEADER}")
        for i, b in enumerate(s.backends):
            name = b.key or f"r{i}"
            lines.append(f"    server {name} {b.address} weight {b.weight}")
        lines.append("")
    return "\n".join(lines)


def _token_gate(s: ServiceRoute) -> list[str]:
    return [
        # exact, whole-header comparison (fhdr: commas are not list separators here)
        f'    acl token_ok req.fhdr(authorization) -m str "Bearer {s.token}"',
        f"    http-request set-var(txn.gw_refused) str({REFUSED}) unless token_ok",
        "    http-request return status 401 content-type text/plain"
        ' string "unauthorized\\n"'
        f' hdr WWW-Authenticate "Bearer realm=\\"{s.name}\\"" unless token_ok',
    ]


def _desktop_gate(s: ServiceRoute, run_dir: Path) -> list[str]:
    """A desktop's viewers (gateway/viewers.py): a token whose SHA-256 is one of theirs, as
    the cookie the login page sets or a bearer; taken out before the request goes on."""
    digests = " ".join(s.viewers)
    sha = "sha2(256),hex,lower"
    html = 'content-type "text/html; charset=utf-8"'
    cookie = f"{v.COOKIE}=%[req.body_param(token),url_dec]; Path=/; HttpOnly; SameSite=Strict"
    return [
        "    option http-buffer-request",  # the login form's body, read before the rules
        f"    acl login path {v.LOGIN}",
        f"    acl login_ok req.body_param(token),url_dec,{sha} -m str {digests}",
        f"    acl by_cookie req.cook({v.COOKIE}),{sha} -m str {digests}",
        f"    acl by_bearer req.hdr(authorization),regsub(^Bearer[[:space:]]+,),{sha}"
        f" -m str {digests}",
        f"    acl has_cookie req.cook_cnt({v.COOKIE}) gt 0",
        "    acl has_bearer req.hdr_cnt(authorization) gt 0",
        f"    http-request return status 200 {html} file {run_dir}/{LOGIN_PAGE}"
        " hdr cache-control no-store if login METH_GET",
        f'    http-request return status 303 hdr set-cookie "{cookie}"'
        f' hdr location "{v.AFTER_LOGIN}" if login METH_POST login_ok',
        f"    http-request set-var(txn.gw_refused) str({REFUSED}) if login !login_ok !METH_GET",
        f"    http-request return status 403 {html} file {run_dir}/{DENIED_PAGE}"
        " if login !login_ok !METH_GET",
        f"    http-request return status 303 hdr location {v.LOGIN}"
        " if METH_GET !has_cookie !has_bearer !{ req.hdr(upgrade) -m found }",
        f"    http-request set-var(txn.gw_refused) str({REFUSED}) unless by_cookie or by_bearer",
        "    http-request return status 403 content-type text/plain"
        ' string "forbidden\\n" unless by_cookie or by_bearer',
        "    http-request del-header authorization",
        f"    http-request del-header {KEY_HEADER}",
        f"    http-request replace-header cookie (^|.*;[[:space:]]*){v.COOKIE}=[^;]*;?(.*) \\1\\2",
    ]


class HAProxyGateway(ProcessGateway):
    kind = "haproxy"
    config_name = "haproxy.cfg"
    install_hint = "Debian: apt-get install -y haproxy"
    reload_signal = signal.SIGUSR2

    @property
    def log(self) -> Path:
        return self.run_dir / "haproxy.log"

    def render(self, services: list[ServiceRoute]) -> str:
        if any(s.desktop for s in services):  # the pages a desktop's rules serve
            (self.run_dir / LOGIN_PAGE).write_bytes(v.login_page("desktop"))
            said = "this token may not open this desktop: only its owner's and admins' can"
            (self.run_dir / DENIED_PAGE).write_bytes(v.login_page("desktop", said))
            page = v.starting_page("desktop")
            head = "HTTP/1.0 503 Service Unavailable\r\ncache-control: no-store\r\n"
            head += "content-type: text/html; charset=utf-8\r\nretry-after: 1\r\n\r\n"
            (self.run_dir / STARTING_PAGE).write_bytes(head.encode() + page)
        return render(services, self.bind_host, self.run_dir)

    def connections(self) -> dict[str, int]:
        """Each frontend's open client connections, summed over every worker (an old one,
        after a reload, holds its WebSockets on): ``show stat`` on the master CLI."""
        out: dict[str, int] = {}
        try:
            procs = _ask(self.run_dir / "master.sock", "show proc")
        except OSError:
            return out
        pids = [ln.split()[0] for ln in procs.splitlines() if " worker " in f" {ln} "]
        for pid in pids:
            try:
                text = _ask(self.run_dir / "master.sock", f"@!{pid} show stat")
            except OSError:
                continue
            for line in text.splitlines():
                f = line.split(",")
                if len(f) > 4 and f[1] == "FRONTEND" and f[4].isdigit():
                    out[f[0]] = out.get(f[0], 0) + int(f[4])
        return out

    def spawn(self) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as log, open(self.access.path, "ab") as access:
            return subprocess.Popen(
                [self.binary, "-W", "-f", str(self.cfg), "-S", f"{self.run_dir}/master.sock"],
                stdout=access,
                stderr=log,
                start_new_session=True,
            )

    def check_command(self, candidate: Path) -> list[str]:
        return [self.binary, "-c", "-f", str(candidate)]

    def workers(self) -> set[int]:
        """The current (not old) worker PIDs, from the master CLI's ``show proc``."""
        try:
            text = _ask(self.run_dir / "master.sock", "show proc")
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

    def serving(self, before: set[int]) -> bool:
        now = self.workers()
        return bool(now) and not (now & before)

    def stats_key(self, service: ServiceRoute) -> str:
        return f"svc_{service.name}"  # the frontend's name

    def log_tail(self) -> str:
        return tail(self.log)


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
