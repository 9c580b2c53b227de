"""Store down, and the rebuild: memory only ever holds what the store committed.

A turn that fails (the database stopped, the disk full, a bug) sends nothing and answers its
callers 503 (500 for a bug); the in-memory controller, which already applied the turn's
events, is thrown away (``fall``) and rebuilt from the store (``recover``, then ``restore``),
in-process, with back-off while the store does not answer (``store_down.py`` says what still
works meanwhile). The start reads the store the same way (``restore``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gpufleet.base.gcpause import gc_paused
from gpufleet.core.controller import HEALTH_DRAIN, Controller
from gpufleet.core.events import ReservationSet
from gpufleet.core.heal import from_history
from gpufleet.model.job import JobState
from gpufleet.server.refusals import InternalError, RequestError, Unavailable
from gpufleet.server.service.base import ServiceBase
from gpufleet.server.service.links import NodeLink
from gpufleet.server.service.work import fail
from gpufleet.server.store import NodeRecord, StoreUnavailable

log = logging.getLogger("gpufleet.controller")
# the ended jobs a start reads for the run-time predictor (scheduler/runtime_history.py)
RAN_OUT = (JobState.SUCCEEDED, JobState.TIMED_OUT, JobState.FAILED)
RUNTIME_HISTORY_JOBS = 20_000


class Recovery(ServiceBase):
    def _restore(self, *, rebuild: bool = False) -> None:
        """The controller as the store holds it: at start, and after a failed turn (rebuild)
        the same way, so that every agent registers again and is reconciled as after a
        restart. Raises StoreUnavailable, leaving the service as it was.

        The cyclic garbage collector waits meanwhile (as for a metrics scrape): the read-back
        makes a few objects per unfinished job, which set off collections over the whole heap
        again and again (20,000 held jobs: 1.6 s of CPU, 1.15 s without them; a takeover under
        load, issue 26). Nothing here makes a cycle; reference counting frees the rest."""
        with gc_paused():
            self._read_back(rebuild)

    def _read_back(self, rebuild: bool) -> None:
        rs = self.store.load_jobs_for_restart(self.bodies)
        newest = self.store.list_jobs(limit=1, newest_first=True)
        usage, as_of = self.store.fairshare_usage()
        stored_queues = self.store.queues() if rebuild else []
        reservations = self.store.reservations()
        histories = self._heal_histories([n.name for n in rs.nodes if not n.lost])
        # what the run-time predictor learns from (the newest ended jobs, oldest first)
        ran = self.store.list_jobs(state=RAN_OUT, limit=RUNTIME_HISTORY_JOBS, newest_first=True)
        # every read done: from here on nothing can fail half-way. At start, the controller
        # made in __init__ (the app set its queues; tests wrap it); a rebuild starts afresh.
        # A rebuild, like a restart, holds only unfinished jobs: the ones that ended before it
        # are read from the store (listings, idempotent retries: _finished_before_start)
        self._history = bool(newest)
        self.restored_seq = newest[0].seq if newest else 0
        ctrl = self._new_controller() if rebuild else self.ctrl
        for q in (*rs.queues, *stored_queues):
            ctrl.queues.setdefault(q.name, q)
        known = [n for n in rs.nodes if not n.lost]
        ctrl.restore(
            [n.spec for n in known],
            [j.to_restored() for j in (*rs.dependencies, *rs.jobs)],
            seq=self.restored_seq,  # new jobs list after every stored one (GET /jobs)
            services=rs.services,
            defrag_moves=rs.defrag_moves,  # its moves in progress (ADR 0045)
        )
        if as_of is not None:  # who used the cluster before the restart still counts
            ctrl.ledger.restore(usage, as_of, self.clock.now())
        for j in reversed(ran):  # how long the cluster's jobs ran, before the restart too
            if j.start_time is not None and j.end_time is not None:
                ctrl.state.history.record(j.spec, j.end_time - j.start_time)
        for j in (*reversed(ran), *rs.jobs):  # what arrived lately: the plan's forecast
            ctrl.state.arrivals.arrived(j.spec, j.submit_time)
        self._hold_known(ctrl, known, rebuild)
        for n in known:  # the heal loop where it was: the node out of service until proven
            phase, failures, last = from_history(histories.get(n.name, ()), HEALTH_DRAIN)
            if phase:
                ctrl.hold_restored_node(n.name, n.why, drained=True, health_drained=True)
                ctrl.restore_heal(n.name, phase, failures, last)
        for r in reservations:  # known at once (a submit naming one is checked against them)
            ctrl.state.reservations[r.name] = r
        self._install(ctrl)
        # and given again in the first step, which sets the timers of their windows
        self.driver.post(*(ReservationSet(r) for r in reservations))
        if self.gateway is not None:
            # every service's endpoint serves again at once, routed to the replicas the
            # store says are ready (the core sends its Routes again at its first reconcile);
            # a new leader reads the endpoints its predecessor handed out first
            self.gateway.book.reload()
            self.gateway.open(ctrl.services.services, ctrl.services.ready)
        if rebuild:
            # what was queued was committed, but every agent registers again now and the
            # reconcile requeues what it does not run (the same as after a restart)
            self.outbox.clear()

    def _heal_histories(self, names: list[str]) -> dict[str, list[tuple[float, str, str]]]:
        """Each node's recent history, for the heal loop (none without a heal policy)."""
        if self._heal is None:
            return {}
        return {
            name: [(e.time, e.what, e.why) for e in self.store.node_events(name, limit=500)]
            for name in names
        }

    def _hold_known(self, ctrl: Controller, known: list[NodeRecord], rebuild: bool) -> None:
        """Returning agents have one grace period to re-register (their leases run from now);
        until then nothing new is placed on their nodes (their registration's reconcile would
        undo it)."""
        now = self.clock.now()
        why = "the controller rebuilt its state" if rebuild else "the controller restarted"
        for n in known:
            old = self.links.get(n.name)
            if old is not None and rebuild:  # what the agent told us at its registration
                old.rejoining = old.registered or old.rejoining
                old.last_seen, old.registered, old.reported = now, False, False
            else:
                self.links[n.name] = NodeLink(
                    address=n.address or n.name, last_seen=now, registered=False
                )
            self._renew(n.name)
            ctrl.hold_restored_node(
                n.name,
                n.why if n.drained else f"{why}: waiting for its agent",
                drained=n.drained,
                health_drained=n.why.startswith(HEALTH_DRAIN),
            )
        for name, link in self.links.items():
            if name not in ctrl.nodes:  # registered, but its node row never committed
                link.registered = link.rejoining = False

    def _fall(self, e: Exception) -> None:
        """A turn failed part-way: memory may hold what the store does not. Nothing of the turn
        was sent; its callers (and those still waiting) hear of it; the controller is thrown
        away and ``_recover`` rebuilds it from the store."""
        outage = isinstance(e, StoreUnavailable)
        if outage:
            log.error("the store failed in a turn (%s): rebuilding from the store", e)
        else:
            log.exception("controller turn failed: rebuilding from the store")
        err: RequestError = (
            Unavailable(f"{e}; nothing of this request was done: retry")
            if outage
            else InternalError(f"internal error in the controller: {e}")
        )
        for w in (*self._current, *self._inbox):
            if w.ids is not None and w.future is not None and not w.future.done():
                w.future.set_result(w.ids)  # its jobs are stored: accepted, they will run
            else:
                fail(w, err)
        self._inbox, self._current = [], []
        self._release_unheld()  # they wait for the store then (the rebuild holds them)
        self.down.fall(str(e))
        self._install(self._new_controller())  # holds nothing the store has not committed

    async def _recover(self) -> None:
        """Once the store answers again, rebuild (with back-off while it does not)."""
        assert self._wake is not None
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=self.down.wait_s())
        if self._stopping:
            return
        try:
            # only once it takes writes: a rebuild makes every agent register again, which
            # writes, and an agent that cannot register cannot renew its lease
            self.store.probe()
            self._restore(rebuild=True)
        except Exception as e:
            self.down.retry_failed(str(e))
            log.warning("the store is still unavailable (%s); retrying", e)
            return
        took = self.down.recovered()
        log.warning("rebuilt the controller from the store, %.1f s after the failure", took)
