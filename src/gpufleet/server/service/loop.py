"""The turn loop: one loop turns requests and agent reports into core events and steps the
core's driver (``core.driver.Driver``, the one the simulator steps too). Like Dask's
scheduler, every state change goes through one place in one order; unlike a lock around each
request, a turn handles a whole batch (group commit), so a burst of submissions costs a few
transactions, not one each.

Order inside a turn, which is what makes a crash at any instant safe:
1. new jobs are inserted (one transaction, ``intake.py``); only then are their submitters told
   "accepted" (their answers go out before step 2, which would cost them a second fsync: the
   ids are in the store, and ``until_held`` makes a later request that names one wait for
   step 2);
2. the driver steps: the core handles the batch (the timers due; at the tick, the nodes whose
   lease ran out), schedules when the pass rule says so, its transitions are committed (one
   transaction), and only then are launches and kills handed to the agents' outboxes;
3. callers are answered.
A launch whose transition was never committed was never sent, and an attempt id is used once.
A turn that fails hands over to ``recovery.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gpufleet.core.commands import NodeEvent
from gpufleet.core.controller import HEALTH_DRAIN, HEALTH_RESUME
from gpufleet.core.driver import Step
from gpufleet.core.events import Event
from gpufleet.core.heal import HEAL_STEPS
from gpufleet.core.healing import HEAL_RESUME
from gpufleet.server.refusals import Unavailable, of_core
from gpufleet.server.service.idlewatch import IdleWatch
from gpufleet.server.service.intake import Intake
from gpufleet.server.service.recovery import Recovery
from gpufleet.server.service.work import Work, fail

log = logging.getLogger("gpufleet.controller")

# How many times a turn yields to the loop between answering its submissions and its step:
# enough for the answered handlers to write their responses (each yield runs what is ready).
_ANSWER_YIELDS = 4


class TurnLoop(Intake, Recovery, IdleWatch):
    async def _run(self) -> None:
        assert self._wake is not None
        while not self._stopping:
            if self.down:
                await self._recover()
                continue
            now = self.clock.now()
            # a timer, a pass the rule held back, the tick (which also judges the leases)
            deadline = self.driver.due()
            if not self._inbox and (deadline is None or deadline > now):
                self._wake.clear()
                timeout = None if deadline is None else deadline - now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            now = self.clock.now()
            try:
                work, events = self._take(now)
                if self._unheld:
                    await self._let_answers_out()
                self._step(now, work, events)
            except Exception as e:  # a bug must not stop the controller; the callers hear of it
                self._fall(e)
            finally:
                self._release_unheld()
            self.turns += 1
            if self.on_turn is not None:
                self.on_turn()
        for w in self._inbox:
            fail(w, Unavailable("the controller is shutting down"))
        self._save_usage()
        self._save_gpu_use()

    def _take(self, now: float) -> tuple[list[Work], list[Event]]:
        """A turn's first half: the batch, its new jobs stored (one transaction) and their
        submitters answered; the events for the core."""
        work, self._inbox = self._inbox[: self.batch_max], self._inbox[self.batch_max :]
        self._current = work
        if self._inbox and self._wake is not None:
            self._wake.set()
        # 1. durable acceptance of new jobs, in one transaction; answered now: stored is what
        # "accepted" means, and memory holds them only once the step below committed
        submits = [w for w in work if w.kind == "submit"]
        events = self._accept(submits, now)
        for w in submits:
            if w.ids is not None and w.future is not None and not w.future.done():
                self._unheld.update(ev.job_id for ev in w.events)
                w.future.set_result(w.ids)
        events += [w.payload for w in work if w.kind == "event"]
        events += self._idle_events(now)  # the idle-GPU policy's samples, once an interval
        return work, events

    async def _let_answers_out(self) -> None:
        """Yield to the loop so the answered submitters' responses are written before the
        step's commit. Anything else that runs meanwhile only enqueues (handled next turn) or
        reads; ``until_held`` holds back what names a job not held yet."""
        for _ in range(_ANSWER_YIELDS):
            await asyncio.sleep(0)

    def _step(self, now: float, work: list[Work], events: list[Event]) -> None:
        # 2. the driver: the core handles them (each alone: a bad one fails alone), the timers
        # due, the leases run out, a pass if the rule says so; commits; only then hands on
        # launches and kills
        step = self.driver.step(now, events, lease_now=self.lease_now())
        for node in step.lost:  # what a lost node never fetched is stale (new attempt ids)
            self.outbox.drop(node)
        self._answer(work, step)
        self._idle_notices(step.commands)
        # 3. what others only read: the audit of the controller's own node decisions, metrics
        transitions, node_events = step.transitions, step.node_events
        if node_events:
            self._audit(node_events)
        if self.on_commit is not None and (transitions or node_events):
            try:
                self.on_commit(now, transitions, node_events)
            except Exception:
                log.exception("the metrics exporter failed on a turn's commit")
        if step.ticked:
            self._save_usage()
            self._save_gpu_use()

    def _answer(self, work: list[Work], step: Step) -> None:
        """The turn's callers, answered only now that what they caused is durable."""
        refused = {id(ev): e for ev, e in step.refused}
        for w in work:
            if w.kind == "submit":
                for job_id, e in ((ev.job_id, refused.get(id(ev))) for ev in w.events):
                    if e is not None:
                        log.error("stored job %s refused by the core: %s", job_id, e)
                continue
            e = refused.get(id(w.payload))
            if e is None or w.quiet:
                if e is not None:  # resending cannot fix it
                    log.info("an agent's report refused by the core: %s", e)
                if w.future is not None and not w.future.done():
                    w.future.set_result(None)
            else:
                fail(w, of_core(e))

    def _save_usage(self) -> None:
        """The fair-share ledger, on each interval: a restart loses at most one interval."""
        ledger = self.ctrl.ledger
        if ledger.last is None:
            return
        try:
            self.store.save_fairshare_usage(ledger.values, ledger.last)
        except Exception:
            log.exception("could not save the fair-share usage")

    def _audit(self, node_events: list[NodeEvent]) -> None:
        """The controller's own node decisions (health, loss) in the audit log; an admin's
        drains and resumes are audited by the request that made them."""
        for e in node_events:
            own = e.what in ("unhealthy", "healthy", "lost", "suspect", "trusted", *HEAL_STEPS)
            own = own and not e.why.startswith("forced")
            if own or e.why.startswith((HEALTH_DRAIN, HEALTH_RESUME, HEAL_RESUME)):
                try:
                    what = f"node.{e.what.replace(' ', '_')}"
                    self.store.audit(
                        "controller", "system", what, e.node, {"why": e.why}, time=e.time
                    )
                except Exception:
                    log.exception("could not write the audit entry for node %s", e.node)
