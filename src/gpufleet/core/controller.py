"""The controller state machine: ``handle(now, *events) -> commands``.

Pure like Dask's worker state machine: no I/O, no wall clock, no threads. The live server and
the simulator differ only in who calls it (with which clock) and who carries the commands out.

A thin facade over its parts: ``ClusterState`` (the nodes, the running and pending jobs, the
queues' usage, the snapshot a cycle reads), the ``JobMaster`` (every job's lifecycle) and
``NodeLifecycle`` (a node's events). It dispatches the events and runs the scheduling pass.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.core.cluster_state import ClusterState
from gpufleet.core.commands import Command, DefragMoved, DropLaunches, Launch, SetTimer, Transition
from gpufleet.core.defrag_moves import rekill, restore_moves
from gpufleet.core.elastic import TIMER as ELASTIC_TIMER
from gpufleet.core.elastic import ElasticMaster
from gpufleet.core.errors import ControllerError
from gpufleet.core.events import (
    Event,
    GpuUtilization,
    JobRequest,
    JobSubmitted,
    NodeAccounts,
    NodeDrain,
    NodeHealReport,
    NodeHealth,
    NodeLost,
    NodeRegistered,
    NodeUp,
    PowerFailed,
    QueueChanged,
    ReplicaProbe,
    ReservationRemoved,
    ReservationSet,
    ServiceCreated,
    ServiceDeleted,
    ServiceLoad,
    ServiceScaled,
    ServiceUpdated,
    TaskCheckpointed,
    TaskExited,
    TaskFenced,
    TaskStarted,
    TimerFired,
)
from gpufleet.core.healing import HEAL_TIMER, Healer
from gpufleet.core.idle import IdleGovernor
from gpufleet.core.jobmaster import JobMaster, RestoredJob
from gpufleet.core.launch_env import JobFacts
from gpufleet.core.nodes import DRAIN_TIMER, HEALTH_DRAIN, HEALTH_RESUME, NodeLifecycle
from gpufleet.core.services import TIMER as SERVICE_TIMER
from gpufleet.core.services import RestoredService, ServiceMaster
from gpufleet.core.state import JobRecord, NodeRuntime
from gpufleet.model.allocation import Placement
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.elastic import ElasticPool
from gpufleet.model.heal import HealPolicy
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reservation import NodeReservation
from gpufleet.model.resources import Resources
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import DefragMove, PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import DecayedUsage

__all__ = [
    "HEALTH_DRAIN",
    "HEALTH_RESUME",
    "Controller",
    "ControllerError",
    "RestoredJob",
    "RestoredService",
]


RESERVATION_TIMER = "reservation"  # a reservation's window opens or closes


def _whole_gpus(ev: JobSubmitted) -> bool:
    return ev.spec.gpus_per_worker > 0 and not ev.spec.fractional and not ev.depends_on


class Controller:
    def __init__(
        self,
        profile: Profile,
        cluster: ClusterSpec | None = None,
        *,
        backoff_base_s: float = 10.0,
        backoff_max_s: float = 600.0,
        launch_timeout_s: float | None = None,
        heal: HealPolicy | None = None,
        elastic: tuple[ElasticPool, ...] | None = None,
        replica_ports: range | None = None,
    ) -> None:
        if not 0 < backoff_base_s <= backoff_max_s:
            raise ValueError(
                f"retry back-off: need 0 < base ({backoff_base_s:g} s) <= max ({backoff_max_s:g} s)"
            )
        if launch_timeout_s is not None and not launch_timeout_s > 0:
            raise ValueError(f"launch timeout: {launch_timeout_s:g} s must be above 0")
        self.profile = profile
        self.half_life_s = float(profile.order.half_life_s)
        self.state = ClusterState(self.half_life_s, cluster, forecast=profile.plan_arrivals)
        self.jobmaster = JobMaster(
            self.state,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
            launch_timeout_s=launch_timeout_s,
            started=profile.order.started,
            finished=profile.order.finished,
            kill_invalid_depend=profile.kill_invalid_depend,
        )
        self.healer = Healer(self.state, self.jobmaster, heal)
        self._nodes = NodeLifecycle(self.state, self.jobmaster, self.healer)
        self.services = ServiceMaster(self.state, self.jobmaster)
        if replica_ports is not None:
            if not replica_ports:
                raise ValueError("replica ports: the range is empty")
            self.services.replica_ports = replica_ports
        # the elastic pools: the cluster spec's, or given apart (the server passes no cluster)
        pools = elastic if elastic is not None else (cluster.elastic if cluster else ())
        self.elastic = ElasticMaster(self.state, pools)
        self.idle = IdleGovernor(self.state, self.jobmaster)  # the idle-GPU policy
        self.cycle = 0
        self.last: CycleResult | None = None
        self._quiet = False  # nothing but whole-GPU arrivals since the last cycle
        self.now = 0.0
        self._rekill: list[str] = []  # restored defrag victims: their Kills at the first tick

    # ----- the parts' state, as the rest of the code reads it ----------------------------

    @property
    def nodes(self) -> dict[str, NodeRuntime]:
        return self.state.nodes

    @property
    def running(self) -> dict[str, RunningJob]:
        return self.state.running

    @property
    def queues(self) -> dict[str, QueueSpec]:
        return self.state.queues

    @queues.setter
    def queues(self, queues: dict[str, QueueSpec]) -> None:
        self.state.queues = queues

    @property
    def ledger(self) -> DecayedUsage:
        return self.state.ledger

    @property
    def dirty(self) -> bool:
        return self.state.dirty

    @dirty.setter
    def dirty(self, dirty: bool) -> None:
        self.state.dirty = dirty

    @property
    def jobs(self) -> dict[str, JobRecord]:
        return self.jobmaster.jobs

    @property
    def seq(self) -> int:
        return self.jobmaster.seq

    @property
    def launch_timeout_s(self) -> float | None:
        return self.jobmaster.launch_timeout_s

    @property
    def backoff_base_s(self) -> float:
        return self.jobmaster.backoff_base_s

    @property
    def backoff_max_s(self) -> float:
        return self.jobmaster.backoff_max_s

    # ----- the one entry point -----------------------------------------------------------

    def handle(self, now: float, *events: Event, schedule: bool = True) -> list[Command]:
        now = self._at(now)
        out: list[Command] = []
        for ev in events:
            if not (isinstance(ev, JobSubmitted) and _whole_gpus(ev)):
                self._quiet = False
            self._apply_watched(ev, now, out)
        self.healer.advance(now, out)
        if schedule and self.state.dirty:
            if self._nothing_can_start():
                self.state.dirty = False  # the cycle would start nothing and explain nothing
            else:
                self._schedule(now, out)
        self.services.flush(out)
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
                self._apply_watched(ev, now, out)
            except ControllerError as e:
                del out[mark:]  # refused before any change: nothing it said goes out
                refused.append((ev, e))
        self.healer.advance(now, out)
        self.services.flush(out)
        return out, refused

    def _apply_watched(self, ev: Event, now: float, out: list[Command]) -> None:
        mark = len(out)
        self._apply(ev, now, out)
        self._watch(out, mark, now)

    def _watch(self, out: list[Command], mark: int, now: float) -> None:
        """Every Transition made since ``mark`` is shown to the ServiceMaster (a replica's
        start, readiness, end); what it does in turn is in ``out`` and is shown too."""
        if not self.services.services:
            return
        i = mark
        while i < len(out):
            c = out[i]
            if isinstance(c, Transition):
                self.services.job_moved(c, now, out)
            i += 1

    def _at(self, now: float) -> float:
        if now < self.now:
            now = self.now  # events are stamped by their sources; time never runs backwards here
        self.state.advance_usage(now)
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
            and not self.elastic.can_grow  # the pools may grow for the new arrivals
        )

    def tick(self, now: float) -> list[Command]:
        """A scheduling pass even when nothing changed (the live controller's interval)."""
        self.state.dirty = True
        self._quiet = False
        out: list[Command] = []
        if self._rekill:
            rekill(self.state, self.jobmaster, self._rekill, out)
            self._rekill = []
        if self.services.services:
            now = self._at(now)
            self.services.tick(now, out)
            self._watch(out, 0, now)
        return out + self.handle(now)

    # ----- restart -----------------------------------------------------------------------

    def restore(
        self,
        nodes: Iterable[NodeSpec],
        jobs: Iterable[RestoredJob],
        *,
        seq: int = 0,
        services: Iterable[RestoredService] = (),
        defrag_moves: Iterable[DefragMove] = (),
    ) -> None:
        """Rebuild the state after a restart from what the store holds; ``seq``: the newest
        job's number in the store (finished jobs are not restored), so that new jobs number
        after every stored one, as the store numbers them.

        Nodes come back as they were last known (the watchdog declares them lost if their agents
        do not return within the grace); running attempts keep their allocations and are
        reconciled when their agents re-register (``reconcile``). Nothing is relaunched.
        Services come back with their replicas' generations and their rollout; their routes
        go out again at the first tick, as do defrag moves in progress (``defrag_moves``)."""
        jm = self.jobmaster
        jm.seq = max(jm.seq, seq)
        for spec in nodes:
            if spec.name not in self.state.nodes:
                self.state.put_node(NodeRuntime.of(spec))
        jm.restore(jobs)
        self.elastic.restored(self.now)
        self.services.restore(services)
        self._rekill += restore_moves(self.state, jm, defrag_moves)  # a later restore adds
        self.state.dirty = True

    def hold_restored_node(
        self, name: str, why: str, *, drained: bool = False, health_drained: bool = False
    ) -> None:
        """After ``restore``: place nothing new on a node until its agent is back (its NodeUp,
        after the reconcile of what it still runs); what runs there keeps running. An admin's
        drain (or the controller's own, for a failed check) that the store kept comes back."""
        self._nodes.hold_restored(name, why, drained=drained, health_drained=health_drained)

    def restore_heal(
        self, name: str, phase: str, failures: list[tuple[float, str]], round_: int = 0
    ) -> None:
        """After ``restore``: where the heal loop was with the node (its history says)."""
        self.healer.restore(name, phase, failures, round_)

    # ----- the JobMaster's judgement of a task ------------------------------------------

    def current_rank(
        self, job_id: str, attempt: int, rank: int, node: str | None = None
    ) -> Placement | None:
        return self.jobmaster.current_rank(job_id, attempt, rank, node)

    def placed_elsewhere(self, job_id: str, attempt: int, rank: int, node: str) -> str | None:
        return self.jobmaster.placed_elsewhere(job_id, attempt, rank, node)

    def deliverable(self, launch: Launch) -> Launch | None:
        return self.jobmaster.deliverable(launch)

    def ran_on(self, job_id: str, attempt: int, rank: int) -> str | None:
        return self.jobmaster.ran_on(job_id, attempt, rank)

    def launch_facts(self, job_id: str) -> JobFacts:
        return self.jobmaster.launch_facts(job_id)

    # ----- reading -----------------------------------------------------------------------

    def snapshot(self, now: float) -> Snapshot:
        return self.state.snapshot(now, self.cycle)

    def pending_jobs(self) -> tuple[PendingJob, ...]:
        """The pending jobs' views by (submit time, seq), without making a snapshot."""
        return self.state.pending_jobs()

    def reason(self, job_id: str) -> object:
        return None if self.last is None else self.last.reasons.get(job_id)

    @property
    def pending_count(self) -> int:
        return self.state.pending_count

    def queue_used(self, queue: str) -> Resources:
        return self.state.queue_used(queue)

    def dominant_shares(self) -> dict[str, float]:
        return self.state.dominant_shares()

    # ----- events ------------------------------------------------------------------------

    def _apply(self, ev: Event, now: float, out: list[Command]) -> None:
        jm, nodes = self.jobmaster, self._nodes
        if isinstance(ev, TaskExited):
            jm.task_exited(ev, now, out)
        elif isinstance(ev, TaskStarted):
            jm.task_started(ev, now, out)
        elif isinstance(ev, JobSubmitted):
            jm.submit(ev, now, out)
        elif isinstance(ev, JobRequest):
            jm.request(ev, now, out, self.reason(ev.job_id))
        elif isinstance(ev, TimerFired):
            if ev.kind == RESERVATION_TIMER:
                self.state.dirty = True  # a window opened or closed: the next pass sees it
            elif ev.kind == SERVICE_TIMER:
                self.services.timer(ev.job_id, now, out)
            elif ev.kind == HEAL_TIMER:
                self.healer.timer(ev, now, out)
            elif ev.kind == ELASTIC_TIMER:
                self.elastic.timer(ev.job_id, now, out)
            elif ev.kind == DRAIN_TIMER:
                nodes.drain_deadline(ev.job_id, now, out)
            else:
                jm.timer(ev, now, out)
        elif isinstance(ev, NodeUp):
            if self.elastic.registering(ev.spec.name, now, out):
                nodes.up(ev, now, out)
        elif isinstance(ev, NodeLost):
            nodes.lost(ev, now, out)
            self.elastic.lost(ev.node, now, out)
        elif isinstance(ev, PowerFailed):
            self.elastic.failed(ev.node, ev.why, now, out)
        elif isinstance(ev, NodeHealth):
            nodes.health(ev, now, out)
        elif isinstance(ev, NodeDrain):
            if ev.drain or not self.elastic.admin_resume(ev.node, now, out):
                nodes.drain(ev, now, out)
        elif isinstance(ev, NodeHealReport):
            self.healer.report(ev, now, out)
        elif isinstance(ev, NodeRegistered):
            self._registered(ev, now, out)
        elif isinstance(ev, TaskFenced):
            jm.task_fenced(ev, now, out)
        elif isinstance(ev, TaskCheckpointed):
            jm.task_checkpointed(ev, now)
        elif isinstance(ev, ReplicaProbe):
            self.services.probe(ev, now, out)
        elif isinstance(ev, ServiceLoad):
            self.services.load(ev, now, out)
        elif isinstance(ev, ServiceCreated):
            self.services.create(ev, now, out)
        elif isinstance(ev, ServiceUpdated):
            self.services.update(ev, now, out)
        elif isinstance(ev, ServiceScaled):
            self.services.scale(ev, now, out)
        elif isinstance(ev, ServiceDeleted):
            self.services.delete(ev, now, out)
        elif isinstance(ev, NodeAccounts):
            if ev.forget:
                self.state.accounts.forget(ev.forget)
            else:
                self.state.accounts.record(ev.node, ev.answers, ev.checks)
            self.state.dirty = True
        elif isinstance(ev, QueueChanged):
            self.state.queues[ev.spec.name] = ev.spec
            self.state.dirty = True
        elif isinstance(ev, ReservationSet):
            self.set_reservation(ev.spec, now, out)
        elif isinstance(ev, GpuUtilization):
            self.idle.observe(ev, now, out)
        elif isinstance(ev, ReservationRemoved):
            self.state.reservations.pop(ev.name, None)
            self.state.dirty = True

    def set_reservation(self, r: NodeReservation, now: float, out: list[Command]) -> None:
        """An advance reservation, new or restored: a pass runs when its window opens and
        when it closes (what may start where changes then), and now."""
        resv = self.state.reservations
        for name in [n for n, old in resv.items() if old.end <= now]:
            del resv[name]  # ended: forgotten by the core (the store keeps it until removed)
        if r.end <= now:
            return
        resv[r.name] = r
        self.state.dirty = True
        for at in (r.start, r.end):
            if at > now:
                out.append(SetTimer(at, RESERVATION_TIMER, r.name))

    def _registered(self, ev: NodeRegistered, now: float, out: list[Command]) -> None:
        """The node up and its tasks reconciled in one step: what the tasks did while nobody
        listened comes first (a rank that exited then is an exit, not a lost rank), then every
        rank placed there that the agent does not run is gone; launches queued for it before
        that must never start (``DropLaunches``)."""
        node = ev.spec.name
        if not self.elastic.registering(node, now, out):
            return  # released meanwhile: its agent's last words
        self._nodes.up(NodeUp(ev.spec, True), now, out)
        for e in ev.events:
            self._apply(e, now, out)
        self.jobmaster.attempts_seen((*ev.running, *ev.ended))
        self.jobmaster.reconcile(now, node, ev.running, out, stopping=ev.stopping)
        out.append(DropLaunches(node, frozenset(ev.running)))

    # ----- scheduling --------------------------------------------------------------------

    def _move_replicas(self, res: CycleResult, now: float, out: list[Command]) -> set[str]:
        """The service replicas a defragmentation move takes that move make-before-break
        (a replacement ready elsewhere before each stops): not preempted."""
        moved = set()
        for pre in res.preemptions:
            if pre.domain and self.services.service_of(pre.job_id) is not None:
                said = res.reasons.raw(pre.for_job)
                avoid = tuple(said.data.get("nodes", ())) if said is not None else ()
                if self.services.move(pre.job_id, avoid, pre.reason, now, out):
                    moved.add(pre.job_id)
        return moved

    def _schedule(self, now: float, out: list[Command]) -> None:
        self.cycle += 1
        snap = self.snapshot(now)
        res = run_cycle(snap, self.profile)
        self.last = res
        self.state.dirty = False
        self._quiet = True
        mark = len(out)
        for st in res.starts:
            self.jobmaster.start(st, now, out)
        replacing = self._move_replicas(res, now, out)
        for pre in res.preemptions:
            if pre.job_id in replacing:
                self.jobmaster.nominate(pre.for_job)
            else:
                self.jobmaster.preempt(pre, now, out)
        if any(pre.domain for pre in res.preemptions):
            tries = {p.job_id: self.jobs[p.job_id].job.attempt for p in res.preemptions}
            out += map(DefragMoved, self.state.moved(res, now, replacing, tries))
        self._watch(out, mark, now)
        self.elastic.after_cycle(now, self.cycle, res, self.profile.place, out)
