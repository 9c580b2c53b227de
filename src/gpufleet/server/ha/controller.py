"""A controller in high availability: it stands by until the elector gives it the lead, then
does what a start does (the store read back, agents reconciled as after a restart), every
write fenced by its epoch; deposed, it stops acting at once and the process starts again as a
standby (``on_deposed``: the CLI re-executes itself)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpufleet.base.clock import MonotonicClock
from gpufleet.server.ha.elector import Elector
from gpufleet.server.ha.hearing import Hearing
from gpufleet.server.ha.lease import LeaseBook, LeaseTimes, outvoted
from gpufleet.server.ha.readahead import ReadAhead
from gpufleet.server.store import Store
from gpufleet.server.store import leader as rows

log = logging.getLogger("gpufleet.controller")
YIELD_ENV = "GPUFLEET_HA_YIELD_S"  # set for the process that replaces one that gave up


class HighAvailability:
    def __init__(
        self,
        store: Store,
        service: Any,  # ControllerService: its outbox's term, start and stop
        *,
        address: str,
        lease_s: float,
        lead: Callable[[], Awaitable[None]],
        on_deposed: Callable[[], None] | None = None,
        agent_silence_s: float = 30.0,
    ) -> None:
        self.store = store
        self.service = service
        self.address = address
        self._lead = lead  # what a start does: seeds, the service's start
        self.on_deposed = on_deposed
        # an agent counts as heard (by the leader) or as cut off from it (by a standby) for
        # this long after its last word (ADR 0048)
        self.agent_silence_s = agent_silence_s
        self.hearing = Hearing(agent_silence_s)
        self._acting_since = 0.0  # wall clock: when we last started to act as the leader
        times = LeaseTimes.of(lease_s)
        me = f"{socket.gethostname()}:{os.getpid()}:{address}"
        self.book = LeaseBook(me, times)
        # this process replaced one that gave the lead up: let another take it first
        yield_s = float(os.environ.pop(YIELD_ENV, "0") or 0)
        self.book.not_before = MonotonicClock().now() + yield_s
        self.started = False  # leading, and the service holds the store's state
        self.clock = MonotonicClock()
        store.fence_epoch = 0  # no write until we lead (no epoch is 0)
        # a leader frozen inside a write holds the lease row's share lock no longer than this
        rows.idle_timeout(store.engine, int(times.guard_s * 1000))
        self.elector = Elector(
            store.engine,
            self.book,
            self.clock,
            address=address,
            on_elected=self._elected,
            on_deposed=self._deposed,
            step_down=self._outvoted,
            cut_off=lambda leader: self.hearing.cut_off_from(leader, self.clock.now()),
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        # while standing by, the jobs' bodies read ahead: a takeover reads only the rest
        self.read_ahead = ReadAhead(store)

    def ready(self) -> bool:
        return self.started and self.elector.leading()

    def leader(self) -> str:
        return self.book.leader_address()

    def contact(self) -> tuple[float | None, bool]:
        """For a stale read (``stale.py``): seconds since the leader was last seen renewing
        (0 while we lead), and whether one is known now."""
        if self.ready():
            return 0.0, True
        return self.book.last_contact(self.clock.now())

    def health(self) -> dict[str, Any]:
        role: str = self.book.role
        if self.ready():
            role = "leader"
        elif role == "leader":  # it holds the row but could not renew in time: it acts not
            role = "lapsed"
        return {
            "role": role,
            "epoch": self.book.epoch if self.book.role == "leader" else None,
            "leader": self.address if self.ready() else self.leader(),
            "read_ahead": (
                len(self.read_ahead.bodies)
                if role == "standby" and self.read_ahead.caught_up
                else None
            ),
        }

    def metrics_text(self) -> bytes:
        """This controller's role in the Prometheus text format (a scrape of a standby is
        these alone; of the leader, after the cluster's series)."""
        leads = self.ready()
        return (
            "# HELP gpufleet_ha_leader 1 while this controller leads (--ha), else 0\n"
            "# TYPE gpufleet_ha_leader gauge\n"
            f"gpufleet_ha_leader {int(leads)}\n"
            "# HELP gpufleet_ha_epoch The leader epoch this controller leads under (0: none)\n"
            "# TYPE gpufleet_ha_epoch gauge\n"
            f"gpufleet_ha_epoch {self.book.epoch if leads else 0}\n"
        ).encode()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.read_ahead.start()
        self.elector.start()

    async def stop(self) -> None:
        self.read_ahead.stop()
        if self.started:
            await self.service.stop()
        await asyncio.to_thread(self.elector.stop)

    async def _elected(self, epoch: int) -> None:
        self.store.fence_epoch = epoch
        self.service.outbox.term = epoch
        # the read-back decodes only the bodies not read ahead (ADR 0059)
        bodies = self.service.bodies = self.read_ahead.stop()
        ahead, decoded = len(bodies), bodies.decoded
        wall, cpu = time.monotonic(), time.thread_time()  # the loop's thread: the read-back
        try:
            await self._lead()
        except Exception:
            log.exception("could not take over as the leader: standing down")
            self._deposed()
            return
        finally:
            self.service.bodies = None  # a rebuild after a failed turn reads it all
        # no claim counts until the agents have had the time to find us: armed here, as the
        # first renewal after the election may come once ``started`` is already set (a claim
        # a standby still holds against a former controller at our address deposed a leader
        # 0.26 s after its election)
        self._acting_since = self.service.clock.now()
        self.started = True
        log.warning(
            "leading with epoch %d: state read back from the store in %.2f s (%.2f s of CPU; "
            "%d jobs read ahead, %d decoded at the takeover)", epoch, time.monotonic() - wall,
            time.thread_time() - cpu, ahead, bodies.decoded - decoded,
        )  # fmt: skip

    def told(self, node: str, unreached: frozenset[str]) -> None:
        """An agent told this standby (its gate) it cannot reach these addresses."""
        self.hearing.told(node, unreached, self.clock.now())

    def _outvoted(self, resumed: bool, claims: dict[str, frozenset[str]]) -> str:
        """Why to give the lead up (ADR 0048): a standby's claim shows that most of the live
        agents reach it and not us (we are cut off from them, not from the store). We hear
        a node that spoke to us within the silence; for that long after we started to act
        (``resumed``: a lapse of our own, during which the gate turned them away, just
        ended) no claim counts, as the agents have not had the time to find us."""
        now = self.service.clock.now()
        if resumed or not self.started:
            self._acting_since = now
            return ""
        if not claims or now - self._acting_since <= self.agent_silence_s:
            return ""
        try:
            links = list(self.service.links.items())
        except RuntimeError:  # the loop changed the links meanwhile: next renewal
            return ""
        heard = {
            n
            for n, link in links
            if link.registered and now - link.last_seen <= self.agent_silence_s
        }
        won = outvoted(heard, list(claims.values()))
        if not won:
            return ""
        # stop acting now: nothing more is written under our epoch (the lease is let go next)
        self.started = False
        self.store.fence_epoch = 0
        # the process that replaces this one stands by two leases before it may lead again
        os.environ[YIELD_ENV] = str(2 * self.book.times.lease_s)
        standby = next(a for a, nodes in claims.items() if won <= nodes)
        return (
            f"{len(won)} agents ({', '.join(sorted(won)[:5])}) reach the standby at {standby} "
            f"and not this controller, which heard {len(heard)} within "
            f"{self.agent_silence_s:g} s"
        )

    def _deposed(self) -> None:
        """Another leads: stop acting (the gate answers 503 from now on; every write fails in
        the store), then hand over to ``on_deposed``."""
        self.started = False
        self.store.fence_epoch = 0
        if self.on_deposed is not None:
            self.on_deposed()
