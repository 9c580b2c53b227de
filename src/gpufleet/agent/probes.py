"""Readiness and liveness probes of a service's replicas, as the kubelet runs them.

Three parts, cut as the rest of the agent is (events in, decisions out; one clock):

* ``ProbeState``: the pure state machine of one probe of one replica (a task and a kind,
  ``readiness`` or ``liveness``). It says when the next probe is due (``next_due``) and what a
  result changes (``on_result``: a ``Transition``, or None). It never sleeps and never reads
  a clock: the caller passes ``now``.
* ``Probes``: the node's book of them. The agent's tick calls ``due(now)`` (the probes to run
  now, each marked in flight: a probe never overlaps its own previous run) and hands what
  finished to ``results(...)``, which gives the ``ReplicaProbe`` records to report.
* ``ProbeExecutor``: runs probes for real, in a bounded thread pool, so one that hangs holds
  one worker for at most its own timeout and the others go on. HTTP (GET, 200–399 is a
  success), TCP (a connection opens) and command probes (argv run as the task's account, in
  its environment and its private /tmp, in a process group of its own that is killed whole at
  the timeout). Each result carries a short reason: ``HTTP 503``, ``connect refused``,
  ``timed out after 1 s``, ``exit 2: <last stderr line>``.

Semantics (Kubernetes' "Configure Liveness, Readiness and Startup Probes"): the first probe
runs ``initial_delay_s`` after the task started, then every ``period_s`` (10) after the start
of the previous one; each has ``timeout_s`` (1). A replica is ready after
``success_threshold`` (1) consecutive successes and unready after ``failure_threshold`` (3)
consecutive failures; it starts unready, and when it reaches the failure threshold before it
was ever ready that is reported once too (the controller then has a reason to show). Liveness
starts alive; ``failure_threshold`` consecutive failures declare the replica dead (reported
once; the probe stops and the controller kills and replaces the replica); its
``success_threshold`` must be 1, as Kubernetes requires.

A replica's port is the controller's (``core/services.py``), given to the task as ``$PORT``; a
probe that names no port probes ``$PORT`` from the task's environment.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import queue
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from gpufleet.agent import sandbox
from gpufleet.agent.accounts import Account
from gpufleet.base.clock import Clock, MonotonicClock
from gpufleet.model.errors import SpecError
from gpufleet.model.service import Probe

Key = tuple[str, int, int]  # (job, attempt, rank), as the runner's
ProbeKind = Literal["readiness", "liveness"]
KINDS: tuple[str, ...] = ("readiness", "liveness")
_TAIL = 4096  # bytes of a command probe's output kept (its last line is the reason)
_WHY_MAX = 200  # characters of a reason
_STEP_S = 0.05  # a command probe's exit is looked for this often


# ----- the probe's description ---------------------------------------------------------------
# A probe is the service model's ``Probe`` (``model.service``: kind http/tcp/command, path, port,
# thresholds, read and checked by ``Probe.from_dict``), run as a replica's ``readiness`` or
# ``liveness`` probe. There is no ``host`` (Kubernetes' httpGet has one): a probe goes to the
# address the agent gives (its own, where the gateway reaches the replica), so a job cannot
# point the agent's own connections elsewhere.


def probes_of(raw: Mapping[str, Any]) -> list[tuple[ProbeKind, Probe]]:
    """A launch's probes (``{"readiness": Probe.to_dict(), "liveness": ...}``), read by the
    model's own reader; SpecError names every problem."""
    unknown = sorted(set(raw) - set(KINDS))
    if unknown:
        raise SpecError(
            f"unknown probe kind(s) {', '.join(unknown)} (readiness, liveness)",
            source="launch",
            field="probes",
        )
    out: list[tuple[ProbeKind, Probe]] = []
    for kind in ("readiness", "liveness"):
        if raw.get(kind) is not None:
            out.append(
                (kind, Probe.from_dict(raw[kind], kind=kind, source="launch", path="probes"))
            )
    return out


@dataclass(frozen=True)
class ProbeTarget:
    """What the agent knows of the replica a probe runs against: where it listens, and for
    command probes how its task runs (its environment, its account, its private /tmp: what
    ``runner.TaskRunner`` built for it). ``account`` None: the agent's own account."""

    host: str = "127.0.0.1"
    env: Mapping[str, str] = field(default_factory=dict)
    account: Account | None = None
    tmp: Path | None = None
    cwd: str = "/"
    # why command probes cannot run against this replica ("" they can): one in a container
    # needs the runtime's exec, never a command on the node
    refuse_commands: str = ""

    def port_for(self, probe: Probe) -> int | None:
        if probe.port is not None:
            return probe.port
        raw = self.env.get("PORT", "")
        return int(raw) if raw.isdigit() and 0 < int(raw) < 65536 else None


# ----- what is reported -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    """What a probe result changed: readiness became ``ok`` (ready) or not, or liveness
    failed (``ok`` False: the replica is dead)."""

    kind: ProbeKind
    ok: bool
    why: str
    at: float


@dataclass(frozen=True, slots=True)
class ReplicaProbe:
    """The record the agent reports to the controller: a replica's readiness changed, or its
    liveness probe declared it dead."""

    job_id: str
    attempt: int
    kind: ProbeKind
    ok: bool
    why: str
    rank: int = 0  # which task of the job: a replica is one task

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "rank": self.rank,
            "kind": self.kind,
            "ok": self.ok,
            "why": self.why,
        }


# ----- the state machine ---------------------------------------------------------------------


class ProbeState:
    """One probe of one replica. Pure: time is what the caller passes."""

    def __init__(self, kind: ProbeKind, probe: Probe, started_at: float) -> None:
        self.kind = kind
        self.probe = probe
        self._due_at = started_at + probe.initial_delay_s
        self.in_flight = False
        self.successes = 0  # consecutive
        self.failures = 0  # consecutive
        # readiness: None until decided (unready), then True/False; liveness: True until dead
        self.ready: bool | None = None if kind == "readiness" else True
        self.dead = False
        self.last_why = ""

    def next_due(self, now: float) -> float | None:
        """When the next probe is due (``now`` at the earliest: due at once); None while one
        is in flight, or once liveness declared the replica dead (no more probes)."""
        if self.in_flight or self.dead:
            return None
        return max(self._due_at, now)

    def is_due(self, now: float) -> bool:
        return not self.in_flight and not self.dead and now >= self._due_at

    def on_sent(self, now: float) -> None:
        """The probe went out at ``now``: the next one is due a period after its start."""
        self.in_flight = True
        self._due_at = now + self.probe.period_s

    def on_result(self, ok: bool, now: float, why: str) -> Transition | None:
        """A probe's result (``now``: when it came back); the transition it causes, if any."""
        self.in_flight = False
        if self.dead:
            return None
        self.last_why = why
        if ok:
            self.successes, self.failures = self.successes + 1, 0
        else:
            self.successes, self.failures = 0, self.failures + 1
        s = self.probe
        if self.kind == "liveness":
            if not ok and self.failures >= s.failure_threshold:
                self.dead = True
                self.ready = False
                return Transition(
                    "liveness",
                    False,
                    f"liveness probe failed {_times(self.failures)} in a row: {why}",
                    now,
                )
            return None
        if ok and self.successes >= s.success_threshold and self.ready is not True:
            self.ready = True
            return Transition("readiness", True, f"ready: {why}", now)
        if not ok and self.failures >= s.failure_threshold and self.ready is not False:
            self.ready = False
            return Transition(
                "readiness", False, f"not ready: {self.failures} failures in a row: {why}", now
            )
        return None


# ----- the node's book ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Due:
    """A probe to run now: what ``Probes.due`` hands to the executor."""

    key: Key
    kind: ProbeKind
    probe: Probe
    target: ProbeTarget
    token: int  # which run: a result for a forgotten replica, or an older run, is dropped


@dataclass(frozen=True, slots=True)
class ProbeResult:
    key: Key
    kind: ProbeKind
    token: int
    ok: bool
    why: str
    at: float  # when it came back, on the executor's clock


class Probes:
    """The probes of every replica on the node (pure: no threads, no I/O)."""

    def __init__(self) -> None:
        self._states: dict[tuple[Key, str], ProbeState] = {}
        self._targets: dict[Key, ProbeTarget] = {}
        self._tokens: dict[tuple[Key, str], int] = {}
        self._seq = itertools.count(1)

    def add(
        self,
        key: Key,
        probes: Iterable[tuple[ProbeKind, Probe]],
        target: ProbeTarget,
        started_at: float,
    ) -> None:
        """A replica started at ``started_at`` (a redelivered add changes nothing)."""
        if key in self._targets:
            return
        probes = list(probes)
        kinds = [k for k, _ in probes]
        if len(set(kinds)) != len(kinds) or not set(kinds) <= set(KINDS):
            raise ValueError(f"one readiness and one liveness probe at most for {key}: {kinds}")
        self._targets[key] = target
        for kind, probe in probes:
            self._states[(key, kind)] = ProbeState(kind, probe, started_at)

    def __contains__(self, key: Key) -> bool:
        return key in self._targets

    def remove(self, key: Key) -> None:
        """The replica exited (or was killed): its probes stop; a result still in flight is
        dropped when it comes."""
        self._targets.pop(key, None)
        for kind in KINDS:
            self._states.pop((key, kind), None)
            self._tokens.pop((key, kind), None)

    def state(self, key: Key, kind: str) -> ProbeState | None:
        return self._states.get((key, kind))

    def next_due(self, now: float) -> float | None:
        """The earliest time any probe is due (for a loop that sleeps until then)."""
        times = [t for s in self._states.values() if (t := s.next_due(now)) is not None]
        return min(times, default=None)

    def due(self, now: float) -> list[Due]:
        """The probes to run now, each marked in flight."""
        out = []
        for (key, kind), st in self._states.items():
            if st.is_due(now):
                st.on_sent(now)
                token = next(self._seq)
                self._tokens[(key, kind)] = token
                out.append(Due(key, st.kind, st.probe, self._targets[key], token))
        return out

    def results(self, results: Iterable[ProbeResult]) -> list[ReplicaProbe]:
        """Results that came back, in order; the transitions to report to the controller."""
        out = []
        for r in results:
            if self._tokens.get((r.key, r.kind)) != r.token:
                continue  # the replica is gone, or this is not its newest run
            del self._tokens[(r.key, r.kind)]
            t = self._states[(r.key, r.kind)].on_result(r.ok, r.at, r.why)
            if t is not None:
                job, attempt, rank = r.key
                out.append(ReplicaProbe(job, attempt, t.kind, t.ok, t.why, rank))
        return out


# ----- running probes for real ---------------------------------------------------------------


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _short(why: str) -> str:
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
        return False, _short(f"HTTP error: {e}" if str(e) else type(e).__name__)
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
        return False, _short(f"connect failed: {e.strerror or e}")


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
        return False, _short(f"cannot run {command[0]!r}: {e.strerror or e}")
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
    return False, _short(f"{how}: {err}" if err else how)


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
                return False, _short(target.refuse_commands)
            return command_probe(spec.command, target, spec.timeout_s)
        port = target.port_for(spec)
        if port is None:
            return False, "no port: the probe names none and the task has no $PORT"
        host = target.host
        if spec.kind == "tcp":
            return tcp_probe(host, port, spec.timeout_s)
        return http_probe(host, port, spec.path, spec.timeout_s)
    except Exception as e:  # a probe's failure is its result, never the agent's
        return False, _short(f"probe error: {type(e).__name__}: {e}")


class ProbeExecutor:
    """Runs probes in a bounded pool of threads. ``submit`` never blocks; ``completed``
    returns what has finished since (never blocks either). Each probe holds a worker for at
    most its timeout (and the moment a killed group takes to go), so with more workers than
    probes hanging at once no probe waits for another."""

    def __init__(
        self,
        clock: Clock | None = None,
        max_workers: int = 32,
        run: Callable[[Probe, ProbeTarget], tuple[bool, str]] = run_probe,
    ) -> None:
        self.clock = clock or MonotonicClock()
        self._run = run
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="probe")
        self._done: queue.SimpleQueue[ProbeResult] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()

    def submit(self, due: Due) -> None:
        with self._lock:
            self._pending += 1
        self._pool.submit(self._one, due)

    def _one(self, due: Due) -> None:
        try:
            ok, why = self._run(due.probe, due.target)
        except Exception as e:
            ok, why = False, _short(f"probe error: {type(e).__name__}: {e}")
        self._done.put(ProbeResult(due.key, due.kind, due.token, ok, why, self.clock.now()))

    def completed(self, wait_s: float = 0.0) -> list[ProbeResult]:
        """What finished, in the order it finished; waits up to ``wait_s`` for the first."""
        out = []
        try:
            out.append(self._done.get(timeout=wait_s) if wait_s > 0 else self._done.get_nowait())
            while True:
                out.append(self._done.get_nowait())
        except queue.Empty:
            pass
        with self._lock:
            self._pending -= len(out)
        return out

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=True)


def tick(probes: Probes, executor: ProbeExecutor, now: float) -> list[ReplicaProbe]:
    """One turn of the agent's loop: start what is due, take what finished; the records to
    report. (The caller holds whatever lock guards ``probes``; nothing here blocks.)"""
    for d in probes.due(now):
        executor.submit(d)
    return probes.results(executor.completed())


# ----- a replica's port ----------------------------------------------------------------------


def free_port(address: str = "") -> int:
    """A TCP port free on this node now: bind port 0, read what the kernel chose, release it.

    ``address`` "" (the default) binds the wildcard, which conflicts with a listener on any
    address, so the port is free on the agent's address and on every other: a replica that
    listens on 0.0.0.0 (most servers' default) needs that. A specific address checks that one.

    The race (someone binds the port between this release and the replica's own bind) is
    accepted: the kernel hands bind(0) ports out spread over its ephemeral range, so the window
    is small, and its cost is bounded — the replica fails to bind and exits, or never becomes
    ready or live, and the controller replaces it with a new attempt."""
    family: socket.AddressFamily = socket.AF_INET
    sockaddr: Any = ("0.0.0.0", 0)
    if address:
        infos = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind(sockaddr)
        return int(s.getsockname()[1])
