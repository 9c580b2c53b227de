"""A step's tasks on one node: started, their output read line by line, their ends reported,
and killed as a group. The step daemon runs remote nodes' tasks with it and srun its own node's,
so both behave alike. Each task is a process group of its own (a kill reaches its children)
and, where util-linux ``setpriv`` exists, dies with the process that started it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Emit = Callable[[dict[str, Any]], None]
READ_CHUNK = 1 << 16
# output goes in messages of at most this many bytes (JSON may escape each byte into six,
# well under wire.MAX_MESSAGE); a longer line goes in pieces (a progress bar's \r run)
PIECE = 1 << 16
DRAIN_S = 2.0  # how long a finished task's output may trail it (a child holding the pipe)

_SETPRIV = shutil.which("setpriv")
# $$ is the shell's pid, which exec keeps: the task's own pid, as Slurm's SLURM_TASK_PID; the
# task's umask srun's (SLURM_UMASK), as slurmstepd sets it
_TASK_PID = (
    "SLURM_TASK_PID=$$; export SLURM_TASK_PID; "
    'if [ -n "$SLURM_UMASK" ]; then umask "$SLURM_UMASK" 2>/dev/null; fi; exec "$@"'
)


def task_argv(argv: Sequence[str]) -> list[str]:
    death = [_SETPRIV, "--pdeathsig", "KILL"] if _SETPRIV else []
    return [*death, "/bin/sh", "-c", _TASK_PID, "srun", *argv]


def decode(data: bytes) -> str:
    """Bytes as JSON can carry them and ``encode`` gives back exactly (not UTF-8: escaped)."""
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


@dataclass
class _Task:
    procid: int
    proc: subprocess.Popen[bytes]
    readers: list[threading.Thread] = field(default_factory=list)


class TaskSet:
    """``emit`` gets ``{"t": "out", "task", "fd", "data"}`` per line (or chunk, unbuffered) and
    ``{"t": "exit", "task", "status"}`` once per task after its output (status: the exit code,
    or minus the signal that ended it, as Popen says)."""

    def __init__(self, emit: Emit, *, unbuffered: bool = False) -> None:
        self.emit = emit
        self.unbuffered = unbuffered
        self._tasks: dict[int, _Task] = {}
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._left = 0

    def start(self, procid: int, argv: Sequence[str], env: Mapping[str, str], cwd: str) -> None:
        """Start one task. OSError (the shell could not start) is the caller's to report;
        a command that cannot be found exits 127, as a shell says."""
        proc = subprocess.Popen(
            task_argv(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
        t = _Task(procid, proc)
        with self._lock:
            self._tasks[procid] = t
            self._left += 1
        for fd, pipe in ((1, proc.stdout), (2, proc.stderr)):
            assert pipe is not None
            r = threading.Thread(target=self._pump, args=(procid, fd, pipe), daemon=True)
            t.readers.append(r)
            r.start()
        threading.Thread(target=self._reap, args=(t,), daemon=True).start()

    def _pump(self, procid: int, fd: int, pipe: Any) -> None:
        raw = pipe.fileno()
        buf = b""
        try:
            while chunk := os.read(raw, READ_CHUNK):
                if self.unbuffered:
                    self._out(procid, fd, chunk)
                    continue
                buf += chunk
                cut = buf.rfind(b"\n") + 1
                if cut == 0 and len(buf) >= PIECE:
                    cut = len(buf)
                if cut:
                    self._out(procid, fd, buf[:cut])
                    buf = buf[cut:]
        except OSError:
            pass
        finally:
            if buf:
                self._out(procid, fd, buf)
            pipe.close()

    def _out(self, procid: int, fd: int, data: bytes) -> None:
        while data:
            cut = len(data) if len(data) <= PIECE else data.rfind(b"\n", 0, PIECE) + 1 or PIECE
            self.emit({"t": "out", "task": procid, "fd": fd, "data": decode(data[:cut])})
            data = data[cut:]

    def _reap(self, t: _Task) -> None:
        status = t.proc.wait()
        for r in t.readers:
            r.join(DRAIN_S)
        # what it left running in its group (a background child) ends with it, as a step's
        with contextlib.suppress(OSError):
            os.killpg(t.proc.pid, signal.SIGKILL)
        self.emit({"t": "exit", "task": t.procid, "status": status})
        with self._lock:
            self._left -= 1
            self._done.notify_all()

    def signal(self, sig: int) -> None:
        with self._lock:
            live = [t.proc.pid for t in self._tasks.values() if t.proc.returncode is None]
        for pid in live:
            with contextlib.suppress(OSError):
                os.killpg(pid, sig)

    def wait(self, timeout_s: float | None = None) -> bool:
        """True once every started task has ended and been reported."""
        with self._done:
            return self._done.wait_for(lambda: self._left == 0, timeout_s)

    def terminate(self, grace_s: float) -> None:
        """SIGTERM, and SIGKILL to what is left after ``grace_s`` (Slurm's KillWait)."""
        self.signal(signal.SIGTERM)
        if not self.wait(grace_s):
            self.signal(signal.SIGKILL)
            self.wait(grace_s)

    def pids(self) -> list[int]:
        with self._lock:
            return [t.proc.pid for t in self._tasks.values()]
