"""A live task and its process group: the record the runner keeps of each rank it started, and
the few calls that act on a group (signal it, see its leader's exit without reaping it, the pid
file a restarted agent finds it by)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from gpufleet.agent.accounts import Account
from gpufleet.agent.tasks import Key


@dataclass
class LiveTask:
    key: Key
    proc: subprocess.Popen[bytes]
    started_at: float
    time_limit_s: float | None
    grace_s: float
    gpus: tuple[int, ...]
    gpu_milli: int
    pidfile: Path
    tmp: Path  # its private temporary directory, removed when it is reaped
    stop_why: str | None = None  # set once we decided to stop it
    term_at: float | None = None  # when the SIGTERM went out
    kill_at: float | None = None  # when SIGKILL follows it
    killed_hard: bool = False
    warn_signal: int = 0  # the job's warning signal (0: none)
    warn_before_s: float = 0.0
    warn_batch_only: bool = False
    warned_at: float | None = None  # when it went out (once per attempt)
    # the command runs under taskstart's output copier (the group's leader), as its child
    behind_copier: bool = False
    container: str = ""  # its container's name, when it runs in one
    # how it was started, for its command probes (probes.ProbeTarget): its account, its
    # environment and its working directory as the runner gave them
    account: Account | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "/"


def main_processes(t: LiveTask) -> list[int]:
    """The task's main process: the leader, or under the output copier its child (Slurm's
    B: signals the batch script, not what copies its output)."""
    if not t.behind_copier:
        return [t.proc.pid]
    try:
        return [c.pid for c in psutil.Process(t.proc.pid).children()]
    except psutil.Error:
        return []


def exit_status(proc: subprocess.Popen[bytes]) -> int | None:
    """The exit status, once the leader has exited; its group's stragglers die first.

    ``waitid(WNOWAIT)`` sees the exit without reaping, so the leader's pid — the group id —
    cannot be reused before the SIGKILL to the group lands.
    """
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        info = None
    except AttributeError:  # no waitid on this platform
        return proc.poll()
    if info is None:
        return proc.poll()
    signal_group(proc.pid, signal.SIGKILL)  # children it left behind must not hold its GPUs
    return proc.wait(timeout=5)


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_main(t: LiveTask, sig: int) -> None:
    """``sig`` to the task's main process only (not reaped before the next poll)."""
    for pid in main_processes(t):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def write_pidfile(path: Path, pid: int, cleanup: list[str] | None = None) -> None:
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = 0.0
    tmp = path.with_suffix(".tmp")
    rec: dict[str, object] = {"pid": pid, "create_time": created}
    if cleanup:
        rec["cleanup"] = cleanup
    tmp.write_text(json.dumps(rec))
    tmp.replace(path)
