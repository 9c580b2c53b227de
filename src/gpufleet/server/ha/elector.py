"""The elector: a thread per controller in high availability that reads the lease row while
standing by, takes it when it lapses, and renews it while leading (``lease.py`` decides,
``store/leader.py`` reads and writes). A thread, not a task on the controller's loop: a long
scheduling pass must not cost the lead, and a leader whose renewals hang stops leading on
time all the same, since the lease is judged on the monotonic clock where it is used."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import sqlalchemy as sa

from gpufleet.base.clock import Clock
from gpufleet.server.ha.lease import LeaseBook
from gpufleet.server.store import leader as rows
from gpufleet.server.store.records import LeaderRow

log = logging.getLogger("gpufleet.controller")


class Elector:
    def __init__(
        self,
        engine: sa.Engine,
        book: LeaseBook,
        clock: Clock,
        *,
        address: str,
        on_elected: Callable[[int], Coroutine[Any, Any, None]],
        on_deposed: Callable[[], None],
        step_down: Callable[[bool, dict[str, frozenset[str]]], str] = lambda r, c: "",
        cut_off: Callable[[str], frozenset[str]] = lambda leader: frozenset(),
    ) -> None:
        self.engine = engine
        self.book = book
        self.clock = clock
        self.address = address
        self.on_elected = on_elected  # run on the loop ``start`` was called on
        self.on_deposed = on_deposed  # called on the elector's thread
        # why the leader should give the lead up ("": it should not); told whether this
        # renewal resumed a lease that had lapsed (nothing reached us meanwhile) and the
        # fresh claims of standbys against it (by their address: the nodes each hears)
        self.step_down = step_down
        # while standing by: the nodes that told us lately they cannot reach that address
        self.cut_off = cut_off
        self._claimed: tuple[int, int, frozenset[str]] = (0, 0, frozenset())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def leading(self) -> bool:
        return self.book.leading(self.clock.now())

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="gpufleet-elector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop, and leave the lease if we hold it (a standby takes over at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        if self.book.role == "leader":
            self._let_go()
            self.book.deposed()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.book.role == "leader":
                    self._renew()
                    wait = self.book.times.renew_s
                elif self.book.role == "standby":
                    self._stand_by()
                    wait = self.book.times.poll_s
                else:
                    return
            except Exception as e:  # the database is away: the lease lapses on its own time
                log.warning("the leader lease could not be read or written: %s", e)
                wait = self.book.times.poll_s
            self._stop.wait(wait)

    def _stand_by(self) -> None:
        row = rows.read(self.engine)
        self.book.observed(row, self.clock.now())
        self._claim(row)
        if not self.book.may_take(self.clock.now()):
            return
        started = self.clock.now()
        epoch = rows.take(self.engine, self.book.me, self.address, self.book.seen)
        if epoch is None:
            return  # another standby was first: we see it at the next read
        self.book.took(epoch, started)
        log.warning("leading with epoch %d (the leader lease had lapsed or was free)", epoch)
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self.on_elected(epoch), self._loop)

    def _claim(self, row: LeaderRow | None) -> None:
        """Write what we heard as our claim against the leader (ADR 0048): once per lease
        version while agents tell us they cannot reach it, withdrawn when none does."""
        nodes = self.cut_off(row.address) if row is not None and row.holder else frozenset()
        now = (row.epoch, row.version, nodes) if row is not None and nodes else (0, 0, nodes)
        if now == self._claimed:
            return
        rows.claim(self.engine, self.book.me, self.address, row, nodes)
        if nodes and not self._claimed[2]:
            log.warning(
                "%d agents (%s) tell this standby they cannot reach the leader at %s",
                len(nodes), ", ".join(sorted(nodes)[:5]), row.address if row else "",
            )  # fmt: skip
        self._claimed = now

    def _renew(self) -> None:
        started = self.clock.now()
        lapsed = not self.book.leading(started)
        version = rows.renew(self.engine, self.book.epoch)
        if version is not None:
            self.book.renewed(started)
            # claims made on the last two renewals or since: no host's clock is compared
            claims = rows.claims(self.engine, self.book.epoch, version - 2)
            why = self.step_down(lapsed, claims)
            if why:  # it stops renewing and lets go: the standby that proved it leads
                log.error("giving the lead up (epoch %d): %s", self.book.epoch, why)
                self.book.deposed()
                self._let_go()
                self.on_deposed()
            return
        log.error(
            "deposed: another controller took the leader lease from epoch %d", self.book.epoch
        )
        self.book.deposed()
        self.on_deposed()

    def _let_go(self) -> None:
        try:
            rows.let_go(self.engine, self.book.epoch)
        except Exception as e:
            log.warning("could not leave the leader lease (it lapses instead): %s", e)
