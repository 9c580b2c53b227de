"""The tasks a previous agent left on this node (ADR 0031): adopted when they still run, their
exits reported when they ended meanwhile.

An agent that dies (SIGKILL, OOM, an upgrade) leaves its tasks to the node's watchdog, which
fences them only at the end of the outage tolerance. Each task's pid file says who leads its
group (its keeper: pid and create time) and what the runner needs to go on supervising it (its
start, time limit, grace, GPUs, warning signal, container: ``record``); its keeper writes its
exit status to ``rank*.exit``. The next agent, started with the same data directory, reads
both: a task that still runs becomes a live task again (``AdoptedProc`` answers the runner's
calls on a child it did not start, from a pidfd and the exit file), and one that ended is
reported with the status its keeper recorded. After a reboot (another boot id) nothing is
adopted: the pids and the monotonic times in those files belong to the boot before.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from gpufleet.agent import sandbox, secrets
from gpufleet.agent.keeper import read_status
from gpufleet.agent.runner.exits import fenced_by_watchdog
from gpufleet.agent.runner.process import LiveTask, signal_group
from gpufleet.agent.runner.taskhost import TaskHost
from gpufleet.agent.tasks import FENCED, Key, RunnerEvent, signal_name

log = logging.getLogger(__name__)

_PIDFILE = re.compile(r"rank(\d+)\.pid")
_EXITFILE = re.compile(r"rank(\d+)\.exit")
_STEP_S = 0.02


def record(t: LiveTask) -> dict[str, object]:
    """What a restarted agent needs to go on supervising ``t`` (in its pid file)."""
    return {
        "started_at": t.started_at,
        "time_limit_s": t.time_limit_s,
        "grace_s": t.grace_s,
        "gpus": list(t.gpus),
        "gpu_milli": t.gpu_milli,
        "warn_signal": t.warn_signal,
        "warn_before_s": t.warn_before_s,
        "warn_batch_only": t.warn_batch_only,
        "behind_copier": t.behind_copier,
        "container": t.container,
        "cwd": t.cwd,
        "role": t.role,
        "checkpoint": t.checkpoint,
        "metrics": t.metrics,
        # a stop under way (its notice's wait, its SIGKILL's time): on the monotonic clock,
        # which a restarted agent shares
        "stop": None
        if t.stop_why is None
        else {
            "why": t.stop_why,
            "term_at": t.term_at,
            "kill_at": t.kill_at,
            "notice_until": t.notice_until,
            "notice_mtime": t.notice_mtime,
            "grace_s": t.stop_grace_s,
        },
        # what its HTTP and TCP probes need (never the rest of its environment: secrets)
        "port": t.env.get("PORT", ""),
        "probes": t.probes,
    }


def alive(pid: int, created: float) -> bool:
    """Whether ``pid`` is still the process that was created then, and has not exited (a
    zombie nobody reaped has: an init that does not reap leaves them)."""
    try:
        p = psutil.Process(pid)
        return bool(abs(p.create_time() - created) < 0.05 and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


class AdoptedProc:
    """A task's keeper that is not our child: the calls the runner makes on a ``Popen``, its
    end seen through a pidfd (no pid reuse can fool it; without pidfds, Linux < 5.3, its pid
    and create time) and its status read from the file its keeper wrote. ``unknown``: it
    ended without one (its keeper was SIGKILLed)."""

    def __init__(self, pid: int, created: float, exit_file: Path) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.exit_file = exit_file
        self.unknown = False
        self._created = created
        self._fd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self._fd = os.pidfd_open(pid)  # before the check below: it holds what was checked

    def running(self) -> bool:
        return alive(self.pid, self._created) and not self._ended()

    def _ended(self) -> bool:
        if self._fd is None:
            return not alive(self.pid, self._created)
        ready, _, _ = select.select([self._fd], [], [], 0)  # readable once it has exited
        return bool(ready)

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if not self._ended():
            return None
        signal_group(self.pid, signal.SIGKILL)  # what it left in its group must not hold GPUs
        rc = read_status(str(self.exit_file))
        if rc is None:
            self.unknown, rc = True, -signal.SIGKILL
        self.returncode = rc
        self.close()
        return rc

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(_STEP_S)
        return rc

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _key(path: Path, pattern: re.Pattern[str]) -> Key | None:
    m = pattern.fullmatch(path.name)
    if m is None or not path.parent.name.isdigit():
        return None
    return path.parent.parent.name, int(path.parent.name), int(m.group(1))


def restore(host: TaskHost, key: Key, pid: int, created: float, rec: dict[str, Any]) -> LiveTask:
    """The live task again, as its pid file recorded it."""
    t = rec.get("task") if isinstance(rec.get("task"), dict) else {}
    assert isinstance(t, dict)
    limit = t.get("time_limit_s")
    return LiveTask(
        key=key,
        proc=AdoptedProc(pid, created, host.exit_path(key)),
        started_at=float(t.get("started_at", 0.0)),
        time_limit_s=float(limit) if limit is not None else None,
        grace_s=float(t.get("grace_s", 5.0)),
        gpus=tuple(int(g) for g in t.get("gpus", ())),
        gpu_milli=int(t.get("gpu_milli", 1000)),
        pidfile=host.pid_path(key),
        tmp=host.tmp_path(key),
        warn_signal=int(t.get("warn_signal", 0)),
        warn_before_s=float(t.get("warn_before_s", 0.0)),
        warn_batch_only=bool(t.get("warn_batch_only", False)),
        behind_copier=bool(t.get("behind_copier", False)),
        container=str(t.get("container", "")),
        cwd=str(t.get("cwd", "/")),
        role=str(t.get("role", "task")),
        checkpoint=str(t.get("checkpoint", "")),
        metrics=str(t.get("metrics", "")),
        **_stop(t.get("stop")),
        env={"PORT": str(t["port"])} if t.get("port") else {},
        probes=dict(t["probes"]) if isinstance(t.get("probes"), dict) else {},
        adopted=True,
    )


def _stop(raw: object) -> dict[str, Any]:
    """A stop under way, as ``record`` wrote it, in LiveTask's fields (none: {})."""
    if not isinstance(raw, dict):
        return {}

    def num(key: str) -> float | None:
        v = raw.get(key)
        return float(v) if isinstance(v, int | float) else None

    return {
        "stop_why": str(raw.get("why", "stopped")),
        "term_at": num("term_at"),
        "kill_at": num("kill_at"),
        "notice_until": num("notice_until"),
        "notice_mtime": num("notice_mtime"),
        "stop_grace_s": num("grace_s") or 0.0,
    }


def _ended_without_us(key: Key, rc: int | None, rebooted: bool) -> RunnerEvent:
    """The exit of a task that ended while no agent ran: as its keeper recorded it, else the
    node's doing (requeued, not charged)."""
    if rc is not None:
        code = 128 - rc if rc < 0 else rc
        return RunnerEvent("exited", key, code, "" if rc == 0 else _how(rc))
    why = (
        f"{FENCED} the node rebooted and the task ended with it"
        if rebooted
        else f"{FENCED} it ended while no agent ran, and how is not known"
    )
    return RunnerEvent("exited", key, 128 + signal.SIGKILL, why)


def _how(rc: int) -> str:
    return f"killed by {signal_name(-rc)}" if rc < 0 else f"exited with code {rc}"


def _clean_dead(host: TaskHost, key: Key, rec: dict[str, Any], rebooted: bool) -> None:
    """What a task that ended left: its group's stragglers (not after a reboot: those pids are
    other processes now), its container, its pid file and private /tmp."""
    pid, created = int(rec.get("pid", 0)), float(rec.get("create_time", 0.0))
    if not rebooted and pid > 0:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            if abs(p.create_time() - created) < 0.05:
                signal_group(pid, signal.SIGKILL)  # a zombie leader: its group may live on
    cleanup = rec.get("cleanup")
    if isinstance(cleanup, list) and all(isinstance(a, str) for a in cleanup):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(cleanup, capture_output=True, timeout=60, check=False)
    host.pid_path(key).unlink(missing_ok=True)
    sandbox.remove_tree(host.tmp_path(key))


def collect(host: TaskHost, *, rebooted: bool) -> tuple[dict[Key, LiveTask], list[RunnerEvent]]:
    """The tasks a previous agent left: those that still run (live tasks again), and the exits
    of those that ended meanwhile (their keepers' status, kept until the controller has it)."""
    adopted: dict[Key, LiveTask] = {}
    ended: dict[Key, RunnerEvent] = {}
    for pidfile in sorted(host.data_dir.glob("*/*/rank*.pid")):
        key = _key(pidfile, _PIDFILE)
        if key is None:
            continue
        try:
            rec = json.loads(pidfile.read_text())
            pid, created = int(rec["pid"]), float(rec["create_time"])
        except (OSError, ValueError, KeyError, TypeError):
            pidfile.unlink(missing_ok=True)
            continue
        if not rebooted:
            task = restore(host, key, pid, created, rec)
            assert isinstance(task.proc, AdoptedProc)
            if task.proc.running():
                adopted[key] = task
                log.warning("adopted task %s/%d rank %d (pid %d), still running", *key, pid)
                continue
            task.proc.close()
        _clean_dead(host, key, rec, rebooted)
        ev = _ended_without_us(key, read_status(str(host.exit_path(key))), rebooted)
        ended[key] = fenced_by_watchdog(ev, pidfile)
    for exit_file in sorted(host.data_dir.glob("*/*/rank*.exit")):
        key = _key(exit_file, _EXITFILE)
        if key is not None and key not in adopted and key not in ended:
            # reaped by the agent before, its exit perhaps never delivered: said again
            ended[key] = _ended_without_us(key, read_status(str(exit_file)), rebooted)
    for key, ev in ended.items():
        log.warning("task %s/%d rank %d ended while no agent ran: %s", *key, ev.why or "code 0")
    mine = {host.tmp_path(k) for k in adopted}
    for d in secrets.leftovers(host.data_dir):  # no task of ours may still read them
        if d.parent not in mine:
            sandbox.remove_tree(d)
    return adopted, list(ended.values())
