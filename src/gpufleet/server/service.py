"""The controller service: one loop turns requests and agent reports into core events and steps
the core's driver (``core.driver.Driver``, the one the simulator steps too) on the wall Clock,
with the store as its Journal and the agents' outboxes as its Executor (``journal.py``,
``agent_executor.py``). Like Dask's scheduler, every state change goes through one place in one
order; unlike a lock around each request, a turn handles a whole batch (group commit), so a
burst of submissions costs a few transactions, not one each.

Order inside a turn, which is what makes a crash at any instant safe:
1. new jobs are inserted (one transaction); only then are their submitters told "accepted"
   (their answers go out before step 2, which would cost them a second fsync: the ids are
   in the store, and ``until_held`` makes a later request that names one wait for step 2);
2. the driver steps: the core handles the batch (and the timers due), schedules when the pass
   rule says so, its transitions are committed (one transaction), and only then are launches
   and kills handed to the agents' outboxes;
3. callers are answered.
A launch whose transition was never committed was never sent, and an attempt id is used once.

Memory only ever holds what the store committed. A turn that fails (the database stopped, the
disk full, a bug) sends nothing and answers its callers 503 (500 for a bug); the in-memory
controller, which already applied the turn's events, is thrown away and rebuilt from the store
on the restart path, in-process, with back-off while the store does not answer (store_down.py
says what still works meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.api import schemas as s
from gpufleet.base.clock import Clock
from gpufleet.core.commands import NodeEvent, Transition
from gpufleet.core.controller import HEALTH_DRAIN, HEALTH_RESUME, Controller
from gpufleet.core.driver import Driver, PassRule, Step
from gpufleet.core.events import (
    Event,
    JobCancelled,
    JobSubmitted,
    NodeDrain,
    NodeHealth,
    NodeLost,
    NodeRegistered,
    QueueChanged,
    ReplicaProbe,
    TaskExited,
    TaskFenced,
    TaskStarted,
)
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.scheduler.framework import Profile
from gpufleet.server.agent_executor import AgentExecutor
from gpufleet.server.config import check_fencing
from gpufleet.server.gateway_executor import ServiceGateway, WithGateway
from gpufleet.server.journal import AuditRow, StoreJournal
from gpufleet.server.logs import LogStore
from gpufleet.server.outbox import Outbox
from gpufleet.server.reads import ClusterReads
from gpufleet.server.service_ops import ServiceRequests
from gpufleet.server.store import (
    NewJob,
    NodeRecord,
    StoreError,
    StoreUnavailable,
    SubmitAudit,
)
from gpufleet.server.store_down import StoreDown

log = logging.getLogger("gpufleet.controller")

# After a scheduling pass, a mere change waits this long (Clock seconds) for the next one: a
# burst of submissions is scheduled a few times a second, not once per turn, so that passes
# over thousands of pending jobs do not starve the turns that accept them (BENCHMARKS.md,
# "Live cluster"). The rule is the driver's (``PassRule``), on the Clock, so the simulator
# (``SimConfig.min_pass_gap_s``) schedules at the same moments. The interval's tick always
# schedules; an idle cluster's first change is scheduled at once.
MIN_PASS_GAP_S = 0.1

# How many times a turn yields to the loop between answering its submissions and its step:
# enough for the answered handlers to write their responses (each yield runs what is ready).
_ANSWER_YIELDS = 4


class RequestError(Exception):
    """Refused for a reason the caller can fix: HTTP 4xx with this text."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@dataclass
class _Work:
    kind: str  # "submit" | "event"
    payload: Any
    future: asyncio.Future[Any] | None = None
    audit: SubmitAudit | None = None  # submissions: who, audited with the jobs
    # events: the request's audit entry (actor, role, action, target, detail), committed
    # with the transitions it caused
    audit_row: AuditRow | None = None
    quiet: bool = False  # an agent's report: the core refusing it (stale) is not an error
    ids: list[str] | None = None  # submissions: the ids once the store holds the jobs
    events: list[JobSubmitted] = field(default_factory=list)  # submissions: new to the core


@dataclass
class NodeLink:
    address: str
    last_seen: float
    health: s.Health = field(default_factory=s.Health)
    metrics: dict[str, Any] = field(default_factory=dict)
    driver_version: str = ""
    cuda_version: str = ""
    gpu_info: list[s.GpuInfo] = field(default_factory=list)  # as registered (GET /nodes)
    reported: bool = False  # a heartbeat's health reached the core since (re-)registration
    # registered with this controller process and reconciled: until then (after our restart)
    # its heartbeats and long-polls are refused with 409, so that it registers again, listing
    # the tasks it still runs, and no launch reaches it that the reconcile would not know of
    registered: bool = True
    # when (monotonic) we last answered its heartbeat or registration: its lease counts from
    # before then, so node loss is timed from here, on a clock that NTP does not step
    answered_at: float = field(default_factory=time.monotonic)
    epoch: int = 0  # its registration's number (rising, across our restarts too)
    # registered with this process before a rebuild from the store, and not yet again: its
    # heartbeats keep its lease (this process never declared its node lost, and places
    # nothing there until the reconcile) and ask it to register again. Without this, a store
    # that took the rebuild's reads and probe but not the registration's writes (a full disk
    # whose WAL had room for the probe) let the lease lapse, and the watchdog killed tasks
    # that the rebuilt memory rightly held as running: their jobs ran a second attempt.
    rejoining: bool = False


class ControllerService(ClusterReads, ServiceRequests):
    """The read methods the routers call are ``ClusterReads``'s (reads.py); the service
    requests are ``ServiceRequests``' (service_ops.py)."""

    def __init__(
        self,
        store: Any,
        profile: Profile,
        clock: Clock,
        *,
        cluster: ClusterSpec | None = None,
        logs: LogStore,
        heartbeat_s: float = 5.0,
        lease_s: float = 7.5,
        fence_grace_s: float = 2.0,
        node_grace_s: float = 10.0,
        launch_timeout_s: float = 120.0,
        schedule_interval_s: float = 5.0,
        grace_kill_s: float = 10.0,
        batch_max: int = 500,
        retry_backoff_s: float = 10.0,
        retry_backoff_max_s: float = 600.0,
        monotonic: Callable[[], float] = time.monotonic,
        fallback_account: str = "",
        step_secret: bytes = b"",
        min_pass_gap_s: float = MIN_PASS_GAP_S,
        gateway: ServiceGateway | None = None,
    ) -> None:
        check_fencing(heartbeat_s, lease_s, fence_grace_s, node_grace_s)
        self.store = store
        self.fallback_account = fallback_account
        self.step_secret = step_secret or secrets.token_bytes(32)  # srun's step keys
        self.clock = clock
        self._profile = profile
        self._backoff = (retry_backoff_s, retry_backoff_max_s)
        self._launch_timeout_s = launch_timeout_s
        self._cluster_queues = list(cluster.queues) if cluster is not None else []
        self._rule = PassRule(min_gap_s=min_pass_gap_s, tick_s=schedule_interval_s)
        # set while the store is down: what failed, and the back-off of the rebuild
        self.down = StoreDown()
        self.logs = logs
        self.outbox = Outbox()
        self.links: dict[str, NodeLink] = {}
        # the services' endpoints (gateway_executor.py); None: services get no data path
        self.gateway = gateway
        if gateway is not None:
            gateway.links = self.links
        self._sampler: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the gateway's thread comes back
        self._last_epoch = 0
        self.heartbeat_s = heartbeat_s
        self.lease_s = lease_s
        self.fence_grace_s = fence_grace_s
        self.node_grace_s = node_grace_s
        self.schedule_interval_s = schedule_interval_s
        self.grace_kill_s = grace_kill_s
        self.batch_max = batch_max
        self._inbox: list[_Work] = []
        self._current: list[_Work] = []
        # ids stored and answered in this turn that the core does not hold yet (between a
        # turn's acceptance and its step), and the event set once it does
        self._unheld: set[str] = set()
        self._held = asyncio.Event()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # how long a node has been silent is measured on this clock (a test gives its own)
        self._monotonic = monotonic
        self.ctrl = self._new_controller()
        self.driver = self._new_driver(self.ctrl)
        self._history = False  # the store held jobs when we started (see _finished_before_start)
        # the newest job stored before this process started: the jobs up to it that had
        # finished are in the store only (a restart loads the unfinished ones)
        self.restored_seq = 0
        self.turns = 0
        self.on_turn: Callable[[], None] | None = None  # tests: observe a finished turn
        # the metrics exporter: what each turn committed (after it was sent)
        self.on_commit: Callable[[float, list[Transition], list[NodeEvent]], None] | None = None
        # the dashboard: each heartbeat's metrics (node, time, body), for its history charts
        self.on_heartbeat: Callable[[str, float, dict[str, Any]], None] | None = None

    # ----- life ----------------------------------------------------------------------------

    def _new_controller(self) -> Controller:
        ctrl = Controller(
            self._profile,
            None,
            backoff_base_s=self._backoff[0],
            backoff_max_s=self._backoff[1],
            launch_timeout_s=self._launch_timeout_s,
        )
        ctrl.queues = {q.name: q for q in self._cluster_queues}
        return ctrl

    def _new_driver(self, ctrl: Controller) -> Driver:
        """The core's driver: the store its journal, the agents' outboxes its executor."""
        executor = AgentExecutor(
            ctrl,
            self.outbox,
            self.links,
            grace_kill_s=self.grace_kill_s,
            fallback_account=self.fallback_account,
            step_secret=self.step_secret,
        )
        journal = StoreJournal(self.store, ctrl, self._audits_of, self.down.committed)
        if self.gateway is None:
            return Driver(ctrl, executor, journal, self._rule, start=self.clock.now())
        routed = WithGateway(executor, self.gateway, _call_later, self._on_loop)
        return Driver(ctrl, routed, journal, self._rule, start=self.clock.now())

    def _install(self, ctrl: Controller) -> None:
        """``ctrl`` from now on, with a driver of its own: a restart's (or a failed turn's)
        timers are gone with the old one; the restored state implies them."""
        self.ctrl = ctrl
        self.driver = self._new_driver(ctrl)

    def _audits_of(self, step: Step) -> list[AuditRow]:
        """The audit entries of this turn's requests that the core did not refuse."""
        refused = {id(ev) for ev, _ in step.refused}
        return [
            w.audit_row
            for w in self._current
            if w.audit_row is not None and w.kind == "event" and id(w.payload) not in refused
        ]

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._restore()
        self._task = asyncio.create_task(self._run(), name="gpufleet-controller-loop")
        if self.gateway is not None:
            self._sampler = asyncio.create_task(self._sample(), name="gpufleet-gateway-load")

    def _restore(self, *, rebuild: bool = False) -> None:
        """The controller as the store holds it: at start, and after a failed turn (rebuild)
        the same way, so that every agent registers again and is reconciled as after a
        restart. Raises StoreUnavailable, leaving the service as it was."""
        rs = self.store.load_jobs_for_restart()
        newest = self.store.list_jobs(limit=1, newest_first=True)
        usage, as_of = self.store.fairshare_usage()
        stored_queues = self.store.queues() if rebuild else []
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
        )
        now = self.clock.now()
        if as_of is not None:  # who used the cluster before the restart still counts
            ctrl.ledger.restore(usage, as_of, now)
        why = "the controller rebuilt its state" if rebuild else "the controller restarted"
        for n in known:
            # returning agents have one grace period to re-register; until then nothing new
            # is placed on their nodes (the reconcile of their registration would undo it)
            old = self.links.get(n.name)
            if old is not None and rebuild:  # what the agent told us at its registration
                old.rejoining = old.registered or old.rejoining
                old.last_seen, old.registered, old.reported = now, False, False
                old.answered_at = self._monotonic()
            else:
                self.links[n.name] = NodeLink(
                    address=n.address or n.name,
                    last_seen=now,
                    registered=False,
                    answered_at=self._monotonic(),
                )
            ctrl.hold_restored_node(
                n.name,
                n.why if n.drained else f"{why}: waiting for its agent",
                drained=n.drained,
                health_drained=n.why.startswith(HEALTH_DRAIN),
            )
        for name, link in self.links.items():
            if name not in ctrl.nodes:  # registered, but its node row never committed
                link.registered = link.rejoining = False
        self._install(ctrl)
        if self.gateway is not None:
            # every service's endpoint serves again at once (503 until its first Routes: the
            # core sends them at its first reconcile)
            self.gateway.open(ctrl.services.services)
        if rebuild:
            # what was queued was committed, but every agent registers again now and the
            # reconcile requeues what it does not run (the same as after a restart)
            self.outbox.clear()

    async def stop(self) -> None:
        self._stopping = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            await self._task
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
        if self.gateway is not None:
            # waits for an apply under way and the proxy's stop: off the loop
            await asyncio.to_thread(self.gateway.stop)

    def _on_loop(self, fn: Callable[[], None]) -> None:
        """``fn`` on the controller's loop, from the gateway's thread (an apply is done)."""
        loop = self._loop
        if loop is None:
            log.error("the gateway finished an apply before the controller started")
            return
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop is closed: the server has stopped
            log.warning("the gateway finished an apply after the controller stopped")

    async def _sample(self) -> None:
        """The gateway's request rates into the core (the autoscaler's input), every
        ``stats_s`` (the counters are read on the gateway's thread, between its applies)."""
        assert self.gateway is not None
        gw = self.gateway
        while not self._stopping:
            await asyncio.sleep(gw.stats_s)
            try:
                loads = await gw.sample(self.clock.now())
            except Exception:
                log.exception("reading the gateway's request counters failed")
                continue
            known = self.ctrl.services.services
            for ev in loads:
                if ev.name in known:
                    self.post(ev)

    # ----- requests (each awaits its turn) -------------------------------------------------

    async def submit(self, jobs: list[NewJob], audit: SubmitAudit) -> list[str]:
        """Accept ``jobs`` durably (with ``audit``'s entry, in one transaction) and give
        their ids."""
        self.down.check()
        if audit.count != len(jobs):
            raise ValueError(f"the audit covers {audit.count} of {len(jobs)} jobs")
        for j in jobs:
            for _, dep in j.depends_on:
                await self.until_held(dep)
                if dep not in self.ctrl.jobs:
                    stored = self.store.job(dep)
                    if stored is None:
                        raise RequestError(422, f"depends_on: job {dep} does not exist")
                    # it ended before this process started (a restart loads only unfinished
                    # jobs): the core needs it to judge the dependency
                    self.ctrl.restore((), [stored.to_restored()])
        result: list[str] = await self._enqueue("submit", jobs, audit)
        return result

    async def until_held(self, job_id: str | None = None) -> None:
        """Returns once the core holds ``job_id`` (None: every job) if it was just accepted: a
        submission is answered after its acceptance commit, before the turn's step gives it
        to the core, so a request naming it (a dependency, a cancel, a show) or listing jobs
        that arrives in between waits for that step instead of missing it in memory."""
        while (job_id in self._unheld) if job_id is not None else self._unheld:
            await self._held.wait()

    async def event(
        self,
        ev: Event,
        audit: AuditRow | None = None,
    ) -> Any:
        """Handled in the next turn; returns once what it caused (and ``audit``) committed."""
        return await self._enqueue("event", ev, audit_row=audit)

    async def report(self, evs: Sequence[Event]) -> None:
        """An agent's reports: returns once the turn that handled them committed, so that the
        agent drops them only then (a turn whose commit failed must not lose an exit). One the
        core refuses (stale, unknown) is logged, not an error: resending cannot fix it."""
        self.down.check()
        loop = asyncio.get_running_loop()
        futs = []
        for ev in evs:
            fut: asyncio.Future[Any] = loop.create_future()
            self._inbox.append(_Work("event", ev, fut, quiet=True))
            futs.append(fut)
        assert self._wake is not None
        self._wake.set()
        await asyncio.gather(*futs)

    async def _enqueue(
        self,
        kind: str,
        payload: Any,
        audit: SubmitAudit | None = None,
        *,
        audit_row: AuditRow | None = None,
    ) -> Any:
        self.down.check()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inbox.append(_Work(kind, payload, fut, audit, audit_row=audit_row))
        assert self._wake is not None
        self._wake.set()
        return await fut

    def post(self, ev: Event) -> None:
        """Fire and forget (a node's health, the watchdog's losses): handled in the next turn.
        Dropped while the store is down: the rebuild makes every agent register again, and its
        first heartbeat then reports its health anew."""
        if self.down:
            return
        self._inbox.append(_Work("event", ev))
        if self._wake is not None:
            self._wake.set()

    # ----- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        next_watch = self.clock.now() + self.schedule_interval_s
        while not self._stopping:
            if self.down:
                await self._recover()
                next_watch = self.clock.now() + self.schedule_interval_s
                continue
            now = self.clock.now()
            due = self.driver.due()  # a timer, a pass the rule held back, the tick
            deadline = next_watch if due is None else min(next_watch, due)
            if not self._inbox and deadline > now:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=deadline - now)
            now = self.clock.now()
            if now >= next_watch:
                next_watch = now + self.schedule_interval_s
                self._watch_nodes(now)
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
            if w.future is not None and not w.future.done():
                w.future.set_exception(RequestError(503, "the controller is shutting down"))
        self._save_usage()

    def _fall(self, e: Exception) -> None:
        """A turn failed part-way: memory may hold what the store does not. Nothing of the turn
        was sent; its callers (and those still waiting) hear of it; the controller is thrown
        away and ``_recover`` rebuilds it from the store."""
        outage = isinstance(e, StoreUnavailable)
        if outage:
            log.error("the store failed in a turn (%s): rebuilding from the store", e)
        else:
            log.exception("controller turn failed: rebuilding from the store")
        err = (
            RequestError(503, f"{e}; nothing of this request was done: retry")
            if outage
            else RequestError(500, f"internal error in the controller: {e}")
        )
        for w in (*self._current, *self._inbox):
            if w.ids is not None and w.future is not None and not w.future.done():
                w.future.set_result(w.ids)  # its jobs are stored: accepted, they will run
            else:
                _fail(w, err)
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

    def _take(self, now: float) -> tuple[list[_Work], list[Event]]:
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
        return work, events

    async def _let_answers_out(self) -> None:
        """Yield to the loop so the answered submitters' responses are written before the
        step's commit. Anything else that runs meanwhile only enqueues (handled next turn) or
        reads; ``until_held`` holds back what names a job not held yet."""
        for _ in range(_ANSWER_YIELDS):
            await asyncio.sleep(0)

    def _release_unheld(self) -> None:
        if self._unheld:
            self._unheld.clear()
            self._held.set()
            self._held = asyncio.Event()

    def _step(self, now: float, work: list[_Work], events: list[Event]) -> None:
        # 2. the driver: the core handles them (each alone: a bad one fails alone), the timers
        # due, a pass if the rule says so; commits; only then hands on launches and kills
        step = self.driver.step(now, events)
        refused = {id(ev): e for ev, e in step.refused}
        for w in work:  # answered only now that what they caused is durable
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
                _fail(w, RequestError(404 if "unknown" in str(e) else 409, str(e)))
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

    def _accept(self, submits: list[_Work], now: float) -> list[Event]:
        """Store the submissions (one transaction); their JobSubmitted events, one per job the
        core does not hold yet (a retry with the same idempotency key gets the same ids)."""
        if not submits:
            return []
        try:
            batch = [
                replace(j, array_group=k) if j.array_index is not None else j
                for k, w in enumerate(submits)
                for j in w.payload
            ]  # each submission's array is its own
            ids_per = self.store.add_jobs(batch, now, audits=_audits(submits))
        except StoreError:  # nothing of the batch was stored: find the one(s) to blame
            ids_per = self._add_one_by_one(submits, now)
        except StoreUnavailable:
            raise  # perhaps stored, perhaps not (a lost COMMIT): the store will say
        except Exception as e:
            log.exception("storing a batch of submissions failed")
            for w in submits:
                _fail(w, RequestError(503, f"could not store the jobs: {e}"))
            return []
        k = 0
        for w in submits:
            w.ids = ids_per[k : k + len(w.payload)]
            k += len(w.payload)
        self.down.committed()
        events: list[Event] = []
        for w in submits:
            ids = w.ids or []
            head = ids[0] if ids else None  # the id of this submission's array
            for job_id, nj in zip(ids, w.payload, strict=True):
                if job_id in self.ctrl.jobs or self._finished_before_start(job_id, nj):
                    continue  # an idempotent retry: the job exists already
                array = nj.array_id or (head if nj.array_index is not None else None)
                w.events.append(
                    JobSubmitted(
                        job_id,
                        nj.spec,
                        now,
                        nj.depends_on,
                        array_id=array,
                        array_limit=nj.array_limit or 0,
                        array_index=nj.array_index,
                    )
                )
            events += w.events
        return events

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
            own = e.what in ("unhealthy", "healthy", "lost", "suspect", "trusted")
            own = own and not e.why.startswith("forced")
            if own or e.why.startswith((HEALTH_DRAIN, HEALTH_RESUME)):
                try:
                    self.store.audit(
                        "controller",
                        "system",
                        f"node.{e.what}",
                        e.node,
                        {"why": e.why},
                        time=e.time,
                    )
                except Exception:
                    log.exception("could not write the audit entry for node %s", e.node)

    def _finished_before_start(self, job_id: str, nj: NewJob) -> bool:
        """An idempotency key of a job that ended before this process started: the core does
        not hold it (a restart loads only unfinished jobs), and must not run it again. Only
        keyed jobs after a restart on a store with jobs pay this read."""
        if nj.idempotency_key is None or not self._history:
            return False
        stored = self.store.job(job_id)
        return stored is not None and stored.finished

    def _add_one_by_one(self, submits: list[_Work], now: float) -> list[str]:
        """A batch the store refused (a reused idempotency key, a constraint): store each
        submission alone so only the bad one fails (its caller gets 409); the others keep
        their place in the batch."""
        ids: list[str] = []
        kept = []
        for w in submits:
            try:
                w.ids = self.store.add_jobs(list(w.payload), now, audits=_audits([w]))
                ids += w.ids
                kept.append(w)
            except StoreError as e:
                _fail(w, RequestError(409, str(e)))
        submits[:] = kept
        return ids

    def _watch_nodes(self, now: float) -> None:
        # node_grace_s >= lease + fence grace + kill margin (check_fencing): past it, the
        # node's watchdog has killed what ran there, even if its agent is hung
        mono = self._monotonic()
        for name, link in self.links.items():
            node = self.ctrl.nodes.get(name)
            if node is None or node.lost:
                continue
            silent = mono - link.answered_at
            if silent > self.node_grace_s:
                self.post(
                    NodeLost(
                        name,
                        f"no heartbeat for {silent:.0f} s (grace {self.node_grace_s:g} s)",
                    )
                )
                self.outbox.drop(name)

    # ----- agents --------------------------------------------------------------------------

    def check_own(self, node: str, field: str, events: Sequence[s.AgentEvent | s.TaskRef]) -> None:
        """403 unless every event (or task said to run) is about a rank placed on ``node``: an
        agent speaks only for its own node. One about an attempt that is not the job's current
        one (or a job the controller does not hold) changes nothing in the core, so it passes:
        a node may well report the end of an attempt that was requeued meanwhile. Ranks and
        attempts are never negative here: the wire schema bounds them (``SmallCount``)."""
        for i, e in enumerate(events):
            placed = self.ctrl.placed_elsewhere(e.job, e.attempt, e.rank, node)
            if placed is not None:
                raise RequestError(
                    403,
                    f"{field}[{i}]: rank {e.rank} of job {e.job} (attempt {e.attempt}) runs on "
                    f"node {placed}, not {node}: an agent reports only for its own node",
                )

    async def register(self, req: s.AgentRegister, spec: NodeSpec) -> s.RegisterResult:
        self.down.check()  # before its link is replaced: it needs the store in any case
        self.check_own(req.node, "events", req.events)
        self.check_own(req.node, "running", req.running)
        now = self.clock.now()
        link = NodeLink(
            req.address,
            now,
            driver_version=req.driver_version,
            cuda_version=req.cuda_version,
            gpu_info=list(req.gpus),
            registered=False,
            answered_at=self._monotonic(),
            # wall-clock nanoseconds, so that it rises across a restart of ours as well
            epoch=max(time.time_ns(), self._last_epoch + 1),
        )
        self._last_epoch = link.epoch
        old = self.links.get(req.node)
        self.links[req.node] = link
        try:
            self.store.upsert_node(
                NodeRecord(
                    spec,
                    req.address,
                    dict(req.labels),
                    last_heartbeat=now,
                    driver_version=req.driver_version,
                    cuda_version=req.cuda_version,
                    gpu_info=tuple(g.model_dump() for g in req.gpus),
                )
            )
            # one event: the node up, what its tasks did while nobody listened, then the
            # reconcile of what it still runs, with no scheduling pass in between
            await self.event(
                NodeRegistered(
                    spec,
                    tuple((r.job, r.attempt, r.rank) for r in req.running),
                    tuple(
                        ev
                        for e in req.events
                        if not isinstance(ev := task_event(req.node, e), ReplicaProbe)
                    ),
                )
            )
        except BaseException:
            # a registration that did not commit changed nothing: the link before it (and
            # the lease its heartbeats keep, ``rejoining``) stands
            if old is not None and self.links.get(req.node) is link:
                self.links[req.node] = old
            raise
        link.registered = True  # reconciled: its heartbeats and long-polls are taken now
        link.answered_at = self._monotonic()  # the registration's answer renews the lease
        for e in req.events:  # probe verdicts, after the reconcile: of the tasks it still runs
            if e.kind == "probe":
                self.post(task_event(req.node, e))
        return s.RegisterResult(
            lease_s=self.lease_s,
            heartbeat_s=self.heartbeat_s,
            fence_grace_s=self.fence_grace_s,
            epoch=link.epoch,
        )

    def heartbeat(self, node: str, hb: s.Heartbeat) -> s.HeartbeatResult:
        self.check_own(node, "running", hb.running)
        link = self.links.get(node)
        if self.down:
            # the store blinked: the process is alive and launches nothing meanwhile, so an
            # agent it answered keeps its lease (its tasks run on); nothing is judged stale
            # from memory that is being rebuilt. After the rebuild it registers again.
            if link is None or not (link.registered or link.rejoining):
                self.down.check()
            assert link is not None  # down.check() raised otherwise
            return self._keep_lease(link, register=False)
        rt = self.ctrl.nodes.get(node)
        if link is not None and link.rejoining and not link.registered:
            if rt is not None and not rt.lost:
                # rebuilt from the store, and its registration (the reconcile) has not
                # committed yet: the lease goes on, and the agent is asked to register again
                return self._keep_lease(link, register=True)
            link.rejoining = False  # its node was declared lost meanwhile: refused below
        if link is None or not link.registered or rt is None or rt.lost:
            raise RequestError(
                409,
                f"node {node} is not registered with this controller (it restarted, or "
                "declared the node lost): register again",
            )
        link.last_seen = self.clock.now()
        link.answered_at = self._monotonic()
        link.metrics = hb.metrics
        if self.on_heartbeat is not None:
            self.on_heartbeat(node, link.last_seen, hb.metrics)
        if hb.health != link.health or not link.reported:
            # the first report after a (re-)registration always reaches the core: a node the
            # controller drained for a failed check returns once its agent passes them again
            link.health = hb.health
            link.reported = True
            self.post(NodeHealth(node, hb.health.healthy, hb.health.why, tuple(hb.health.bad_gpus)))
        current = self.ctrl.current_rank
        stale = [t for t in hb.running if current(t.job, t.attempt, t.rank, node) is None]
        return s.HeartbeatResult(lease_s=self.lease_s, stale=stale)

    def _keep_lease(self, link: NodeLink, *, register: bool) -> s.HeartbeatResult:
        link.last_seen = self.clock.now()
        link.answered_at = self._monotonic()
        return s.HeartbeatResult(lease_s=self.lease_s, stale=[], register_again=register)

    async def agent_events(self, node: str, events: list[s.AgentEvent]) -> None:
        """Believed even before a node registers again after our restart: an exit that
        happened while we were down is the truth, better known before the reconcile.
        Returns once committed: the agent drops what it sent only on our answer."""
        self.down.check()
        self.check_own(node, "events", events)
        link = self.links.get(node)
        if link is not None and link.registered:
            link.last_seen = self.clock.now()
        evs: list[Event] = [task_event(node, e) for e in events]
        await self.report(evs)

    def commands_allowed(self, node: str) -> None:
        link = self.links.get(node)
        if link is None or not link.registered:
            raise RequestError(
                409, f"node {node} is not registered with this controller: register first"
            )

    # ----- users ---------------------------------------------------------------------------

    async def update_queue(self, q: QueueSpec, audit: AuditRow) -> None:
        """An admin's change to a queue: stored first, with its audit entry (one transaction),
        then a core event: the next pass uses it."""
        self.down.check()
        self.store.put_queue(q, now=self.clock.now(), audit=audit)
        await self.event(QueueChanged(q))

    async def cancel(self, job_id: str, why: str, audit: AuditRow | None = None) -> None:
        await self.event(JobCancelled(job_id, why), audit)

    async def drain(
        self,
        node: str,
        drain: bool,
        why: str,
        *,
        force: bool = False,
        audit: AuditRow | None = None,
    ) -> None:
        await self.event(NodeDrain(node, drain, why, force), audit)


def task_event(node: str, e: s.AgentEvent) -> TaskStarted | TaskExited | TaskFenced | ReplicaProbe:
    """An agent's report as the core's event (the node: who reported it; ``check_own`` made
    sure the rank is the node's own, so a probe report speaks only of its own replicas)."""
    if e.kind == "probe":
        return ReplicaProbe(e.job, e.attempt, e.probe, e.ok, e.why)
    if e.kind == "started":
        return TaskStarted(e.job, e.attempt, e.rank, node)
    if e.cause == "fenced":  # stopped for the node's sake: requeued, not charged
        return TaskFenced(node, e.job, e.attempt, e.rank, e.why)
    return TaskExited(e.job, e.attempt, e.rank, e.exit_code, e.why)


def _call_later(delay_s: float, fn: Callable[[], None]) -> object:
    """``fn`` on the controller's loop ``delay_s`` from now (a drained replica's Kill)."""
    return asyncio.get_running_loop().call_later(delay_s, fn)


def _audits(submits: list[_Work]) -> list[SubmitAudit]:
    return [w.audit for w in submits if w.audit is not None]


def _fail(w: _Work, e: Exception) -> None:
    if w.future is not None and not w.future.done():
        w.future.set_exception(e)


__all__ = ["ControllerService", "NewJob", "RequestError"]
