"""A task's metrics file (``$GPUFLEET_METRICS_FILE``: rank 0's, in its private temporary
directory), looked at each poll and once more as the task ends: each change is parsed
(``model.jobmetrics``) and reported to the controller, metrics and problems together.

The agent may run as root and the directory is the task's: the file is opened without
following a symlink and without blocking (a FIFO), and read only if it is a regular file
owned by the task's account, never more than ``MAX_BYTES`` of it."""

from __future__ import annotations

import os
import stat
from collections import OrderedDict
from collections.abc import Collection
from pathlib import Path

from gpufleet.agent.runner.process import LiveTask
from gpufleet.agent.tasks import Key, RunnerEvent
from gpufleet.model.jobmetrics import MAX_BYTES, Metrics, parse

KEPT = 256  # ended tasks whose last report is kept (for a controller that registers us anew)
FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def read(path: str, uid: int | None) -> tuple[tuple[float, int], bytes, int] | str | None:
    """((mtime, size), the file's start, its size), or what is wrong with it; None: absent."""
    try:
        fd = os.open(path, FLAGS)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"the file cannot be opened ({e.strerror}): not read"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "the file is not a regular file: not read"
        if uid is not None and st.st_uid != uid:
            return "the file is not the task's own: not read"
        data = os.read(fd, MAX_BYTES + 1) if st.st_size <= MAX_BYTES else b""
        return (st.st_mtime, st.st_size), data, st.st_size
    finally:
        os.close(fd)


def _owner(directory: Path) -> int | None:
    """The task's account, as the owner of its private directory (the agent made it so): an
    adopted task's account is not kept on disk."""
    try:
        return os.lstat(directory).st_uid
    except OSError:
        return None


def look(t: LiveTask) -> list[RunnerEvent]:
    """A report when the file changed since the last look (none when it did not, or is
    absent)."""
    uid = t.account.uid if t.account is not None else _owner(t.tmp)
    if uid is None:  # an adopted task whose directory is gone: nothing of its own to read
        return []
    got = read(t.metrics, uid)
    if got is None:
        return []
    metrics: Metrics
    problems: tuple[str, ...]
    if isinstance(got, str):
        seen: object = got
        metrics, problems = (), (got,)
    else:
        seen, data, size = got
        metrics, problems = parse(data, size)
    if seen == t.metrics_seen:
        return []
    t.metrics_seen = seen
    return [RunnerEvent("metrics", t.key, metrics=metrics, problems=problems)]


class Kept:
    """Each task's last report, kept past its end for the newest ``most`` tasks: a controller
    that registers the agent anew (restarted, or a new leader) keeps job metrics in memory only
    and hears them again from here (``replay``, then the next poll's ``take``)."""

    def __init__(self, most: int = KEPT) -> None:
        self._last: OrderedDict[Key, RunnerEvent] = OrderedDict()
        self._again: list[RunnerEvent] = []
        self.most = most

    def keep(self, events: list[RunnerEvent]) -> list[RunnerEvent]:
        for ev in events:
            self._last[ev.key] = ev
            self._last.move_to_end(ev.key)
            while len(self._last) > self.most:
                self._last.popitem(last=False)
        return events

    def replay(self, live: Collection[Key]) -> None:
        """The ended tasks' last reports, sent again at the next poll (the live ones' files
        are read again instead)."""
        self._again = [ev for k, ev in list(self._last.items()) if k not in live]

    def take(self) -> list[RunnerEvent]:
        out, self._again = self._again, []
        return out
