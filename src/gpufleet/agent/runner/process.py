"""A live task and its process group: the record the runner keeps of each rank it started, and
the few calls that act on a group (signal it, see its leader's exit without reaping it, the pid
file a restarted agent finds it by)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil  # type: ignore[import-untyped]

from gpufleet.agent.accounts import Account
from gpufleet.agent.tasks import Key


class TaskProc(Protocol):
    """What the runner asks of a task's leader: a ``Popen`` of its own, or a task a previous
    agent started (``adopt.AdoptedProc``: not our child, its exit read from its keeper)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


@dataclass
class LiveTask:
    key: Key
    proc: TaskProc
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
    # a service replica's probes as its launch brought them (kept for the agent after ours)
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    adopted: bool = False  # started by the agent before this one (adopt.py)
    role: str = "task"  # the launch's: "batch" runs the script, "step" the step daemon
    # the job's checkpoint file ($GPUFLEET_CHECKPOINT_FILE; "": none) and the mtime last seen
    checkpoint: str = ""
    checkpoint_seen: float | None = None
    # rank 0's metrics file ($GPUFLEET_METRICS_FILE; "": none) and what was last seen of it
    metrics: str = ""
    metrics_seen: object = None
    # a stop with notice (a preemption's): the notice went out then, and the SIGTERM waits
    # until ``notice_until`` or the checkpoint file is written, whichever comes first
    noticed_at: float | None = None
    notice_until: float | None = None
    notice_mtime: float | None = None  # the checkpoint file's mtime at the notice
    stop_grace_s: float = 0.0  # the stop's SIGTERM → SIGKILL grace


def main_processes(t: LiveTask) -> list[int]:
    """The task's main process: the keeper's child (the group's leader is the keeper), or
    under the output copier its child (Slurm's B: signals the batch script, not what copies
    its output)."""
    try:
        found = psutil.Process(t.proc.pid).children()
        if t.behind_copier:
            found = [g for c in found for g in c.children()]
        return [c.pid for c in found]
    except psutil.Error:
        return []


def exit_status(proc: TaskProc) -> int | None:
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


SRUN_MODULE = "gpufleet.slurm.srun"


def signal_steps(t: LiveTask, sig: int) -> int:
    """``sig`` to the job steps a batch script runs (its ``srun`` processes, which pass it on
    to every task of their step, on every node), not to the script itself: Slurm's --signal
    without B:. Returns how many were signalled."""
    try:
        found = psutil.Process(t.proc.pid).children(recursive=True)
    except psutil.Error:
        return 0
    n = 0
    for p in found:
        try:
            argv = p.cmdline()
        except psutil.Error:
            continue
        # srun is a script: its name is argv[0], or argv[1] after its interpreter (or it runs
        # as ``python [-P] -m gpufleet.slurm.srun``: the shim's own is run with -P)
        if any(os.path.basename(a) == "srun" for a in argv[:2]) or SRUN_MODULE in argv[1:4]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, sig)
                n += 1
    return n


def signal_job(t: LiveTask, sig: int, batch_only: bool) -> str:
    """``sig`` where Slurm's ``--signal=[B:]SIG`` sends it; says to whom. B: the batch
    shell (a plain job's rank: its own process) alone; else every task: a plain job's rank's
    whole group, a batch script's steps. A step daemon's rank is never signalled: srun on the
    script's node forwards it to the step's tasks there."""
    if t.role == "step":
        return "nobody here (srun forwards it)"
    if batch_only:
        signal_main(t, sig)
        return "batch shell" if t.role == "batch" else "main process"
    if t.role == "batch":
        return f"job steps ({signal_steps(t, sig)} srun)"
    signal_group(t.proc.pid, sig)
    return "process group"


def signal_scope(t: LiveTask, sig: int, scope: str) -> str:
    """A signal the task lives through (``scancel --signal``, ADR 0078); says to whom. "steps"
    (scancel's default) goes where ``--signal=SIG`` goes, "batch" (``--batch``) where
    ``--signal=B:SIG`` goes; "full" (``--full``) to the task's whole process group: a batch
    script, its children and their srun, which forwards it to its step's tasks."""
    if scope == "full" and t.role != "step":
        signal_group(t.proc.pid, sig)
        return "process group"
    return signal_job(t, sig, scope == "batch")


def write_pidfile(
    path: Path, pid: int, cleanup: list[str] | None = None, task: dict[str, object] | None = None
) -> None:
    """The task's pid file: its leader (pid and create time, so that a reused pid is not taken
    for it), how to remove its container, and ``task``: what a restarted agent needs to go on
    supervising it (``adopt.restore``)."""
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = 0.0
    tmp = path.with_suffix(".tmp")
    rec: dict[str, object] = {"pid": pid, "create_time": created}
    if cleanup:
        rec["cleanup"] = cleanup
    if task:
        rec["task"] = task
    tmp.write_text(json.dumps(rec))
    tmp.replace(path)
