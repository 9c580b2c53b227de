"""A job row as a standby read it ahead (ADR 0059, ADR 0063): its immutable part (spec,
dependencies, array and idempotency columns) decoded once, and its mutable columns as they
were then, raw (``STAMP``: JSON as its text), with the ``StoredJob`` they make. A takeover
reads only each unfinished job's ``KEY`` and ``STAMP``: where the stamp is the one read ahead
(a job held on a dependency is never updated), it takes the job built ahead as it is.

Decoding a row is most of what a read-back costs (the JSON of ``spec``, ``allocation`` and
``ended``, ``spec_from_dict``, the ``StoredJob``); with 20,000+ held jobs a new leader on a busy
host spent seconds on it before it answered (issue 26). Nothing written after the insert ever
changes the immutable columns but the spec (``jobs.py``: an update sets only ``MUTABLE``, or
the spec alone, which ``scontrol update`` rewrites, ADR 0076; no job row is deleted), and a
takeover reads each spec's text with the stamp and reads again a row whose spec's digest is
not the one read ahead, so a body it takes is the body now, and a stamp compared equal is the row
now: nothing the new leader acts on comes from anything but the takeover's one snapshot. A
row the standby has not read yet is read whole at the takeover, in that snapshot."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

import sqlalchemy as sa

from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.job_end import JobEnd
from gpufleet.server.store.codec import allocation_from_list, in_row_queue, spec_from_dict
from gpufleet.server.store.records import StoredJob
from gpufleet.server.store.schema import jobs

# what an update may set (jobs.py's _UPDATE and _UPDATE_STATE; a test keeps them so)
MUTABLE = (
    "state",
    "attempt",
    "retries_used",
    "start_time",
    "end_time",
    "ended",
    "hold",
    "eligible_time",
    "attained_gpu_s",
    "allocation",
    "borrowing",
    "queue",
)
KEY = (jobs.c.id, jobs.c.seq, jobs.c.submit_time)
# the mutable columns as compared: a JSON column as its stored text (not decoded)
STAMP = tuple(
    sa.cast(jobs.c[n], sa.Text).label(n) if isinstance(jobs.c[n].type, sa.JSON) else jobs.c[n]
    for n in MUTABLE
)
_FIXED = (jobs.c.array_id, jobs.c.array_index, jobs.c.idempotency_key, jobs.c.array_limit)
# a whole row as read ahead (or at the takeover, for one not read ahead)
_TEXT = (
    sa.cast(jobs.c.spec, sa.Text).label("spec"),
    sa.cast(jobs.c.depends_on, sa.Text).label("depends_on"),
)
BODY = (*KEY, *_FIXED, *_TEXT, *STAMP)


@dataclass(frozen=True, slots=True)
class Body:
    """A row read ahead: ``stamp``, its mutable columns then, raw; ``job``, the row then.
    ``seq`` and ``submit_time`` say which row it was read from (a store restored from a
    backup may give an id again)."""

    seq: int
    submit_time: float
    spec: JobSpec  # as stored (``job``'s may name the queue the row's says)
    stamp: tuple[Any, ...]
    job: StoredJob
    # the stored spec's digest: ``scontrol update`` (ADR 0076) rewrites a job's spec, and a
    # takeover reads the row again where the spec it finds is not the one read ahead
    spec_digest: bytes = b""

    def now(self, stamp: tuple[Any, ...]) -> StoredJob:
        """The job as its row's mutable columns are now (``stamp``): the one built ahead
        when they did not change, else its body with them decoded."""
        if stamp == self.stamp:
            return self.job
        j = self.job
        fixed = (j.id, j.seq, j.submit_time, j.depends_on, j.array_id, j.array_index)
        return _build(fixed, j.idempotency_key, j.array_limit, self.spec, stamp)


_STATES = {s.value: s for s in JobState}
SPEC_TEXT = sa.cast(jobs.c.spec, sa.Text).label("spec")  # what a takeover digests


def spec_digest(text: str) -> bytes:
    """A spec's stored text, digested (what a takeover compares with the body read ahead)."""
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _build(
    fixed: tuple[Any, ...],
    key: str | None,
    limit: int | None,
    spec: JobSpec,
    stamp: tuple[Any, ...],
) -> StoredJob:
    """A job from its immutable columns (``fixed``: id, seq, submit time, dependencies, array
    id and index; ``key``: its idempotency key; ``limit``: its array's), its ``spec`` as
    stored and the mutable columns of ``stamp`` (in ``MUTABLE``'s order), decoded."""
    job_id, seq, submitted, deps, array_id, array_index = fixed
    (
        state,
        attempt,
        retries,
        start,
        end,
        ended,
        held,
        eligible,
        attained,
        alloc,
        borrowing,
        queue,
    ) = stamp
    spec = in_row_queue(spec, queue)
    how = None if ended is None or ended == "null" else JobEnd.from_dict(_json(ended))
    return StoredJob(
        job_id, seq, spec, _STATES[state], attempt, retries, submitted, start, end, eligible,
        attained, () if alloc == "[]" else allocation_from_list(_json(alloc)), borrowing, deps,
        array_id, array_index, key, limit, how, held,
    )  # fmt: skip


# a spec as stored (spec_to_dict, then json.dumps): its name first
_NAMED = re.compile(r'\{"name": ("(?:[^"\\]|\\.)*"), ')
_FIELDS = tuple(f.name for f in fields(JobSpec))
_NAME = _FIELDS.index("name")
_make: Callable[..., JobSpec] = JobSpec  # by its fields in order (the dataclass's __init__)


class Specs:
    """Specs decoded by their stored text less the name: the jobs of a sweep, an array, a
    load generator differ in their name alone, if at all, and a standby that reads 20,000 of
    them decodes the JSON and ``spec_from_dict`` once (~80 µs), then makes each by the
    dataclass's ``__init__`` (~10 µs). The same text (but the name) decodes to the same spec
    (but the name): a text with another top-level ``"name"`` is decoded whole."""

    def __init__(self, most: int = 4096) -> None:
        self._by_rest: dict[str, tuple[Any, ...]] = {}
        self.most = most  # distinct specs kept (past it, decoded whole)

    def decode(self, text: str) -> JobSpec:
        m = _NAMED.match(text)
        rest = text[m.end() :] if m is not None else ""
        if m is None or '"name"' in rest:
            return spec_from_dict(json.loads(text))
        values = self._by_rest.get(rest)
        if values is None:
            spec = spec_from_dict(json.loads(text))
            if len(self._by_rest) < self.most:
                self._by_rest[rest] = tuple(getattr(spec, f) for f in _FIELDS)
            return spec
        quoted = m.group(1)
        name = quoted[1:-1] if "\\" not in quoted else json.loads(quoted)
        return _make(*values[:_NAME], name, *values[_NAME + 1 :])


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class Bodies:
    """Rows read ahead by job id: those of the unfinished jobs a standby has read so far.
    ``cursor``: the ``seq`` it has read up to; ``decoded``: how many rows it decoded (a test
    counts the takeover's). Read and added to from two threads: a get sees a whole dict."""

    def __init__(self) -> None:
        self._by_id: dict[str, Body] = {}
        self.specs = Specs()
        self._deps: dict[str, tuple[tuple[str, str], ...]] = {}  # by their stored text
        self.cursor = 0
        self.decoded = 0

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, job_id: str, seq: int, submit_time: float) -> Body | None:
        b = self._by_id.get(job_id)
        return b if b is not None and b.seq == seq and b.submit_time == submit_time else None

    def add_rows(self, rows: Iterable[sa.Row[Any]]) -> dict[str, Body]:
        """Decode rows of ``BODY``'s columns into the cache; those rows, by id."""
        out = {}
        n = len(KEY) + len(_FIXED) + 2
        for r in rows:
            spec = self.specs.decode(r.spec)
            stamp = tuple(r[n:])
            fixed = (
                r.id,
                r.seq,
                r.submit_time,
                self._depends(r.depends_on),
                r.array_id,
                r.array_index,
            )
            job = _build(fixed, r.idempotency_key, r.array_limit, spec, stamp)
            out[r.id] = Body(r.seq, r.submit_time, spec, stamp, job, spec_digest(r.spec))
        self._by_id.update(out)
        self.decoded += len(out)
        return out

    def _depends(self, text: str) -> tuple[tuple[str, str], ...]:
        """Dependencies by their stored text (the jobs of a sweep wait on the same ones)."""
        deps = self._deps.get(text)
        if deps is None:
            deps = tuple((str(k), str(d)) for k, d in json.loads(text))
            if len(self._deps) < self.specs.most:
                self._deps[text] = deps
        return deps

    def keep(self, job_ids: set[str]) -> None:
        """Forget the bodies of jobs not in ``job_ids`` (the ones that finished)."""
        self._by_id = {k: b for k, b in self._by_id.items() if k in job_ids}
