"""The controller service: one loop turns requests and agent reports into core events, commits
what the core decided, then sends the commands. Like Dask's scheduler, every state change goes
through one place in one order; unlike a lock around each request, a turn handles a whole batch
(group commit), so a burst of submissions costs a few transactions, not one each.

Order inside a turn, which is what makes a crash at any instant safe:
1. new jobs are inserted (one transaction); only then are their submitters told "accepted";
2. the core handles the batch and schedules;
3. its transitions are committed (one transaction);
4. only then are launches and kills handed to the agents' outboxes, and callers answered.
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
import heapq
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.api import schemas as s
from gpufleet.core.clock import Clock
from gpufleet.core.commands import Command, Kill, Launch, NodeEvent, SetTimer, Transition
from gpufleet.core.controller import HEALTH_DRAIN, HEALTH_RESUME, Controller, ControllerError
from gpufleet.core.events import (
    Event,
    JobCancelled,
    JobSubmitted,
    NodeDrain,
    NodeHealth,
    NodeLost,
    NodeUp,
    TaskExited,
    TaskStarted,
    TimerFired,
)
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.job import JobState
from gpufleet.scheduler.framework import Profile
from gpufleet.server.config import check_fencing
from gpufleet.server.logs import LogStore
from gpufleet.server.outbox import Outbox
from gpufleet.server.store import (
    JobUpdate,
    NewJob,
    NodeRecord,
    StoreError,
    StoreUnavailable,
    SubmitAudit,
)
from gpufleet.server.store_down import StoreDown

log = logging.getLogger("gpufleet.controller")

# A scheduling pass that took at least this long (s) is not repeated for a mere change until
# SLOW_PASS_GAP times as long again has passed, so the loop spends at most a quarter of its
# time scheduling: with thousands of jobs pending a pass costs tens of ms to seconds, and one
# per turn would starve the turns that accept the submissions (BENCHMARKS.md, "Live cluster");
# Slurm defers its own scheduler under a burst of RPCs alike (sched_min_interval, max_rpc_cnt).
# The interval's tick always schedules; a cheaper pass (an idle or small cluster) is repeated
# at once, so an idle cluster's submit → start latency does not change.
SLOW_PASS_S = 0.010
SLOW_PASS_GAP = 3.0


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
    audit_row: tuple[str, str, str, str, dict[str, Any]] | None = None
    quiet: bool = False  # an agent's report: the core refusing it (stale) is not an error
    ids: list[str] | None = None  # submissions: the ids once the store holds the jobs
    ok: bool = False  # events: handled; answered once the turn has committed


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


class ControllerService:
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
    ) -> None:
        check_fencing(heartbeat_s, lease_s, fence_grace_s, node_grace_s)
        self.store = store
        self.fallback_account = fallback_account
        self.clock = clock
        self._profile = profile
        self._backoff = (retry_backoff_s, retry_backoff_max_s)
        self._launch_timeout_s = launch_timeout_s
        self._cluster_queues = list(cluster.queues) if cluster is not None else []
        self.ctrl = self._new_controller()
        # set while the store is down: what failed, and the back-off of the rebuild
        self.down = StoreDown()
        self.logs = logs
        self.outbox = Outbox()
        self.links: dict[str, NodeLink] = {}
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
        self._wake: asyncio.Event | None = None
        self._timers: list[tuple[float, int, TimerFired]] = []
        self._timer_seq = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # what a scheduling pass costs, and how long a node has been silent, are measured on
        # this clock (a test gives its own)
        self._monotonic = monotonic
        self._schedule_at = 0.0  # monotonic time from which a change is scheduled again
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

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._restore()
        self._task = asyncio.create_task(self._run(), name="gpufleet-controller-loop")

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
                link.registered = False
        self.ctrl = ctrl
        self._timers = []  # a restart's timers are gone too: the restored state implies them
        self._schedule_at = 0.0
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

    # ----- requests (each awaits its turn) -------------------------------------------------

    async def submit(self, jobs: list[NewJob], audit: SubmitAudit) -> list[str]:
        """Accept ``jobs`` durably (with ``audit``'s entry, in one transaction) and give
        their ids."""
        self.down.check()
        if audit.count != len(jobs):
            raise ValueError(f"the audit covers {audit.count} of {len(jobs)} jobs")
        for j in jobs:
            for _, dep in j.depends_on:
                if dep not in self.ctrl.jobs:
                    stored = self.store.job(dep)
                    if stored is None:
                        raise RequestError(422, f"depends_on: job {dep} does not exist")
                    # it ended before this process started (a restart loads only unfinished
                    # jobs): the core needs it to judge the dependency
                    self.ctrl.restore((), [stored.to_restored()])
        result: list[str] = await self._enqueue("submit", jobs, audit)
        return result

    async def event(
        self,
        ev: Event | _Reconcile | _RankGone,
        audit: tuple[str, str, str, str, dict[str, Any]] | None = None,
    ) -> Any:
        """Handled in the next turn; returns once what it caused (and ``audit``) committed."""
        return await self._enqueue("event", ev, audit_row=audit)

    async def report(self, evs: Sequence[Event | _RankGone]) -> None:
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
        audit_row: tuple[str, str, str, str, dict[str, Any]] | None = None,
    ) -> Any:
        self.down.check()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inbox.append(_Work(kind, payload, fut, audit, audit_row=audit_row))
        assert self._wake is not None
        self._wake.set()
        return await fut

    def post(self, ev: Event | _RankGone) -> None:
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
        next_tick = self.clock.now() + self.schedule_interval_s
        while not self._stopping:
            if self.down:
                await self._recover()
                next_tick = self.clock.now() + self.schedule_interval_s
                continue
            now = self.clock.now()
            deadline = min(next_tick, self._timers[0][0] if self._timers else next_tick)
            if self.ctrl.dirty:  # a change held back after a slow pass (SLOW_PASS_S)
                deadline = min(deadline, now + max(0.0, self._schedule_at - self._monotonic()))
            if not self._inbox and deadline > now:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=deadline - now)
            now = self.clock.now()
            tick = now >= next_tick
            if tick:
                next_tick = now + self.schedule_interval_s
                self._watch_nodes(now)
            try:
                self._turn(now, tick)
            except Exception as e:  # a bug must not stop the controller; the callers hear of it
                self._fall(e)
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
        self.down.fall(str(e))
        self.ctrl = self._new_controller()  # holds nothing the store has not committed
        self._timers = []

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

    def _turn(self, now: float, tick: bool) -> None:
        work, self._inbox = self._inbox[: self.batch_max], self._inbox[self.batch_max :]
        self._current = work
        if self._inbox and self._wake is not None:
            self._wake.set()
        cmds: list[Command] = []
        # 1. durable acceptance of new jobs, in one transaction
        submits = [w for w in work if w.kind == "submit"]
        if submits:
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
                submits = []
                ids_per = []
            k = 0
            for w in submits:
                w.ids = ids_per[k : k + len(w.payload)]
                k += len(w.payload)
            self.down.committed()
            for w in submits:
                ids = w.ids or []
                evs: list[Event] = []
                head = ids[0] if ids else None  # the id of this submission's array
                for job_id, nj in zip(ids, w.payload, strict=True):
                    if job_id in self.ctrl.jobs or self._finished_before_start(job_id, nj):
                        continue  # an idempotent retry: the job exists already
                    array = nj.array_id or (head if nj.array_index is not None else None)
                    evs.append(
                        JobSubmitted(
                            job_id,
                            nj.spec,
                            now,
                            nj.depends_on,
                            array_id=array,
                            array_limit=nj.array_limit or 0,
                        )
                    )
                if not evs and not ids:
                    continue
                try:
                    cmds += self.ctrl.handle(now, *evs, schedule=False)
                except ControllerError as e:
                    log.error("stored jobs refused by the core: %s", e)
                w.payload = ids
        # 2. everything else, one event at a time so a bad one fails alone
        for w in work:
            if w.kind != "event":
                continue
            try:
                cmds += self._handle_event(w.payload, now)
                w.ok = True
            except ControllerError as e:
                if w.quiet:
                    w.ok = True
                    log.info("an agent's report refused by the core: %s", e)
                else:
                    _fail(w, RequestError(404 if "unknown" in str(e) else 409, str(e)))
        cmds += self._due_timers(now)
        if tick:
            self.ctrl.dirty = True
        if tick or self._monotonic() >= self._schedule_at:
            t0 = self._monotonic()
            cmds += self.ctrl.handle(now)
            took = self._monotonic() - t0
            self._schedule_at = t0 + (1 + SLOW_PASS_GAP) * took if took >= SLOW_PASS_S else 0.0
        # 3. commit the transitions before anything is sent
        transitions = [c for c in cmds if isinstance(c, Transition)]
        node_events = [c for c in cmds if isinstance(c, NodeEvent)]
        audits = [w.audit_row for w in work if w.ok and w.audit_row is not None]
        if transitions or node_events or audits:
            changed = dict.fromkeys(t.job_id for t in transitions)
            updates = [JobUpdate.of_record(self.ctrl.jobs[j]) for j in changed]
            self.store.apply_transitions(transitions, updates, node_events, audits=audits, time=now)
            self.down.committed()
        for w in work:  # answered only now that what they caused is durable
            if w.future is not None and not w.future.done():
                if w.kind == "submit":
                    w.future.set_result(w.ids)
                elif w.ok:
                    w.future.set_result(None)
        # 4. send
        self._dispatch(cmds)
        # 5. what others only read: the audit of the controller's own node decisions, metrics
        if node_events:
            self._audit(node_events)
        if self.on_commit is not None and (transitions or node_events):
            try:
                self.on_commit(now, transitions, node_events)
            except Exception:
                log.exception("the metrics exporter failed on a turn's commit")
        if tick:
            self._save_usage()

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

    def _handle_event(self, ev: Event | _Reconcile | _RankGone, now: float) -> list[Command]:
        if isinstance(ev, _Reconcile):
            # a registration: the node up and its tasks reconciled in one step, so that no
            # scheduling pass places anything on it in between
            node = ev.spec.name
            cmds = self.ctrl.handle(now, NodeUp(ev.spec, True), schedule=False)
            # what the tasks did while nobody listened comes first: a rank that exited then is
            # an exit (success or failure), not a lost rank
            cmds += self.ctrl.handle(now, *ev.events, schedule=False)
            cmds += self.ctrl.reconcile(now, node, ev.running)
            # launches queued before this point that the agent does not run were just counted
            # as lost (requeued): they must never start
            self.outbox.drop_launches(node, keep=set(ev.running))
            link = self.links.get(node)
            if link is not None:
                link.registered = True
            return cmds
        if isinstance(ev, _RankGone):
            # an infrastructure stop (fencing): the node no longer runs that rank, as a
            # reconcile would find; requeued, not charged to the job's retries
            alive = tuple(
                (jid, self.ctrl.jobs[jid].job.attempt, r)
                for jid, rj in self.ctrl.running.items()
                for r, p in enumerate(rj.allocation)
                if p.node == ev.node and (jid, self.ctrl.jobs[jid].job.attempt, r) != ev.key
            )
            return self.ctrl.reconcile(now, ev.node, alive)
        return self.ctrl.handle(now, ev, schedule=False)

    def _due_timers(self, now: float) -> list[Command]:
        out: list[Command] = []
        while self._timers and self._timers[0][0] <= now:
            _, _, ev = heapq.heappop(self._timers)
            out += self.ctrl.handle(now, ev, schedule=False)
        return out

    def _dispatch(self, cmds: Sequence[Command]) -> None:
        for c in cmds:
            if isinstance(c, Launch):
                rec = self.ctrl.jobs[c.job_id]
                if rec.job.attempt != c.attempt:
                    continue  # superseded later in the same turn (e.g. a reconcile): never sent
                addr = self.links.get(c.allocation[0].node)
                epochs = {
                    p.node: link.epoch for p in c.allocation if (link := self.links.get(p.node))
                }
                for rank, (p, env) in enumerate(zip(c.allocation, c.env, strict=True)):
                    if rank in rec.exited:
                        continue  # counted as lost already
                    e = dict(env)
                    if addr is not None:
                        e["MASTER_ADDR"] = addr.address
                    self.outbox.put(
                        p.node,
                        s.AgentCommand(
                            kind="launch",
                            job=c.job_id,
                            attempt=c.attempt,
                            rank=rank,
                            command=list(rec.job.spec.command) or ["/bin/true"],
                            env={**dict(rec.job.spec.env), **e},
                            gpus=list(p.gpus),
                            gpu_milli=p.gpu_milli,
                            time_limit_s=rec.job.spec.time_limit_s,
                            grace_s=self.grace_kill_s,
                            run_as=rec.job.spec.user,
                            fallback_account=self.fallback_account,
                            epoch=epochs.get(p.node, 0),
                        ),
                    )
            elif isinstance(c, Kill):
                rec = self.ctrl.jobs[c.job_id]
                for rank in c.ranks:
                    node = rec.allocation[rank].node
                    self.outbox.put(
                        node,
                        s.AgentCommand(
                            kind="kill",
                            job=c.job_id,
                            attempt=c.attempt,
                            rank=rank,
                            why=c.why,
                            grace_s=self.grace_kill_s,
                        ),
                    )
            elif isinstance(c, SetTimer):
                self._timer_seq += 1
                heapq.heappush(
                    self._timers, (c.at, self._timer_seq, TimerFired(c.kind, c.job_id, c.attempt))
                )

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
            rec = self.ctrl.jobs.get(e.job)
            if rec is None or rec.job.attempt != e.attempt or e.rank >= len(rec.allocation):
                continue
            placed = rec.allocation[e.rank].node
            if placed != node:
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
        self.links[req.node] = link
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
        events: list[Event] = []
        for e in req.events:
            if e.kind == "started":
                events.append(TaskStarted(e.job, e.attempt, e.rank, req.node))
            elif not e.why.startswith(INFRASTRUCTURE_EXITS):  # those the reconcile requeues
                events.append(TaskExited(e.job, e.attempt, e.rank, e.exit_code, e.why))
        await self.event(
            _Reconcile(spec, tuple((t.job, t.attempt, t.rank) for t in req.running), tuple(events))
        )
        link.answered_at = self._monotonic()  # the registration's answer renews the lease
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
            # the store blinked: the process is alive and launches nothing meanwhile, so a
            # registered agent keeps its lease (its tasks run on); nothing is judged stale
            # from memory that is being rebuilt. After the rebuild it registers again.
            if link is None or not link.registered:
                self.down.check()
            link.last_seen = self.clock.now()
            link.answered_at = self._monotonic()
            return s.HeartbeatResult(lease_s=self.lease_s, stale=[])
        rt = self.ctrl.nodes.get(node)
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
        stale = []
        for t in hb.running:
            rec = self.ctrl.jobs.get(t.job)
            current = (
                rec is not None
                and rec.job.attempt == t.attempt
                and rec.job.state in (JobState.STARTING, JobState.RUNNING)
                and t.rank < len(rec.allocation)
                and rec.allocation[t.rank].node == node
            )
            if not current:
                stale.append(t)
        return s.HeartbeatResult(lease_s=self.lease_s, stale=stale)

    async def agent_events(self, node: str, events: list[s.AgentEvent]) -> None:
        """Believed even before a node registers again after our restart: an exit that
        happened while we were down is the truth, better known before the reconcile.
        Returns once committed: the agent drops what it sent only on our answer."""
        self.down.check()
        self.check_own(node, "events", events)
        link = self.links.get(node)
        if link is not None and link.registered:
            link.last_seen = self.clock.now()
        evs: list[Event | _RankGone] = []
        for e in events:
            if e.kind == "started":
                evs.append(TaskStarted(e.job, e.attempt, e.rank, node))
            elif e.why.startswith(INFRASTRUCTURE_EXITS):
                evs.append(_RankGone(node, (e.job, e.attempt, e.rank)))
            else:
                evs.append(TaskExited(e.job, e.attempt, e.rank, e.exit_code, e.why))
        await self.report(evs)

    def commands_allowed(self, node: str) -> None:
        link = self.links.get(node)
        if link is None or not link.registered:
            raise RequestError(
                409, f"node {node} is not registered with this controller: register first"
            )

    # ----- users ---------------------------------------------------------------------------

    async def cancel(
        self, job_id: str, why: str, audit: tuple[str, str, str, str, dict[str, Any]] | None = None
    ) -> None:
        await self.event(JobCancelled(job_id, why), audit)

    async def drain(
        self,
        node: str,
        drain: bool,
        why: str,
        *,
        force: bool = False,
        audit: tuple[str, str, str, str, dict[str, Any]] | None = None,
    ) -> None:
        await self.event(NodeDrain(node, drain, why, force), audit)


@dataclass(frozen=True)
class _Reconcile:
    """A node registered: its spec and the (job, attempt, rank) it still runs."""

    spec: NodeSpec
    running: tuple[tuple[str, int, int], ...]
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class _RankGone:
    node: str
    key: tuple[str, int, int]


# The agent stopped these tasks itself because it lost touch with us (its lease ran out), or
# refused them for that reason: the node's fault, not the job's.
INFRASTRUCTURE_EXITS = ("fenced:", "refused: the agent's lease has expired")


def _audits(submits: list[_Work]) -> list[SubmitAudit]:
    return [w.audit for w in submits if w.audit is not None]


def _fail(w: _Work, e: Exception) -> None:
    if w.future is not None and not w.future.done():
        w.future.set_exception(e)


__all__ = ["ControllerService", "NewJob", "RequestError"]
