"""A live task's deadlines, acted on at each poll: the job's warning signal before its time
limit (Slurm's ``--signal=[B:]SIG@T``), a stop's notice (a preemption's: the job's signal, then
SIGTERM once it has written its checkpoint file or its wait is over), SIGTERM to its group at
the limit or on a kill, and SIGKILL once the grace is over. Nothing here blocks or reads a
clock: ``now`` is passed (the checkpoint file's mtime is given, as it is seen)."""

from __future__ import annotations

import logging
import signal

from gpufleet.agent.runner.process import LiveTask, signal_group, signal_job
from gpufleet.agent.tasks import signal_name
from gpufleet.model.notice import StopNotice

log = logging.getLogger(__name__)


def stop(
    t: LiveTask,
    grace_s: float,
    why: str,
    now: float,
    notice: StopNotice | None = None,
    mtime: float | None = None,
) -> bool:
    """SIGTERM to the task's group now (once), SIGKILL due ``grace_s`` later; a second, more
    urgent stop shortens the grace. With a ``notice``, its signal first and the SIGTERM when
    ``notice_due`` says (``mtime``: the checkpoint file's now, None if absent); a stop without
    one cuts that wait short. True when the SIGKILL is due at once."""
    if t.stop_why is None:
        t.stop_why = why
        t.stop_grace_s = grace_s
        # as Slurm's send_user_signal: the signal once; a job warned by it already (its time
        # limit near) saved its state then, and gets SIGTERM now
        warned = notice is not None and t.warned_at is not None and notice.signal == t.warn_signal
        if notice is not None and notice.signal and notice.wait_s > 0 and not warned:
            t.noticed_at = now
            t.notice_until = now + notice.wait_s
            t.notice_mtime = mtime
            whom = signal_job(t, notice.signal, notice.batch_only)
            log.info(
                "%s/%d rank %d: %s to its %s; SIGTERM once its checkpoint is written, within "
                "%g s (%s)",
                *t.key,
                signal_name(notice.signal),
                whom,
                notice.wait_s,
                why,
            )
            return False
        _term(t, grace_s, now)
    elif t.term_at is None:  # a stop more urgent than the notice's wait (a cancel)
        if notice is None:
            _term(t, grace_s, now)
        else:
            return False
    elif t.kill_at is not None and now + grace_s < t.kill_at:
        t.kill_at = now + max(0.0, grace_s)
    return grace_s <= 0


def _term(t: LiveTask, grace_s: float, now: float) -> None:
    t.notice_until = None
    t.term_at = now
    signal_group(t.proc.pid, signal.SIGTERM)
    t.kill_at = now + max(0.0, grace_s)


def notice_due(t: LiveTask, now: float, mtime: float | None) -> bool:
    """The SIGTERM after a notice, now if its wait is over or the checkpoint file has been
    written since (``mtime``: the file's now; None if absent). True when it went out."""
    if t.notice_until is None or t.term_at is not None:
        return False
    written = mtime is not None and mtime != t.notice_mtime
    if not written and now < t.notice_until:
        return False
    if written:
        log.warning("%s/%d rank %d: its checkpoint is written: SIGTERM", *t.key)
    _term(t, t.stop_grace_s, now)
    return True


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
    whom = signal_job(t, sig, t.warn_batch_only)
    log.info(
        "%s/%d rank %d: %s to its %s, %g s before the time limit",
        *t.key,
        signal_name(sig),
        whom,
        t.warn_before_s,
    )
