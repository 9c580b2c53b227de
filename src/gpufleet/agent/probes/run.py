"""Probes run for real: HTTP (GET, 200–399 is a success), TCP (a connection opens) and command
probes (argv run as the task's account, in its environment and its private /tmp, in a process
group of its own that is killed whole at the timeout). Each gives ``(ok, why)`` with a short
reason: ``HTTP 503``, ``connect refused``, ``timed out after 1 s``, ``exit 2: <last stderr
line>``."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence

import httpx

from gpufleet.agent import sandbox
from gpufleet.agent.probes.book import ProbeTarget
from gpufleet.model.service import Probe

_TAIL = 4096  # bytes of a command probe's output kept (its last line is the reason)
_WHY_MAX = 200  # characters of a reason
_STEP_S = 0.05  # a command probe's exit is looked for this often


def short(why: str) -> str:
    why = " ".join(why.split())
    return why if len(why) <= _WHY_MAX else why[: _WHY_MAX - 1] + "…"


def _timed_out(timeout_s: float) -> str:
    return f"timed out after {timeout_s:g} s"


def _refused(e: BaseException) -> bool:
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or (
            isinstance(seen, OSError) and seen.errno == errno.ECONNREFUSED
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return "connection refused" in str(e).lower()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# one client for every HTTP probe (httpx's Client is thread-safe): no keep-alive, so each probe
# opens its own connection as the kubelet's does; never the agent's proxy settings (trust_env
# False: an HTTP_PROXY in the agent's environment must not send a probe elsewhere); redirects
# are not followed (a 3xx is a success, as 200-399 are)
_http: httpx.Client | None = None
_http_lock = threading.Lock()


def _client() -> httpx.Client:
    global _http
    with _http_lock:
        if _http is None:
            _http = httpx.Client(
                trust_env=False,
                follow_redirects=False,
                limits=httpx.Limits(max_keepalive_connections=0),
            )
        return _http


def http_probe(host: str, port: int, path: str, timeout_s: float) -> tuple[bool, str]:
    """GET ``path``; success is a status of 200-399 within ``timeout_s``. Only the status line
    and headers are read. httpx bounds each phase (connect, each read) by the timeout; the whole
    is checked against it too, so a server that answers late fails as a timeout."""
    url = f"http://{_url_host(host)}:{port}{path}"
    headers = {"User-Agent": "gpufleet-probe/1", "Accept": "*/*", "Connection": "close"}
    start = time.monotonic()
    try:
        with _client().stream("GET", url, headers=headers, timeout=timeout_s) as r:
            status = r.status_code
    except httpx.TimeoutException:
        return False, _timed_out(timeout_s)
    except httpx.HTTPError as e:
        if _refused(e):
            return False, "connect refused"
        return False, short(f"HTTP error: {e}" if str(e) else type(e).__name__)
    if time.monotonic() - start > timeout_s:
        return False, _timed_out(timeout_s)
    return 200 <= status < 400, f"HTTP {status}"


def tcp_probe(host: str, port: int, timeout_s: float) -> tuple[bool, str]:
    """Success: a connection opens within ``timeout_s`` (then closed at once)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True, "connected"
    except TimeoutError:
        return False, _timed_out(timeout_s)
    except OSError as e:
        if _refused(e):
            return False, "connect refused"
        return False, short(f"connect failed: {e.strerror or e}")


def _command_argv(command: Sequence[str], target: ProbeTarget) -> list[str]:
    """The command line that runs ``command`` as the task does: as its account, with its
    private /tmp (the runner's own ``sandbox.wrap``), under a parent-death signal."""
    if target.account is not None and target.tmp is not None:
        argv, _ = sandbox.wrap(list(command), target.account, target.tmp)
        return argv
    return [*sandbox.PDEATHSIG, *command]


def command_probe(
    command: Sequence[str], target: ProbeTarget, timeout_s: float
) -> tuple[bool, str]:
    """Run ``command``; success is exit 0 within ``timeout_s``. It runs in a process group of
    its own, which is killed whole (SIGKILL) at the timeout, and after any exit too: what a
    probe leaves behind in its group is its own. Its output is read as it comes (the last 4 KiB
    of each stream are kept): the reason names the last line of stderr, else of stdout.

    PR_SET_PDEATHSIG fires when the *thread* that started the process ends: the executor's
    workers live as long as the executor, whose shutdown ends its probes anyway."""
    argv = _command_argv(command, target)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(target.env),
            cwd=target.cwd or "/",
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        return False, short(f"cannot run {command[0]!r}: {e.strerror or e}")
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    tails = {out_fd: b"", err_fd: b""}
    open_fds = set(tails)
    # poll, not select: the agent holds many descriptors, and select fails above 1023
    poller = select.poll()
    for fd in open_fds:
        poller.register(fd, select.POLLIN)
    rc: int | None = None

    def read(wait_ms: int) -> bool:
        """Read what the pipes hold (waiting up to ``wait_ms``); whether anything came."""
        events = poller.poll(wait_ms) if open_fds else []
        for fd, _ in events:
            data = os.read(fd, 65536)
            if not data:
                open_fds.discard(fd)
                poller.unregister(fd)
            else:
                tails[fd] = (tails[fd] + data)[-_TAIL:]
        return bool(events)

    try:
        while (left := deadline - time.monotonic()) > 0:
            # the leader's exit ends the probe even if something it started still holds
            # its pipes; the exit is seen without reaping it (see the finally)
            rc = _exit_status(proc.pid)
            if rc is not None:
                while read(0):  # what it wrote before it exited
                    pass
                break
            wait_ms = max(1, int(min(left, _STEP_S) * 1000))
            if not open_fds:
                time.sleep(wait_ms / 1000)
            read(wait_ms)
    finally:
        # the whole group: a timed-out probe's children, a finished one's stragglers. Its
        # leader is not reaped until after this, so the group's id cannot have been reused.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if rc is None:
        return False, _timed_out(timeout_s)
    if rc == 0:
        return True, "exit 0"
    err = _last_line(tails[err_fd]) or _last_line(tails[out_fd])
    how = f"exit {rc}" if rc > 0 else f"killed by signal {-rc}"
    return False, short(f"{how}: {err}" if err else how)


def _exit_status(pid: int) -> int | None:
    """The exit status of child ``pid`` once it has exited (as Popen's: -N for a signal),
    without reaping it (``WNOWAIT``); None while it runs."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _last_line(data: bytes) -> str:
    for line in reversed(data.decode(errors="replace").splitlines()):
        if line.strip():
            return line.strip()
    return ""


def run_probe(spec: Probe, target: ProbeTarget) -> tuple[bool, str]:
    """One probe, for real: (ok, why). Never raises."""
    try:
        if spec.kind == "command":
            if target.refuse_commands:
                return False, short(target.refuse_commands)
            return command_probe(spec.command, target, spec.timeout_s)
        port = target.port_for(spec)
        if port is None:
            return False, "no port: the probe names none and the task has no $PORT"
        host = target.host
        if spec.kind == "tcp":
            return tcp_probe(host, port, spec.timeout_s)
        return http_probe(host, port, spec.path, spec.timeout_s)
    except Exception as e:  # a probe's failure is its result, never the agent's
        return False, short(f"probe error: {type(e).__name__}: {e}")
