"""The controller service: one loop turns requests and agent reports into core events, commits
what the core decided, then sends the commands. Like Dask's scheduler, every state change goes
through one place in one order; unlike a lock around each request, a turn handles a whole batch
(group commit), so a burst of submissions costs a few transactions, not one each.

Order inside a turn, which is what makes a crash at any instant safe:
1. new jobs are inserted (one transaction); only then are their submitters told "accepted";
2. the core handles the batch and schedules;
3. its transitions are committed (one transaction);
4. only then are launches and kills handed to the agents' outboxes.
A launch whose transition was never committed was never sent, and an attempt id is used once.
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
    SubmitAudit,
)

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
        self.ctrl = Controller(
            profile,
            None,
            backoff_base_s=retry_backoff_s,
            backoff_max_s=retry_backoff_max_s,
            launch_timeout_s=launch_timeout_s,
        )
        if cluster is not None:
            self.ctrl.queues = {q.name: q for q in cluster.queues}
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

    async def start(self) -> None:
        self._wake = asyncio.Event()
        rs = self.store.load_jobs_for_restart()
        newest = self.store.list_jobs(limit=1, newest_first=True)
        self._history = bool(newest)
        self.restored_seq = newest[0].seq if newest else 0
        for q in rs.queues:
            self.ctrl.queues.setdefault(q.name, q)
        known = [n for n in rs.nodes if not n.lost]
        self.ctrl.restore(
            [n.spec for n in known],
            [j.to_restored() for j in (*rs.dependencies, *rs.jobs)],
            seq=self.restored_seq,  # new jobs list after every stored one (GET /jobs)
        )
        now = self.clock.now()
        usage, as_of = self.store.fairshare_usage()
        if as_of is not None:  # who used the cluster before the restart still counts
            self.ctrl.ledger.restore(usage, as_of, now)
        for n in known:
            # returning agents have one grace period to re-register; until then nothing new
            # is placed on their nodes (the reconcile of their registration would undo it)
            self.links[n.name] = NodeLink(
                address=n.address or n.name,
                last_seen=now,
                registered=False,
                answered_at=self._monotonic(),
            )
            self.ctrl.hold_restored_node(
                n.name,
                n.why if n.drained else "the controller restarted: waiting for its agent",
                drained=n.drained,
                health_drained=n.why.startswith(HEALTH_DRAIN),
            )
        self._task = asyncio.create_task(self._run(), name="gpufleet-controller-loop")

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

    async def event(self, ev: Event | _Reconcile | _RankGone) -> Any:
        return await self._enqueue("event", ev)

    async def _enqueue(self, kind: str, payload: Any, audit: SubmitAudit | None = None) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inbox.append(_Work(kind, payload, fut, audit))
        assert self._wake is not None
        self._wake.set()
        return await fut

    def post(self, ev: Event | _RankGone) -> None:
        """Fire and forget (agent reports): handled in the next turn."""
        self._inbox.append(_Work("event", ev))
        if self._wake is not None:
            self._wake.set()

    # ----- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        next_tick = self.clock.now() + self.schedule_interval_s
        while not self._stopping:
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
                log.exception("controller turn failed")
                for w in self._current:
                    _fail(w, RequestError(500, f"internal error in the controller: {e}"))
            self.turns += 1
            if self.on_turn is not None:
                self.on_turn()
        for w in self._inbox:
            if w.future is not None and not w.future.done():
                w.future.set_exception(RequestError(503, "the controller is shutting down"))
        self._save_usage()

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
            except Exception as e:
                log.exception("storing a batch of submissions failed")
                for w in submits:
                    _fail(w, RequestError(503, f"could not store the jobs: {e}"))
                submits = []
                ids_per = []
            k = 0
            for w in submits:
                ids = ids_per[k : k + len(w.payload)]
                k += len(w.payload)
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
                if w.future is not None and not w.future.done():
                    w.future.set_result(None)
            except ControllerError as e:
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
        if transitions or node_events:
            changed = dict.fromkeys(t.job_id for t in transitions)
            updates = [JobUpdate.of_record(self.ctrl.jobs[j]) for j in changed]
            self.store.apply_transitions(transitions, updates, node_events)
        for w in submits:
            if w.future is not None and not w.future.done():
                w.future.set_result(w.payload)
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
                ids += self.store.add_jobs(list(w.payload), now, audits=_audits([w]))
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
        a node may well report the end of an attempt that was requeued meanwhile."""
        for i, e in enumerate(events):
            if e.rank < 0 or e.attempt < 0:  # a negative index would pick a rank from the end
                raise RequestError(422, f"{field}[{i}]: rank and attempt must be >= 0")
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

    def agent_events(self, node: str, events: list[s.AgentEvent]) -> None:
        """Believed even before a node registers again after our restart: an exit that
        happened while we were down is the truth, better known before the reconcile."""
        self.check_own(node, "events", events)
        link = self.links.get(node)
        if link is not None and link.registered:
            link.last_seen = self.clock.now()
        for e in events:
            if e.kind == "started":
                self.post(TaskStarted(e.job, e.attempt, e.rank, node))
            elif e.why.startswith(INFRASTRUCTURE_EXITS):
                self.post(_RankGone(node, (e.job, e.attempt, e.rank)))
            else:
                self.post(TaskExited(e.job, e.attempt, e.rank, e.exit_code, e.why))

    def commands_allowed(self, node: str) -> None:
        link = self.links.get(node)
        if link is None or not link.registered:
            raise RequestError(
                409, f"node {node} is not registered with this controller: register first"
            )

    # ----- users ---------------------------------------------------------------------------

    async def cancel(self, job_id: str, why: str) -> None:
        await self.event(JobCancelled(job_id, why))

    async def drain(self, node: str, drain: bool, why: str, *, force: bool = False) -> None:
        await self.event(NodeDrain(node, drain, why, force))


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
