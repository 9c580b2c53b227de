"""How tasks end: an exit said as the shell says it (a task killed by a signal exits ``128 +
signal``, with the reason the runner stopped it), what a reaped task leaves to clean, and the
process groups a previous agent left running (found by their pid files) killed at startup."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from gpufleet.agent import sandbox, secrets
from gpufleet.agent.runner.process import LiveTask, signal_group
from gpufleet.agent.runner.taskhost import TaskHost
from gpufleet.agent.tasks import FENCED, Key, RunnerEvent, signal_name
from gpufleet.agent.watchdog import fenced_mark

log = logging.getLogger(__name__)


def describe(t: LiveTask, rc: int) -> tuple[int, str]:
    """The exit code and why, for a task whose leader exited with ``rc`` (Popen's: -N for a
    signal)."""
    if rc < 0:
        code, how = 128 - rc, f"killed by {signal_name(-rc)}"
        if t.killed_hard and -rc == signal.SIGKILL and t.kill_at and t.term_at is not None:
            how += f" after {t.kill_at - t.term_at:g} s grace"
    else:
        code, how = rc, f"exited with code {rc}"
    if t.stop_why is not None:
        return code, f"{t.stop_why}; {how}"
    return code, "" if rc == 0 else how


def reaped(t: LiveTask, rc: int) -> RunnerEvent:
    """The exit of a task whose leader has exited; its pid file and private /tmp removed."""
    with contextlib.suppress(OSError):
        t.pidfile.unlink()
    sandbox.remove_tree(t.tmp)
    ev = fenced_by_watchdog(RunnerEvent("exited", t.key, *describe(t, rc)), t.pidfile)
    log.info("exited %s/%d rank %d: %s", *t.key, ev.why or "code 0")
    return ev


def fenced_by_watchdog(ev: RunnerEvent, pidfile: Path) -> RunnerEvent:
    """A task the watchdog killed (its agent hung, or dead) exited for the node's sake, not the
    job's: say so, so that the controller requeues it instead of charging a retry."""
    if ev.why.startswith(FENCED):
        return ev
    mark = fenced_mark(pidfile)
    if mark is None:
        return ev
    return RunnerEvent(ev.kind, ev.key, ev.exit_code, f"{mark}; {ev.why}" if ev.why else mark)


def kill_orphans(host: TaskHost, live: Iterable[Key]) -> list[Key]:
    """Kill the process groups a previous agent left running (their pid files remain):
    nobody supervises them, and the controller will run their jobs again elsewhere. ``live``:
    this agent's own tasks, whose delivered secrets stay."""
    killed = []
    for pidfile in host.data_dir.glob("*/*/rank*.pid"):
        m = re.fullmatch(r"rank(\d+)\.pid", pidfile.name)
        if m is None or not pidfile.parent.name.isdigit():
            continue
        key: Key = (pidfile.parent.parent.name, int(pidfile.parent.name), int(m.group(1)))
        try:
            rec = json.loads(pidfile.read_text())
            pid, created = int(rec["pid"]), float(rec["create_time"])
        except (OSError, ValueError, KeyError, TypeError):
            pidfile.unlink(missing_ok=True)
            continue
        if _same_process(pid, created) and signal_group(pid, signal.SIGKILL):
            killed.append(key)
            log.warning("killed orphaned task %s/%d rank %d (pid %d)", *key, pid)
        cleanup = rec.get("cleanup")
        if isinstance(cleanup, list) and all(isinstance(a, str) for a in cleanup):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(cleanup, capture_output=True, timeout=60, check=False)
        pidfile.unlink(missing_ok=True)
        sandbox.remove_tree(host.tmp_path(key))
    # secrets a previous agent delivered to tasks it no longer runs (a pid file lost, a
    # crash between the delivery and the start): no task of ours may still read them
    mine = {host.tmp_path(k) for k in live}
    for d in secrets.leftovers(host.data_dir):
        if d.parent not in mine:
            sandbox.remove_tree(d)
            log.warning("removed the secrets left in %s", d)
    return killed


def _same_process(pid: int, created: float) -> bool:
    """Whether ``pid`` is still the process the pid file recorded (not a reused pid)."""
    try:
        return bool(abs(psutil.Process(pid).create_time() - created) < 0.05)
    except psutil.NoSuchProcess:
        return True  # the leader is gone; its group may still hold children
    except psutil.Error:
        return False
