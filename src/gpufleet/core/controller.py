"""The controller state machine: ``handle(now, *events) -> commands``.

Pure like Dask's worker state machine: no I/O, no wall clock, no threads. The live server and
the simulator differ only in who calls it (with which clock) and who carries the commands out.
The JobMaster part of it launches gangs all or nothing, waits until every rank has started,
stops the rest when one fails, and decides retries with exponential back-off.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.core.arrays import ArrayThrottle
from gpufleet.core.commands import (
    Command,
    DropLaunches,
    Kill,
    Launch,
    NodeEvent,
    SetTimer,
    Transition,
)
from gpufleet.core.events import (
    Event,
    JobCancelled,
    JobSubmitted,
    NodeDrain,
    NodeHealth,
    NodeLost,
    NodeRegistered,
    NodeUp,
    QueueChanged,
    TaskExited,
    TaskFenced,
    TaskStarted,
    TimerFired,
)
from gpufleet.core.launch_env import rank_env
from gpufleet.core.pending import PendingBook
from gpufleet.core.state import JobRecord, NodeRuntime
from gpufleet.model.allocation import Allocation, Placement
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.job import Job, JobState
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI, Resources
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.decisions import CycleResult, Start
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import DecayedUsage
from gpufleet.scheduler.workspace import Workspace

S = JobState


def _whole_gpus(ev: JobSubmitted) -> bool:
    return ev.spec.gpus_per_worker > 0 and not ev.spec.fractional and not ev.depends_on


@dataclass(frozen=True, slots=True)
class RestoredJob:
    """What the store gives back for one job at restart."""

    job: Job
    seq: int
    allocation: Allocation = ()
    borrowing: bool = False
    depends_on: tuple[tuple[str, str], ...] = ()
    array_id: str | None = None
    array_limit: int = 0


# The ``why`` of the drain and resume the controller makes itself on a node's health reports
# (the service audits these; an admin's drains carry the admin's own words).
HEALTH_DRAIN = "failed its health checks"
HEALTH_RESUME = "passed its health checks again"


class ControllerError(ValueError):
    """An event that contradicts the state (unknown job, duplicate id): refused, state kept."""


class Controller:
    def __init__(
        self,
        profile: Profile,
        cluster: ClusterSpec | None = None,
        *,
        backoff_base_s: float = 10.0,
        backoff_max_s: float = 600.0,
        launch_timeout_s: float | None = None,
    ) -> None:
        if not 0 < backoff_base_s <= backoff_max_s:
            raise ValueError(
                f"retry back-off: need 0 < base ({backoff_base_s:g} s) <= max ({backoff_max_s:g} s)"
            )
        if launch_timeout_s is not None and not launch_timeout_s > 0:
            raise ValueError(f"launch timeout: {launch_timeout_s:g} s must be above 0")
        self.profile = profile
        # STARTING longer than this: requeued, the silent nodes suspect (None: no deadline;
        # the simulator's ranks start at once)
        self.launch_timeout_s = launch_timeout_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.nodes: dict[str, NodeRuntime] = {}
        self.jobs: dict[str, JobRecord] = {}
        self.queues: dict[str, QueueSpec] = {}
        self._pending = PendingBook()
        self.running: dict[str, RunningJob] = {}
        self._running_tuple: tuple[RunningJob, ...] | None = None
        # the running jobs with a time limit by (expected end, start order), for EASY's shadow
        # time; _end_keys and _ends side by side, so a snapshot's copy is one tuple()
        self._end_keys: list[tuple[float, int]] = []
        self._ends: list[tuple[float, Allocation]] = []
        self._end_key_of: dict[str, tuple[float, int]] = {}
        self._ends_tuple: tuple[tuple[float, Allocation], ...] | None = None
        self._run_seq = 0
        self._node_views: tuple[NodeView, ...] | None = None
        self._workspace: Workspace | None = None  # Workspace(self._node_views), kept for cycles
        # the views in node order, and the nodes whose free capacity changed since they were
        # made (any other change makes them all anew)
        self._view_list: list[NodeView] | None = None
        self._view_pos: dict[str, int] = {}
        self._touched: set[str] = set()
        self.half_life_s = float(getattr(profile.order, "half_life_s", 7 * 86400.0))
        self.ledger = DecayedUsage(self.half_life_s)
        self._queue_used: dict[str, Resources] = {}
        self._capacity = Resources()
        self._dependents: dict[str, list[str]] = {}
        self._throttle = ArrayThrottle()
        self.cycle = 0
        self.last: CycleResult | None = None
        self.dirty = True
        self._quiet = False  # nothing but whole-GPU arrivals since the last cycle
        self.seq = 0
        self.now = 0.0
        if cluster is not None:
            self.queues = {q.name: q for q in cluster.queues}
            for n in cluster.nodes:
                self.nodes[n.name] = NodeRuntime.of(n)
            self._recount_capacity()

    # ----- the one entry point -----------------------------------------------------------

    def handle(self, now: float, *events: Event, schedule: bool = True) -> list[Command]:
        now = self._at(now)
        out: list[Command] = []
        for ev in events:
            if not (isinstance(ev, JobSubmitted) and _whole_gpus(ev)):
                self._quiet = False
            self._apply(ev, now, out)
        if schedule and self.dirty:
            if self._nothing_can_start():
                self.dirty = False  # the cycle would start nothing and explain nothing
            else:
                self._schedule(now, out)
        return out

    def apply_events(
        self, now: float, events: Iterable[Event]
    ) -> tuple[list[Command], list[tuple[Event, ControllerError]]]:
        """The events in order, without a scheduling pass (the driver decides when); one the
        state contradicts is refused alone (state kept), with why."""
        now = self._at(now)
        out: list[Command] = []
        refused: list[tuple[Event, ControllerError]] = []
        for ev in events:
            if not (isinstance(ev, JobSubmitted) and _whole_gpus(ev)):
                self._quiet = False
            mark = len(out)
            try:
                self._apply(ev, now, out)
            except ControllerError as e:
                del out[mark:]  # refused before any change: nothing it said goes out
                refused.append((ev, e))
        return out, refused

    def _at(self, now: float) -> float:
        if now < self.now:
            now = self.now  # events are stamped by their sources; time never runs backwards here
        self._advance_usage(now)
        self.now = now
        return now

    def _nothing_can_start(self) -> bool:
        """Since the last cycle only whole-GPU jobs arrived, and that cycle left no whole GPU
        free: capacity has not grown, so no job can start now. Only when no Reason is wanted
        (the simulator's fast mode) and no preemption could make room; it saves the simulator
        most of its cycles on a saturated cluster."""
        return (
            self._quiet
            and self.last is not None
            and self.last.free_whole_gpus == 0
            and not self.profile.explain
            and not self.profile.preempt
        )

    def tick(self, now: float) -> list[Command]:
        """A scheduling pass even when nothing changed (the live controller's interval)."""
        self.dirty = True
        self._quiet = False
        return self.handle(now)

    def restore(
        self, nodes: Iterable[NodeSpec], jobs: Iterable[RestoredJob], *, seq: int = 0
    ) -> None:
        """Rebuild the state after a restart from what the store holds; ``seq``: the newest
        job's number in the store (finished jobs are not restored), so that new jobs number
        after every stored one, as the store numbers them.

        Nodes come back as they were last known (the watchdog declares them lost if their agents
        do not return within the grace); running attempts keep their allocations and are
        reconciled when their agents re-register (``reconcile``). Nothing is relaunched."""
        self.seq = max(self.seq, seq)
        for spec in nodes:
            if spec.name not in self.nodes:
                self.nodes[spec.name] = NodeRuntime.of(spec)
        self._nodes_changed()
        for r in sorted(jobs, key=lambda r: r.seq):
            rec = JobRecord(
                r.job,
                r.seq,
                r.allocation,
                r.borrowing,
                depends_on=r.depends_on,
                array_id=r.array_id,
                array_limit=r.array_limit,
            )
            self.jobs[r.job.id] = rec
            self.seq = max(self.seq, r.seq)
            for _, dep in r.depends_on:
                self._dependents.setdefault(dep, []).append(r.job.id)
            if r.job.state in (S.STARTING, S.RUNNING):
                for p in r.allocation:
                    if p.node in self.nodes:
                        self._take(p)
                self._run(rec.running_view())
                self._use(r.job.spec.queue, r.job.spec.total_resources)
                self._throttle_started(rec)
                if r.job.state is S.RUNNING:
                    rec.started_ranks = set(range(len(r.allocation)))
            elif r.job.state is S.PENDING:
                self._enqueue(rec)
        self._running_tuple = None
        self._recount_capacity()
        self.dirty = True

    def hold_restored_node(
        self, name: str, why: str, *, drained: bool = False, health_drained: bool = False
    ) -> None:
        """After ``restore``: place nothing new on a node until its agent is back (its NodeUp,
        after the reconcile of what it still runs); what runs there keeps running. An admin's
        drain (or the controller's own, for a failed check) that the store kept comes back."""
        n = self.nodes.get(name)
        if n is None or n.lost:
            return
        n.healthy = False  # NodeUp(healthy=True) lifts the hold
        n.drained = drained
        n.health_drained = drained and health_drained
        n.why = why
        n.changed()
        self._nodes_changed()
        self._recount_capacity()
        self.dirty = True

    def _registered(self, ev: NodeRegistered, now: float, out: list[Command]) -> None:
        """The node up and its tasks reconciled in one step: what the tasks did while nobody
        listened comes first (a rank that exited then is an exit, not a lost rank), then every
        rank placed there that the agent does not run is gone; launches queued for it before
        that must never start (``DropLaunches``)."""
        node = ev.spec.name
        self._node_up(NodeUp(ev.spec, True), now, out)
        for e in ev.events:
            self._apply(e, now, out)
        self._reconcile(now, node, ev.running, out)
        out.append(DropLaunches(node, frozenset(ev.running)))

    def _reconcile(
        self, now: float, node: str, running: Iterable[tuple[str, int, int]], out: list[Command]
    ) -> None:
        """The ranks the agent still runs: every rank the controller placed there that the
        agent does not run is gone (it never started, or ended while nobody listened): it
        counts as lost, and the JobMaster requeues the job."""
        alive = set(running)
        for rec in self._jobs_on(node):
            lost = [
                rank
                for rank, p in enumerate(rec.allocation)
                if p.node == node
                and rank not in rec.exited
                and (rec.id, rec.job.attempt, rank) not in alive
            ]
            if not lost:
                continue
            for rank in lost:
                rec.exited[rank] = -1
                self._free(rec.allocation[rank])
            self._stop(rec, S.NODE_LOST, f"node {node} no longer runs rank(s) {lost}", out)
            if not rec.live_ranks():
                self._attempt_over(rec, now, out)
        self.dirty = True

    def _task_fenced(self, ev: TaskFenced, now: float, out: list[Command]) -> None:
        """The node stopped the rank for its own sake: gone, as a reconcile would find."""
        if self.current_rank(ev.job_id, ev.attempt, ev.rank, ev.node) is None:
            return  # not the current attempt's, or not placed there: it changes nothing
        rec = self.jobs[ev.job_id]
        if ev.rank in rec.exited:
            return
        rec.exited[ev.rank] = -1
        self._free(rec.allocation[ev.rank])
        why = f"node {ev.node} no longer runs rank(s) [{ev.rank}]"
        self._stop(rec, S.NODE_LOST, f"{why}: {ev.why}" if ev.why else why, out)
        if not rec.live_ranks():
            self._attempt_over(rec, now, out)
        self.dirty = True

    # ----- the JobMaster's judgement of a task ------------------------------------------

    def current_rank(
        self, job_id: str, attempt: int, rank: int, node: str | None = None
    ) -> Placement | None:
        """The placement of a rank of the job's current attempt while that attempt runs (on
        ``node``, if given); ``None``: a stale task (an older attempt, an ended job, another
        node's rank), which its node must stop."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.job.attempt != attempt:
            return None
        if rec.job.state not in (S.STARTING, S.RUNNING) or not 0 <= rank < len(rec.allocation):
            return None
        p = rec.allocation[rank]
        return p if node is None or p.node == node else None

    def placed_elsewhere(self, job_id: str, attempt: int, rank: int, node: str) -> str | None:
        """The node a rank of the job's current attempt is placed on, if that is not ``node``
        (an agent speaks only for its own node); ``None`` when it is, or when the report is
        about an attempt that is not the current one (it changes nothing)."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.job.attempt != attempt or not 0 <= rank < len(rec.allocation):
            return None
        placed = rec.allocation[rank].node
        return placed if placed != node else None

    def deliverable(self, launch: Launch) -> Launch | None:
        """``launch`` as it still holds: ``None`` once a later attempt superseded it; without
        the ranks already counted as gone (a reconcile in the same step)."""
        rec = self.jobs.get(launch.job_id)
        if rec is None or rec.job.attempt != launch.attempt:
            return None
        gone = frozenset(r for r in rec.exited if 0 <= r < len(launch.allocation))
        if gone == launch.skip:
            return launch
        return Launch(launch.job_id, launch.attempt, launch.allocation, launch.env, gone)

    # ----- reading -----------------------------------------------------------------------

    def snapshot(self, now: float) -> Snapshot:
        if self._node_views is None:
            changed: list[int] | None = None
            if self._view_list is None:
                self._view_list = [n.view() for n in self.nodes.values()]
                self._view_pos = {name: i for i, name in enumerate(self.nodes)}
            else:
                changed = []
                for name in self._touched:
                    i = self._view_pos[name]
                    self._view_list[i] = self.nodes[name].view()
                    changed.append(i)
            self._touched.clear()
            self._node_views = tuple(self._view_list)
            self._workspace = Workspace.refreshed(self._workspace, self._node_views, changed)
        if self._running_tuple is None:
            self._running_tuple = tuple(self.running.values())
        if self._ends_tuple is None:
            self._ends_tuple = tuple(self._ends)
        return Snapshot(
            now,
            self._node_views,
            self._running_tuple,
            self._pending.jobs(),
            self.queues,
            self.ledger.values,
            self.cycle,
            {
                q: r
                for q, r in self._queue_used.items()
                if r.gpu_milli or r.cpu_milli or r.memory_mib
            },
            self._capacity,
            self._workspace,
            self._pending.index(),
            self._ends_tuple,
        )

    def reason(self, job_id: str) -> object:
        return None if self.last is None else self.last.reasons.get(job_id)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def queue_used(self, queue: str) -> Resources:
        return self._queue_used.get(queue, Resources())

    # ----- events ------------------------------------------------------------------------

    def _apply(self, ev: Event, now: float, out: list[Command]) -> None:
        if isinstance(ev, TaskExited):
            self._task_exited(ev, now, out)
        elif isinstance(ev, TaskStarted):
            self._task_started(ev, now, out)
        elif isinstance(ev, JobSubmitted):
            self._submit(ev, now, out)
        elif isinstance(ev, JobCancelled):
            self._cancel(ev, now, out)
        elif isinstance(ev, TimerFired):
            self._timer(ev, now, out)
        elif isinstance(ev, NodeUp):
            self._node_up(ev, now, out)
        elif isinstance(ev, NodeLost):
            self._node_lost(ev, now, out)
        elif isinstance(ev, NodeHealth):
            self._node_health(ev, now, out)
        elif isinstance(ev, NodeDrain):
            self._node_drain(ev, now, out)
        elif isinstance(ev, NodeRegistered):
            self._registered(ev, now, out)
        elif isinstance(ev, TaskFenced):
            self._task_fenced(ev, now, out)
        elif isinstance(ev, QueueChanged):
            self.queues[ev.spec.name] = ev.spec
            self.dirty = True

    def _submit(self, ev: JobSubmitted, now: float, out: list[Command]) -> None:
        if ev.job_id in self.jobs:
            raise ControllerError(f"job {ev.job_id} exists already")
        for kind, dep in ev.depends_on:
            if kind not in ("afterok", "afterany"):
                raise ControllerError(f"unknown dependency type {kind!r} (afterok, afterany)")
            if dep not in self.jobs:
                raise ControllerError(f"dependency {dep} is not a known job")
        self.seq += 1
        rec = JobRecord(
            Job(ev.job_id, ev.spec, ev.submit_time),
            self.seq,
            depends_on=ev.depends_on,
            oracle_duration_s=ev.oracle_duration_s,
            array_id=ev.array_id,
            array_limit=ev.array_limit if ev.array_id is not None else 0,
        )
        self.jobs[ev.job_id] = rec
        for _, dep in ev.depends_on:
            self._dependents.setdefault(dep, []).append(ev.job_id)
        out.append(Transition(ev.job_id, 0, None, S.PENDING, now, "submitted"))
        rec.job.history.append((now, S.PENDING, "submitted"))
        if self._dependency_failed(rec):
            self._to(rec, S.CANCELLED, now, self._dependency_failed(rec), out)
            rec.job.end_time = now
            return
        self._enqueue(rec)

    def _cancel(self, ev: JobCancelled, now: float, out: list[Command]) -> None:
        rec = self._rec(ev.job_id)
        st = rec.job.state
        if st is S.PENDING or (st in (S.PREEMPTED, S.NODE_LOST) and not rec.live_ranks()):
            self._dequeue(rec)
            self._to(rec, S.CANCELLED, now, ev.why, out)
            rec.job.end_time = now
            self._finished(rec, now, out)
        elif st in (S.STARTING, S.RUNNING):
            self._stop(rec, S.CANCELLED, ev.why, out)
        elif st is S.FAILED and not rec.job.finished:
            self._dequeue(rec)
            rec.job.retries_used = rec.job.spec.max_retries
            self._finished(rec, now, out)

    def _timer(self, ev: TimerFired, now: float, out: list[Command]) -> None:
        if ev.kind == "tick":
            self.dirty = True
            return
        rec = self.jobs.get(ev.job_id)
        if rec is None or rec.job.attempt != ev.attempt:
            return
        if ev.kind == "timelimit" and rec.job.state in (S.STARTING, S.RUNNING):
            self._stop(rec, S.TIMED_OUT, f"time limit {rec.job.spec.time_limit_s:g} s reached", out)
        elif ev.kind == "backoff" and rec.job.state is S.PENDING:
            self.dirty = True
        elif ev.kind == "launch" and rec.job.state is S.STARTING:
            self._launch_overdue(rec, now, out)

    def _launch_overdue(self, rec: JobRecord, now: float, out: list[Command]) -> None:
        """The launch deadline passed with ranks that never started: an infrastructure fault
        (like a lost node: requeued, not charged). Their nodes become suspect; the ranks that
        did start are stopped, and the attempt ends once they have exited."""
        silent = [
            r
            for r in range(len(rec.allocation))
            if r not in rec.started_ranks and r not in rec.exited
        ]
        if not silent:
            return
        nodes = sorted({rec.allocation[r].node for r in silent})
        why = (
            f"rank(s) {silent} did not start within the launch deadline "
            f"({self.launch_timeout_s:g} s) on {', '.join(nodes)}"
        )
        for name in nodes:
            self._suspect(name, f"job {rec.id} attempt {rec.job.attempt}: {why}", now, out)
        for r in silent:  # never started: nothing there to wait for (the Kill makes sure)
            rec.exited[r] = -1
            self._free(rec.allocation[r])
        self._stop(rec, S.NODE_LOST, why, out)
        out.append(Kill(rec.id, rec.job.attempt, tuple(silent), "launch deadline passed"))
        if not rec.live_ranks():
            self._attempt_over(rec, now, out)
        self.dirty = True

    def _suspect(self, name: str, why: str, now: float, out: list[Command]) -> None:
        node = self.nodes.get(name)
        if node is None or node.lost or node.suspect:
            return
        node.suspect = True
        if node.healthy and not node.drained:  # an admin's or a health drain says more
            node.why = why
        node.changed()
        self._nodes_changed()
        self._recount_capacity()
        out.append(NodeEvent(name, "suspect", now, why))

    def _trust(self, name: str, why: str, now: float, out: list[Command]) -> None:
        node = self.nodes.get(name)
        if node is None or not node.suspect:
            return
        node.suspect = False
        if node.healthy and not node.drained:
            node.why = why
        node.changed()
        self._nodes_changed()
        self._recount_capacity()
        out.append(NodeEvent(name, "trusted", now, why))
        self.dirty = True

    def _task_started(self, ev: TaskStarted, now: float, out: list[Command]) -> None:
        if ev.node:  # its agent starts tasks: whatever made it suspect is over
            self._trust(ev.node, f"started a task ({ev.job_id} attempt {ev.attempt})", now, out)
        rec = self.jobs.get(ev.job_id)
        if rec is None or rec.job.attempt != ev.attempt or rec.job.state is not S.STARTING:
            return  # a stale attempt: the agent will be told to stop it by its lease
        rec.started_ranks.add(ev.rank)
        if len(rec.started_ranks) == len(rec.allocation) and rec.ending is None:
            self._to(rec, S.RUNNING, now, "every rank started", out)

    def _task_exited(self, ev: TaskExited, now: float, out: list[Command]) -> None:
        rec = self.jobs.get(ev.job_id)
        if rec is None or rec.job.attempt != ev.attempt or ev.rank in rec.exited:
            return
        if rec.job.state not in (S.STARTING, S.RUNNING) or ev.rank >= len(rec.allocation):
            return
        rec.exited[ev.rank] = ev.exit_code
        self._free(rec.allocation[ev.rank])
        self.dirty = True
        if rec.ending is None and ev.exit_code != 0:
            why = ev.why or f"rank {ev.rank} exited with code {ev.exit_code}"
            rec.failure = why
            self._stop(rec, S.FAILED, why, out, reason_kill="gang member failed")
        if not rec.live_ranks():
            self._attempt_over(rec, now, out)

    # ----- nodes -------------------------------------------------------------------------

    def _node_up(self, ev: NodeUp, now: float, out: list[Command]) -> None:
        old = self.nodes.get(ev.spec.name)
        if old is not None and not old.lost and old.spec == ev.spec:
            old.healthy = ev.healthy
            old.datasets = ev.datasets
            old.changed()
            self._trust(ev.spec.name, "registered again", now, out)
        elif old is not None and not old.lost:
            # the same node, described anew (a label, its memory): what runs there keeps its
            # devices; ranks on devices the node no longer has are gone
            new = NodeRuntime.of(ev.spec, ev.healthy, ev.datasets)
            new.drained, new.why = old.drained, old.why
            new.health_drained = old.health_drained
            self.nodes[ev.spec.name] = new
            if old.suspect:
                new.suspect = True
                self._trust(ev.spec.name, "registered again", now, out)
            for rec in self._jobs_on(ev.spec.name):
                lost = False
                for r, p in enumerate(rec.allocation):
                    if p.node != ev.spec.name or r in rec.exited:
                        continue
                    if all(d < ev.spec.gpus for d in p.gpus):
                        self._take(p)
                    else:
                        rec.exited[r] = -1
                        lost = True
                if lost:
                    self._stop(
                        rec,
                        S.NODE_LOST,
                        f"node {ev.spec.name} no longer has the devices of a rank",
                        out,
                    )
                    if not rec.live_ranks():
                        self._attempt_over(rec, now, out)
        else:
            # a new node, or one that comes back: it has stopped all its tasks (fencing)
            self.nodes[ev.spec.name] = NodeRuntime.of(ev.spec, ev.healthy, ev.datasets)
            if old is not None:
                out.append(NodeEvent(ev.spec.name, "resumed", now, "registered again"))
        self._nodes_changed()
        self._recount_capacity()
        self.dirty = True

    def _node_lost(self, ev: NodeLost, now: float, out: list[Command]) -> None:
        node = self.nodes.get(ev.node)
        if node is None or node.lost:
            return
        node.lost = True
        node.why = ev.why
        node.changed()
        self._nodes_changed()
        out.append(NodeEvent(ev.node, "lost", now, ev.why))
        for rec in self._jobs_on(ev.node):
            # ranks on the lost node will never report: count them as gone
            for r, p in enumerate(rec.allocation):
                if p.node == ev.node and r not in rec.exited:
                    rec.exited[r] = -1
            self._stop(rec, S.NODE_LOST, f"node {ev.node} lost: {ev.why}", out)
            if not rec.live_ranks():
                self._attempt_over(rec, now, out)
        self._recount_capacity()
        self.dirty = True

    def _node_health(self, ev: NodeHealth, now: float, out: list[Command]) -> None:
        """A failed check marks the node unhealthy and drains it (nothing new is placed there;
        the jobs on its bad GPUs are requeued, not charged); it returns to service only once
        it passes its checks again, and then only from a drain the controller set itself: an
        admin's drain stays until the admin resumes the node."""
        node = self.nodes.get(ev.node)
        if node is None:
            return
        was, was_bad = node.healthy, node.bad_gpus
        node.healthy = ev.healthy
        node.bad_gpus = frozenset(ev.bad_gpus) if not ev.healthy else frozenset()
        node.why = ev.why
        node.changed()
        self._nodes_changed()
        if was != ev.healthy or node.bad_gpus != was_bad:
            out.append(NodeEvent(ev.node, "healthy" if ev.healthy else "unhealthy", now, ev.why))
        if not ev.healthy and not node.drained:
            node.drained = node.health_drained = True
            out.append(NodeEvent(ev.node, "drained", now, f"{HEALTH_DRAIN}: {ev.why}"))
        elif ev.healthy and node.health_drained:
            node.drained = node.health_drained = False
            node.why = HEALTH_RESUME
            out.append(NodeEvent(ev.node, "resumed", now, HEALTH_RESUME))
        if not ev.healthy:
            for rec in self._jobs_on(ev.node):
                hit = not ev.bad_gpus or any(
                    p.node == ev.node and set(p.gpus) & set(ev.bad_gpus) for p in rec.allocation
                )
                if hit:
                    self._stop(rec, S.NODE_LOST, f"node {ev.node} unhealthy: {ev.why}", out)
        self._recount_capacity()
        self.dirty = True

    def _node_drain(self, ev: NodeDrain, now: float, out: list[Command]) -> None:
        """An admin's drain or resume. A resume clears any drain, the controller's own too;
        ``force`` also puts a node whose checks still fail back into service (until its agent
        reports a new failure)."""
        node = self.nodes.get(ev.node)
        if node is None:
            raise ControllerError(f"unknown node {ev.node}")
        node.drained = ev.drain
        node.health_drained = False  # an admin's word replaces the controller's
        node.why = ev.why
        node.changed()
        self._nodes_changed()
        out.append(NodeEvent(ev.node, "drained" if ev.drain else "resumed", now, ev.why))
        if not ev.drain and ev.force and not node.healthy:
            node.healthy = True
            node.bad_gpus = frozenset()
            out.append(NodeEvent(ev.node, "healthy", now, f"forced by admin: {ev.why}"))
        self._recount_capacity()
        self.dirty = True

    # ----- scheduling --------------------------------------------------------------------

    def _schedule(self, now: float, out: list[Command]) -> None:
        self.cycle += 1
        snap = self.snapshot(now)
        res = run_cycle(snap, self.profile)
        self.last = res
        self.dirty = False
        self._quiet = True
        for st in res.starts:
            self._start(st, now, out)
        for pre in res.preemptions:
            victim = self.jobs[pre.job_id]
            if victim.job.state in (S.STARTING, S.RUNNING) and victim.ending is None:
                self._stop(victim, S.PREEMPTED, pre.reason, out, reason_kill="preempted")
            preemptor = self.jobs.get(pre.for_job)
            if preemptor is not None and not preemptor.nominated:
                preemptor.nominated = True  # the room being made is its: next cycles go first
                self._requeue_view(preemptor)

    def _start(self, st: Start, now: float, out: list[Command]) -> None:
        rec = self.jobs[st.job_id]
        self._dequeue(rec)
        rec.nominated = False
        j = rec.job
        j.attempt += 1
        j.start_time = now
        rec.allocation = st.allocation
        rec.borrowing = st.borrowing
        rec.started_ranks = set()
        rec.exited = {}
        rec.ending = None
        rec.ending_why = ""
        for p in st.allocation:
            self._take(p)
        self._to(rec, S.STARTING, now, f"attempt {j.attempt}", out)
        out.append(
            Launch(
                j.id, j.attempt, st.allocation, rank_env(j.id, rec.seq, j.attempt, st.allocation)
            )
        )
        if j.spec.time_limit_s is not None:
            out.append(SetTimer(now + j.spec.time_limit_s, "timelimit", j.id, j.attempt))
        if self.launch_timeout_s is not None:
            out.append(SetTimer(now + self.launch_timeout_s, "launch", j.id, j.attempt))
        self._run(rec.running_view())
        self._use(j.spec.queue, j.spec.total_resources)
        self._throttle_started(rec)

    # ----- the JobMaster -----------------------------------------------------------------

    def _stop(
        self,
        rec: JobRecord,
        ending: JobState,
        why: str,
        out: list[Command],
        reason_kill: str | None = None,
    ) -> None:
        """End the attempt as ``ending`` once every live rank has been stopped. A cancel wins
        over an ending already under way (a failed rank, a preemption): the user asked for the
        job to stop, not to be retried or requeued."""
        if rec.ending is None or ending is S.CANCELLED:
            rec.ending = ending
            rec.ending_why = why
        live = tuple(r for r in rec.live_ranks())
        if live:
            out.append(Kill(rec.id, rec.job.attempt, live, reason_kill or ending.value.lower()))

    def _attempt_over(self, rec: JobRecord, now: float, out: list[Command]) -> None:
        j = rec.job
        ending = rec.ending or S.SUCCEEDED
        why = rec.ending_why or "every rank exited 0"
        if j.start_time is not None:
            j.attained_gpu_s += (now - j.start_time) * j.spec.total_gpu_milli / MILLI
        self._unrun(j.id)
        self._unuse(j.spec.queue, j.spec.total_resources)
        if rec.array_limit:
            self._refresh_views(self._throttle.stopped(rec.id))
        if j.state is S.STARTING and ending in (S.SUCCEEDED, S.TIMED_OUT):
            self._to(rec, S.RUNNING, now, "ranks started and ended together", out)
        self._to(rec, ending, now, why, out)
        rec.ending = None
        if ending is S.FAILED and j.retries_used < j.spec.max_retries:
            j.retries_used += 1
            delay = min(self.backoff_max_s, self.backoff_base_s * 2 ** (j.retries_used - 1))
            j.eligible_time = now + delay
            self._to(
                rec,
                S.PENDING,
                now,
                f"retry {j.retries_used} of {j.spec.max_retries} after {delay:g} s back-off",
                out,
            )
            out.append(SetTimer(j.eligible_time, "backoff", j.id, j.attempt))
            self._enqueue(rec)
        elif ending in (S.PREEMPTED, S.NODE_LOST):
            self._to(rec, S.PENDING, now, "requeued; not charged to the job's retries", out)
            self._enqueue(rec)
        else:
            j.end_time = now
            self._finished(rec, now, out)

    def _finished(self, rec: JobRecord, now: float, out: list[Command]) -> None:
        for dep_id in self._dependents.get(rec.id, ()):
            dep = self.jobs[dep_id]
            if dep.job.state is not S.PENDING:
                continue
            failed = self._dependency_failed(dep)
            if failed:
                self._dequeue(dep)
                self._to(dep, S.CANCELLED, now, failed, out)
                dep.job.end_time = now
                self._finished(dep, now, out)
            else:
                self._requeue_view(dep)
        self.dirty = True

    # ----- helpers -----------------------------------------------------------------------

    def _rec(self, job_id: str) -> JobRecord:
        rec = self.jobs.get(job_id)
        if rec is None:
            raise ControllerError(f"unknown job {job_id}")
        return rec

    def _to(
        self, rec: JobRecord, state: JobState, now: float, why: str, out: list[Command]
    ) -> None:
        old = rec.job.state
        rec.job.to(state, now, why)
        out.append(Transition(rec.id, rec.job.attempt, old, state, now, why))

    def _view(self, rec: JobRecord) -> PendingJob:
        """Its pending view: an unmet dependency first, else its array's throttle."""
        unmet = self._dependency_unmet(rec)
        if unmet or not rec.array_limit:
            return rec.pending_view(unmet)
        why = self._throttle.waiting(rec.id)
        return rec.pending_view(why, throttled=bool(why))

    def _throttle_started(self, rec: JobRecord) -> None:
        if rec.array_limit and rec.array_id is not None:
            self._refresh_views(self._throttle.started(rec.array_id, rec.array_limit, rec.id))

    def _refresh_views(self, job_ids: set[str]) -> None:
        """Tasks an array's throttle window moved past: their pending views change."""
        for job_id in job_ids:
            self._requeue_view(self.jobs[job_id])
        if job_ids:
            self.dirty = True

    def _dependency_unmet(self, rec: JobRecord) -> str:
        if not rec.depends_on:
            return ""
        unmet = []
        for kind, dep in rec.depends_on:
            d = self.jobs[dep].job
            done = d.state in (S.SUCCEEDED, S.CANCELLED, S.TIMED_OUT) or d.finished
            if not done:
                unmet.append(f"{kind}:{dep}")
        return f"waiting for {', '.join(unmet)}" if unmet else ""

    def _dependency_failed(self, rec: JobRecord) -> str:
        for kind, dep in rec.depends_on:
            d = self.jobs[dep].job
            if kind == "afterok" and d.finished and d.state is not S.SUCCEEDED:
                return f"dependency afterok:{dep} ended {d.state.value}"
        return ""

    def _enqueue(self, rec: JobRecord) -> None:
        if rec.array_limit and rec.array_id is not None:
            moved = self._throttle.queued(rec.array_id, rec.array_limit, rec.id, rec.seq)
            self._refresh_views(moved - {rec.id})
        self._pending.put(self._view(rec))
        self.dirty = True

    def _requeue_view(self, rec: JobRecord) -> None:
        if rec.id in self._pending:
            self._pending.put(self._view(rec))

    def _dequeue(self, rec: JobRecord) -> None:
        if self._pending.remove(rec.id) and rec.array_limit:
            self._refresh_views(self._throttle.unqueued(rec.id, rec.seq))

    def _jobs_on(self, node: str) -> list[JobRecord]:
        return [
            self.jobs[jid]
            for jid, r in self.running.items()
            if any(p.node == node for p in r.allocation)
        ]

    def _nodes_changed(self) -> None:
        """A node came, went or changed in more than its free capacity: make every view anew."""
        self._node_views = None
        self._view_list = None

    def _run(self, view: RunningJob) -> None:
        self._unrun(view.id)
        self.running[view.id] = view
        self._running_tuple = None
        self._run_seq += 1
        end = view.expected_end
        if end is not None:
            key = (end, self._run_seq)
            i = bisect.bisect_left(self._end_keys, key)
            self._end_keys.insert(i, key)
            self._ends.insert(i, (end, view.allocation))
            self._end_key_of[view.id] = key
            self._ends_tuple = None

    def _unrun(self, job_id: str) -> None:
        if self.running.pop(job_id, None) is None:
            return
        self._running_tuple = None
        key = self._end_key_of.pop(job_id, None)
        if key is not None:
            i = bisect.bisect_left(self._end_keys, key)
            del self._end_keys[i]
            del self._ends[i]
            self._ends_tuple = None

    def _take(self, p: Placement) -> None:
        n = self.nodes[p.node]
        for d in p.gpus:
            n.gpu_free[d] -= p.gpu_milli
        n.cpu_free -= p.cpu_milli
        n.mem_free -= p.memory_mib
        n.changed()
        self._node_views = None
        self._touched.add(p.node)

    def _free(self, p: Placement) -> None:
        n = self.nodes.get(p.node)
        if n is None or n.lost:
            return  # a lost node comes back empty
        for d in p.gpus:
            n.gpu_free[d] = min(MILLI, n.gpu_free[d] + p.gpu_milli)
        n.cpu_free = min(n.spec.cpu_milli, n.cpu_free + p.cpu_milli)
        n.mem_free = min(n.spec.memory_mib, n.mem_free + p.memory_mib)
        n.changed()
        self._node_views = None
        self._touched.add(p.node)

    def _use(self, queue: str, r: Resources) -> None:
        self._queue_used[queue] = self._queue_used.get(queue, Resources()) + r

    def _unuse(self, queue: str, r: Resources) -> None:
        self._queue_used[queue] = (self._queue_used.get(queue, Resources()) - r).clamp0()

    def _recount_capacity(self) -> None:
        cap = Resources()
        for n in self.nodes.values():
            if n.schedulable:
                cap = cap + Resources(n.spec.gpus * MILLI, n.spec.cpu_milli, n.spec.memory_mib)
        self._capacity = cap

    def dominant_shares(self) -> dict[str, float]:
        c = self._capacity
        out = {}
        for q, u in self._queue_used.items():
            out[q] = max(
                u.gpu_milli / c.gpu_milli if c.gpu_milli else 0.0,
                u.cpu_milli / c.cpu_milli if c.cpu_milli else 0.0,
                u.memory_mib / c.memory_mib if c.memory_mib else 0.0,
            )
        return out

    def _advance_usage(self, now: float) -> None:
        led = self.ledger
        if (
            led.last is not None
            and now <= led.last
            and led.values.keys() >= self._queue_used.keys()
        ):
            return  # no time passed and no new queue in use: the advance would change nothing
        led.advance(now, self.dominant_shares())
