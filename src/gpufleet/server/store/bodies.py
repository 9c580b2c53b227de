"""A job row's immutable part (its spec and dependencies), decoded once: a standby reads it
ahead while it waits, so that a takeover reads only each unfinished job's mutable columns
(ADR 0059).

Decoding a spec is most of what a read-back costs (~55 µs a job: the JSON and
``spec_from_dict``); with 20,000 held jobs a new leader on a busy host spent seconds on it
before it answered (issue 26). Nothing written after the insert ever changes ``spec`` or
``depends_on`` (``jobs.py``: an update sets only the mutable columns; no job row is deleted),
so a body read at any time is the body now: none is ever stale, and one the standby has not
read yet is read at the takeover, in the takeover's snapshot. The cache only saves work; what
the new leader acts on is read in that one snapshot, as before."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from gpufleet.model.job import JobSpec
from gpufleet.server.store.codec import spec_from_dict
from gpufleet.server.store.schema import jobs

# the columns a takeover reads for every unfinished job: all but the body's
HEAD = tuple(c for c in jobs.c if c.name not in ("spec", "depends_on"))
BODY = (jobs.c.id, jobs.c.seq, jobs.c.submit_time, jobs.c.spec, jobs.c.depends_on)


@dataclass(frozen=True, slots=True)
class Body:
    """What never changes of a job once stored. ``seq`` and ``submit_time`` say which row
    it was read from (a store restored from a backup may give an id again)."""

    seq: int
    submit_time: float
    spec: JobSpec
    depends_on: tuple[tuple[str, str], ...]


class Bodies:
    """Decoded bodies by job id: those of the unfinished jobs a standby has read so far.
    ``cursor``: the ``seq`` it has read up to; ``decoded``: how many it decoded (a test
    counts the takeover's). Read and added to from two threads: a get sees a whole dict."""

    def __init__(self) -> None:
        self._by_id: dict[str, Body] = {}
        self.cursor = 0
        self.decoded = 0

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, job_id: str, seq: int, submit_time: float) -> Body | None:
        b = self._by_id.get(job_id)
        return b if b is not None and b.seq == seq and b.submit_time == submit_time else None

    def add_rows(self, rows: Iterable[sa.Row[Any]]) -> dict[str, Body]:
        """Decode rows of ``BODY``'s columns into the cache; those bodies, by id."""
        out = {}
        for r in rows:
            spec = spec_from_dict(r.spec)
            deps = tuple((str(k), str(d)) for k, d in r.depends_on)
            out[r.id] = Body(r.seq, r.submit_time, spec, deps)
        self._by_id.update(out)
        self.decoded += len(out)
        return out

    def keep(self, job_ids: set[str]) -> None:
        """Forget the bodies of jobs not in ``job_ids`` (the ones that finished)."""
        self._by_id = {k: b for k, b in self._by_id.items() if k in job_ids}
