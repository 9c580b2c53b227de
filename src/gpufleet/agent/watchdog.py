"""The node's fencing watchdog: a process of its own that kills the tasks when the lease lapses.

The agent's tick loop fences its tasks when its lease runs out, but a hung agent (SIGSTOP, a
stuck thread, a full swap) ticks no more, and its tasks would run on while the controller
restarts their jobs elsewhere. So each agent starts one small watchdog process, in a session of
its own (a signal to the agent's pid or process group does not reach it), that needs nothing
from the agent but a file:

* the lease deadline, on ``CLOCK_MONOTONIC`` (system-wide on Linux, so both processes read the
  same clock), and the fence grace: a line ``lease UNTIL GRACE`` on its stdin pipe at every
  renewal (no disk needed: a full or read-only data disk never makes the lease lapse), and
  ``lease.json`` in the agent's data directory, replaced atomically when the disk allows (it
  tells a later agent's watchdog whose node this is). The later of the two holds. The deadline
  is the end of the agent's outage tolerance (ADR 0031): the lease proper only stops launches;
* past the deadline, the watchdog sends SIGTERM to every task's process group (the tasks are the
  agent's children and the ``rank*.pid`` files the runner writes), and SIGKILL once the grace is
  over; it marks each task it fenced with a ``rank*.fenced`` file, so that the agent, should it
  wake up, reports the exit as fencing (the node's fault), not as the job's failure.

The agent holds the write end of the watchdog's stdin. A clean shutdown writes ``stop`` (the
agent has stopped its tasks itself): the watchdog exits and kills nothing. End of file without
it means the agent died (SIGKILL, OOM, a restart for an upgrade): its tasks are the node's now
(each led by its keeper, not the agent's child), and they run on under the last lease the agent
published. The next agent started with the same data directory adopts them and writes the
lease file as its own: this watchdog then exits, the new agent's enforces. Should none come,
the tasks are fenced when the lease ends, and this exits once nothing it fenced is alive. The
controller counts on these rules: it declares a node lost only after the outage tolerance +
fence grace + a kill margin since the last heartbeat it answered.

This file runs as a script (``python watchdog.py``) so that it starts without importing the
agent: only the standard library and psutil.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil  # type: ignore[import-untyped]

log = logging.getLogger("gpufleet.agent.watchdog")

LEASE_FILE = "lease.json"
STEP_S = 0.1  # how often the lease is read: part of the controller's kill margin
# while the agent lives and its lease holds, nothing can happen before the lease's end or the
# agent's next line: the watchdog sleeps on its pipe until then (at most this long), not
# STEP_S at a time (10 wakes a second on every node, most of an idle watchdog's CPU)
IDLE_WAIT_S = 1.0
_PIDFILE = re.compile(r"rank(\d+)\.pid")

Ident = tuple[int, float]  # (process group id = the task leader's pid, its create time)


@dataclass(frozen=True, slots=True)
class Lease:
    until: float  # CLOCK_MONOTONIC seconds
    grace_s: float  # SIGTERM → SIGKILL
    pid: int = 0  # the agent that wrote it


def write_lease(data_dir: Path, until: float, grace_s: float, watchdog: int = 0) -> None:
    """Atomically replace the lease file (the watchdog never reads half a file). It names the
    agent writing it and its watchdog (``watchdog``, 0: none yet): a task's keeper kills its
    task once neither is alive and its own agent is gone (agent/keeper.py)."""
    path = Path(data_dir) / LEASE_FILE
    tmp = path.with_name(f".{LEASE_FILE}.{os.getpid()}.tmp")
    body = json.dumps(
        {
            "until": until if math.isfinite(until) else 0.0,
            "grace_s": grace_s,
            "pid": os.getpid(),
            "watchdog": watchdog,
        }
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(body)
    os.replace(tmp, path)


def read_lease(data_dir: Path) -> Lease | None:
    """The lease, or None when there is none or it cannot be read (treated as lapsed)."""
    try:
        rec = json.loads((Path(data_dir) / LEASE_FILE).read_text())
        return Lease(float(rec["until"]), max(0.0, float(rec["grace_s"])), int(rec.get("pid", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class Fence:
    """What to signal when, given the time, the lease and the tasks alive: no I/O, so the rule
    is tested with numbers. Once fenced, a task is killed even if the lease is renewed later:
    the controller may already have counted it lost."""

    default_grace_s: float = 2.0
    kill_at: dict[Ident, float] = field(default_factory=dict)

    def lapsed(self, now: float, lease: Lease | None) -> bool:
        return lease is None or now >= lease.until

    def step(self, now: float, lease: Lease | None, alive: set[Ident]) -> list[tuple[Ident, int]]:
        out: list[tuple[Ident, int]] = []
        for ident in list(self.kill_at):
            if ident not in alive:
                del self.kill_at[ident]  # gone: nothing left to kill
        if self.lapsed(now, lease):
            grace = lease.grace_s if lease is not None else self.default_grace_s
            for ident in sorted(alive - self.kill_at.keys()):
                self.kill_at[ident] = now + grace
                out.append((ident, signal.SIGTERM))
        for ident, at in sorted(self.kill_at.items()):
            if now >= at:
                out.append((ident, signal.SIGKILL))  # again each step until it is gone
        return out


# ----- the tasks on this node ---------------------------------------------------------------


def _create_time(pid: int) -> float | None:
    """None once it has exited: gone, or a zombie that nobody reaped (an orphaned keeper,
    under an init that does not reap)."""
    try:
        p = psutil.Process(pid)
        return None if p.status() == psutil.STATUS_ZOMBIE else float(p.create_time())
    except psutil.Error:
        return None


def find_tasks(data_dir: Path, agent_pid: int | None) -> dict[Ident, Path | None]:
    """Every task leader alive: the agent's children that lead their own process group (the
    runner starts each task so), and the pid files of tasks whose agent may be gone. Each with
    the directory its ``rank*.fenced`` mark goes to (None: unknown)."""
    found: dict[Ident, Path | None] = {}
    if agent_pid is not None:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(agent_pid).children():
                with contextlib.suppress(psutil.Error, OSError):
                    if os.getpgid(child.pid) == child.pid and child.pid != os.getpid():
                        found[(child.pid, float(child.create_time()))] = None
    for pidfile in Path(data_dir).glob("*/*/rank*.pid"):
        if _PIDFILE.fullmatch(pidfile.name) is None:
            continue
        try:
            rec = json.loads(pidfile.read_text())
            pid, created = int(rec["pid"]), float(rec["create_time"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        now_created = _create_time(pid)
        if now_created is None or abs(now_created - created) >= 0.05:
            continue  # exited, or the pid is another process now
        for ident in [i for i in found if i[0] == pid]:
            del found[ident]
        found[(pid, now_created)] = pidfile
    return found


def remove_container(pidfile: Path) -> None:
    """Start the removal of a task's container (its pid file's ``cleanup``, written by the
    runner): a SIGKILL stops the runtime's client, not the container it started."""
    try:
        cleanup = json.loads(pidfile.read_text()).get("cleanup")
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(cleanup, list) or not cleanup or not all(isinstance(a, str) for a in cleanup):
        return
    log.warning("removing the container of %s: %s", pidfile, " ".join(cleanup))
    with contextlib.suppress(OSError):
        subprocess.Popen(
            cleanup,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def mark_fenced(pidfile: Path, why: str) -> None:
    with contextlib.suppress(OSError):
        pidfile.with_suffix(".fenced").write_text(why)


def fenced_mark(pidfile: Path) -> str | None:
    """What the watchdog wrote when it fenced this task (None: it did not)."""
    try:
        return pidfile.with_suffix(".fenced").read_text()
    except OSError:
        return None


# ----- the process --------------------------------------------------------------------------


class ControlPipe:
    """The agent's pipe: ``stop``, ``lease UNTIL GRACE`` lines, or end of file (the agent is
    gone). Read without blocking; a partial line waits for the rest."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.lease: Lease | None = None  # the newest lease it sent
        self.stop = self.eof = False

    def read(self) -> None:
        while not (self.stop or self.eof):
            ready, _, _ = select.select([self.fd], [], [], 0)
            if not ready:
                return
            data = os.read(self.fd, 4096)
            if not data:
                self.eof = True
                return
            self.buf += data
            *lines, self.buf = self.buf.split(b"\n")
            for line in lines:
                self._line(line.decode("ascii", "replace").split())

    def _line(self, words: list[str]) -> None:
        if words == ["stop"]:
            self.stop = True
        elif len(words) == 3 and words[0] == "lease":
            with contextlib.suppress(ValueError):
                until, grace = float(words[1]), max(0.0, float(words[2]))
                if self.lease is None or until >= self.lease.until:
                    self.lease = Lease(until, grace)


def later(a: Lease | None, b: Lease | None) -> Lease | None:
    if a is None or b is None:
        return a or b
    return a if a.until >= b.until else b


def run(data_dir: Path, agent_pid: int | None, control_fd: int = 0) -> int:
    """Enforce the lease until the agent stops cleanly, or, once it is gone, until a new agent
    holds the node or nothing it left is alive."""
    fence = Fence()
    pipe = ControlPipe(control_fd)
    cleaned: set[Ident] = set()  # tasks whose container removal went out
    gone = False  # the agent's pipe closed without "stop"
    owner = agent_pid
    while True:
        if not gone:
            pipe.read()
        if pipe.stop:
            log.info("the agent stopped cleanly: exiting")
            return 0
        now = time.monotonic()
        if pipe.eof and not gone:
            gone, agent_pid = True, None
            log.warning("the agent is gone: its tasks run on until its lease ends or a new agent")
        on_file = read_lease(data_dir)
        if on_file is not None and on_file.pid not in (0, owner):  # another agent's now
            if gone and not fence.kill_at:
                log.info("a new agent (pid %d) holds this node now: exiting", on_file.pid)
                return 0  # it adopted the tasks; its own watchdog enforces its lease
            on_file = None
        lease = later(on_file, pipe.lease)
        tasks: dict[Ident, Path | None] = {}
        if gone or fence.lapsed(now, lease) or fence.kill_at:
            tasks = find_tasks(data_dir, agent_pid)
        for ident, sig in fence.step(now, lease, set(tasks)):
            pidfile = tasks.get(ident)
            if sig == signal.SIGTERM:
                why = "fenced: the node's watchdog saw the agent's lease expire"
                if gone:
                    why = "fenced: its agent died and none took it over within the lease"
                log.warning("%s: SIGTERM to task group %d (%s)", why, ident[0], pidfile)
                if pidfile is not None:
                    mark_fenced(pidfile, why)
            signal_group(ident[0], sig)
            if sig == signal.SIGKILL and pidfile is not None and ident not in cleaned:
                cleaned.add(ident)
                remove_container(pidfile)
        if gone and not fence.kill_at and not tasks:
            log.info("the agent is gone and nothing it left runs: exiting")
            return 0
        wait = quiet_for(now, pipe.lease, gone, fence)
        if wait is None:
            time.sleep(STEP_S)
        else:  # woken early by the agent's next line (a renewal, stop) or its end of file
            select.select([control_fd], [], [], wait)


def quiet_for(now: float, lease: Lease | None, gone: bool, fence: Fence) -> float | None:
    """How long nothing can happen but a line on the pipe: while the agent lives, has sent a
    lease on the pipe and nothing is being fenced, until that lease's end (the pipe keeps the
    latest; the lease file can only make the deadline later), at most ``IDLE_WAIT_S``.
    None: poll every ``STEP_S`` (the agent is gone and another may take the node over
    through the lease file, or tasks are being fenced)."""
    if gone or fence.kill_at or fence.lapsed(now, lease):
        return None
    assert lease is not None
    return min(lease.until - now, IDLE_WAIT_S)


class WatchdogHandle:
    """The agent's side: starts the watchdog, writes the lease, stops it cleanly."""

    def __init__(self, data_dir: Path, *, log_path: Path | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.log_path = log_path or self.data_dir / "watchdog.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.last: tuple[float, float] | None = None  # the newest lease sent
        self.fault = ""  # why the lease file could not be written ("": it could)
        self.pid = 0  # the newest watchdog's (kept after leave(): it lives on)

    def start(self, carried: Lease | None = None) -> None:
        """``carried``: the lease of the agent before us, whose tasks we adopted: they run on
        until it ends unless we register first (the old watchdog exits once the file is ours).
        None: an old agent's lease is not ours (nothing adopted)."""
        until, grace = (carried.until, carried.grace_s) if carried is not None else (0.0, 0.0)
        self.last = (until, grace) if carried is not None else None
        self._write_file(until, grace)
        self._spawn()
        self._write_file(until, grace)  # its pid now in it too, for the tasks' keepers

    def _spawn(self) -> None:
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__)), str(self.data_dir), str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a signal to the agent's group does not reach it
                close_fds=True,
            )
        self.pid = self.proc.pid
        if self.last is not None:  # a restarted watchdog hears the lease at once
            self._send(*self.last)

    def renew(self, until: float, grace_s: float) -> None:
        """Through the pipe first (no disk needed), then the file: a write that fails (a full
        or read-only disk) lapses nothing; it is a fault the agent reports (``fault``)."""
        self.last = (until, grace_s)
        self._send(until, grace_s)
        self._write_file(until, grace_s)

    def _send(self, until: float, grace_s: float) -> None:
        p = self.proc
        if p is None or p.stdin is None:
            return
        line = f"lease {until if math.isfinite(until) else 0.0!r} {grace_s!r}\n"
        with contextlib.suppress(OSError, ValueError):  # it died: ensure() starts it again
            p.stdin.write(line.encode())
            p.stdin.flush()

    def _write_file(self, until: float, grace_s: float) -> None:
        path = self.data_dir / LEASE_FILE
        try:
            write_lease(self.data_dir, until, grace_s, self.pid)
        except OSError as e:
            if not self.fault:
                log.warning("cannot write the lease file %s: %s (the pipe carries it)", path, e)
            self.fault = f"cannot write the lease file {path}: {e.strerror or e}"
            with contextlib.suppress(OSError):  # a half-written temporary file
                path.with_name(f".{LEASE_FILE}.{os.getpid()}.tmp").unlink()
        else:
            self.fault = ""

    def ensure(self) -> bool:
        """Start it again if it died (someone killed it): True when it had to."""
        if self.proc is None or self.proc.poll() is None:
            return False
        log.warning("the fencing watchdog exited (%s): starting it again", self.proc.returncode)
        self.restarts += 1
        self._spawn()
        return True

    def leave(self) -> None:
        """The agent exits for a restart and leaves its tasks: the pipe closes without
        ``stop``, so the watchdog enforces the last lease until the next agent adopts them."""
        p, self.proc = self.proc, None
        if p is not None and p.stdin is not None:
            with contextlib.suppress(OSError):
                p.stdin.close()

    def stop(self, timeout_s: float = 5.0) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        with contextlib.suppress(OSError, ValueError):  # ValueError: closed already
            assert p.stdin is not None
            p.stdin.write(b"stop\n")
            p.stdin.close()
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s watchdog %(message)s")
    data_dir = Path(argv[0])
    agent_pid = int(argv[1]) if len(argv) > 1 else None
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return run(data_dir, agent_pid)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
