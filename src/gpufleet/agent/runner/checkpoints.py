"""A task's checkpoint file ($GPUFLEET_CHECKPOINT_FILE), looked at each poll: a write during a
stop's notice ends its wait (``supervise.notice_due``), and rank 0 reports each new write to the
controller as its age, so that victims are chosen by the work since (ADR 0036)."""

from __future__ import annotations

import logging
import os
import time

from gpufleet.agent.runner import supervise
from gpufleet.agent.runner.process import LiveTask
from gpufleet.agent.tasks import RunnerEvent

log = logging.getLogger(__name__)


def mtime(path: str) -> float | None:
    """The file's modification time (None: absent, or not to be read)."""
    if not path:
        return None
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def look(t: LiveTask, now: float) -> list[RunnerEvent]:
    """The file now: its SIGTERM when a notice waited for it; a report of a new write (rank
    0's, once per write: every rank sees one shared file)."""
    m = mtime(t.checkpoint)
    supervise.notice_due(t, now, m)
    if m is None or m == t.checkpoint_seen:
        return []
    first = t.checkpoint_seen is None
    t.checkpoint_seen = m
    # a file older than this task (an earlier attempt's) is no checkpoint of this attempt:
    # the first look only remembers it, as the controller ignores one from before the start
    age = max(0.0, time.time() - m)
    if t.key[2] != 0 or (first and age > now - t.started_at):
        return []
    log.info("%s/%d rank %d: its checkpoint is written (%.1f s ago): reported", *t.key, age)
    return [RunnerEvent("checkpoint", t.key, age_s=age)]


def current(t: LiveTask, now: float) -> RunnerEvent | None:
    """Rank 0's checkpoint as the file stands, its age counted now: what the agent tells a
    controller that registers it (a restarted one has forgotten the last report, and a report
    queued while none listened is stale by the outage). None: no file of this attempt."""
    m = mtime(t.checkpoint)
    if t.key[2] != 0 or m is None:
        return None
    age = max(0.0, time.time() - m)
    if age > now - t.started_at:  # an earlier attempt's file saves none of this one's work
        return None
    return RunnerEvent("checkpoint", t.key, age_s=age)
