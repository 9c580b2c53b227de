"""A live task's deadlines, acted on at each poll: the job's warning signal before its time
limit (Slurm's ``--signal=[B:]SIG@T``), SIGTERM to its group at the limit or on a kill, and
SIGKILL once the grace is over. Nothing here blocks or reads a clock: ``now`` is passed."""

from __future__ import annotations

import logging
import signal

from gpufleet.agent.runner.process import LiveTask, signal_group, signal_main
from gpufleet.agent.tasks import signal_name

log = logging.getLogger(__name__)


def stop(t: LiveTask, grace_s: float, why: str, now: float) -> bool:
    """SIGTERM to the task's group now (once), SIGKILL due ``grace_s`` later; a second, more
    urgent stop shortens the grace. True when the SIGKILL is due at once."""
    if t.stop_why is None:
        t.stop_why = why
        t.term_at = now
        signal_group(t.proc.pid, signal.SIGTERM)
        t.kill_at = now + max(0.0, grace_s)
    elif t.kill_at is not None and now + grace_s < t.kill_at:
        t.kill_at = now + max(0.0, grace_s)
    return grace_s <= 0


def kill_hard(t: LiveTask) -> bool:
    """SIGKILL to the task's group (once); True when its container must be removed too (the
    runtime's client cannot pass a SIGKILL on)."""
    if t.killed_hard:
        return False
    t.killed_hard = True
    signal_group(t.proc.pid, signal.SIGKILL)
    return bool(t.container)


def time_limit_passed(t: LiveTask, now: float) -> bool:
    limit = t.time_limit_s
    return t.stop_why is None and limit is not None and now >= t.started_at + limit


def kill_due(t: LiveTask, now: float) -> bool:
    return t.kill_at is not None and now >= t.kill_at


def warn_if_due(t: LiveTask, now: float) -> None:
    """The job's warning signal, once per attempt, ``warn_before_s`` before its time limit (at
    the first poll after the start when the limit is shorter)."""
    limit = t.time_limit_s
    if not t.warn_signal or t.warned_at is not None or t.stop_why is not None or limit is None:
        return
    if now < t.started_at + max(0.0, limit - t.warn_before_s):
        return
    t.warned_at = now
    sig = t.warn_signal
    if t.warn_batch_only:
        signal_main(t, sig)
    else:
        signal_group(t.proc.pid, sig)
    log.info(
        "%s/%d rank %d: %s to its %s, %g s before the time limit",
        *t.key,
        signal_name(sig),
        "main process" if t.warn_batch_only else "process group",
        t.warn_before_s,
    )
