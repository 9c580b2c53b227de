"""A standby reads ahead (ADR 0059, ADR 0063): while it waits, a thread of its own reads the
rows of the unfinished jobs from the store and decodes them (the body, which never changes
once stored; the mutable columns kept raw too, with the job they make), following new ones as
they are stored; a takeover then reads only each job's key and mutable columns, takes the job
built ahead where they did not change, and decodes only the rows it has not read yet.

It only reads: nothing it does is fenced, and nothing the new leader acts on comes from it
but what never changes and what the takeover's own snapshot shows unchanged
(``store/bodies.py``). Now and then it forgets the jobs that finished, so that a standby that
never leads holds no more than the unfinished jobs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from gpufleet.server.store import Store
from gpufleet.server.store import jobs as rows
from gpufleet.server.store.bodies import Bodies

log = logging.getLogger("gpufleet.controller")


class ReadAhead:
    def __init__(
        self,
        store: Store,
        *,
        every_s: float = 1.0,
        prune_s: float = 30.0,
        batch: int = 1000,
        share: float = 0.5,
    ) -> None:
        self.store = store
        self.bodies = Bodies()
        self.every_s = every_s  # a pass this often once caught up
        self.prune_s = prune_s  # the finished jobs forgotten this often
        self.batch = batch  # jobs (of seq) per read (the next one soon while behind)
        # of a core at most (this thread's CPU) while behind: a standby started beside a
        # busy leader on a shared host must not starve it
        self.share = share
        self.caught_up = False  # a pass found no more: a takeover now reads only the tail
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpufleet-read-ahead", daemon=True)
        self._thread.start()

    def stop(self) -> Bodies:
        """Stop reading (a batch under way ends on its own: whatever it adds is right, when
        it comes); the bodies read so far."""
        self._stop.set()
        return self.bodies

    def _run(self) -> None:
        pruned = time.monotonic()
        while not self._stop.is_set():
            behind, cpu = False, time.thread_time()
            try:
                behind = self.pass_once()
                if time.monotonic() - pruned >= self.prune_s:
                    self.prune()
                    pruned = time.monotonic()
                self._failing = False
            except Exception as e:  # the store away: a takeover reads what it must itself
                if not self._failing:
                    log.warning("a standby could not read ahead from the store: %s", e)
                self._failing = True
            spent = time.thread_time() - cpu
            self._stop.wait(spent / self.share - spent if behind else self.every_s)

    def pass_once(self) -> bool:
        """One read of bodies ahead, decoded after its transaction; whether more are left."""
        with self._snapshot() as c:
            got, upto, newest = rows.bodies_after(c, self.bodies.cursor, self.batch)
        self.bodies.add_rows(got)
        self.bodies.cursor = max(self.bodies.cursor, upto)
        behind = upto < newest
        self.caught_up = self.caught_up or not behind
        return behind

    def prune(self) -> None:
        """Forget the bodies of the jobs that finished."""
        with self._snapshot() as c:
            live = rows.unfinished_ids(c)
        self.bodies.keep(live)

    @contextmanager
    def _snapshot(self) -> Iterator[sa.Connection]:
        with self.store.engine.connect() as c:
            pg = c.dialect.name == "postgresql"
            if pg:
                c.execution_options(isolation_level="REPEATABLE READ")
            with c.begin():
                if pg:  # as Store._read: a slow read here must not end the session
                    c.exec_driver_sql("SET LOCAL idle_in_transaction_session_timeout = 0")
                yield c
