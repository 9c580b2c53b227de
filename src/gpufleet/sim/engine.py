"""The simulator: the live controller's core and driver, with a clock of event times.

``core.driver.Driver`` runs the core here as it does live (the same inbox, timers, pass rule
and journal hook); what differs is the Clock (the time of the next event) and the Executor:
``Simulation.apply`` turns a launch into a TaskStarted now and a TaskExited when the job's
remaining work is done, and a kill into a TaskExited now, on its event heap. The loop steps the
driver at the earliest of the next event and the driver's own ``due`` (a timer, a held pass).
The controller cannot tell this from live agents.

An attempt that ends preempted or with its node lost keeps only what its last checkpoint saved
(``model.checkpoint``: the job's ``checkpoint_interval_s``, else ``SimConfig``'s; none = the next
attempt starts from zero); the rest is counted as lost work on the job's outcome.

A node failure is known at once by default (a NodeLost at the failure's time); with
``SimConfig.node_grace_s`` the node goes silent instead and the driver's liveness timers declare
it lost a grace later, as live (``sim.silence``).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.core.commands import (
    Command,
    Kill,
    Launch,
    PowerDown,
    PowerUp,
    RouteBackend,
    Routes,
    Transition,
)
from gpufleet.core.controller import Controller
from gpufleet.core.driver import Driver, PassRule
from gpufleet.core.events import (
    Event,
    JobSubmitted,
    NodeLost,
    NodeUp,
    ReplicaProbe,
    ReservationSet,
    TaskCheckpointed,
    TaskExited,
    TaskStarted,
)
from gpufleet.model.checkpoint import kept_work_s
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.limits import SIGNALS
from gpufleet.model.notice import CheckpointNotice
from gpufleet.model.reservation import NodeReservation
from gpufleet.scheduler.framework import Profile
from gpufleet.sim.elastic import SimPower
from gpufleet.sim.silence import NodeFails, SilentNodes

# attempt endings after which the job runs again (FAILED only while retries remain)
_INTERRUPTED = frozenset({JobState.PREEMPTED, JobState.NODE_LOST, JobState.FAILED})


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a job's history says happened to it (``jobs`` files exported from a live cluster):
    its first start, its end, its final state and how many attempts it took. The simulator does
    not read it; a replay's outcome is compared with it."""

    start_time: float | None = None
    end_time: float | None = None
    state: str = ""
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a workload: what was asked, when, and how long it really runs."""

    id: str
    spec: JobSpec
    submit_time: float
    duration_s: float
    depends_on: tuple[tuple[str, str], ...] = ()
    checkpoint_interval_s: float | None = None  # None: the trace's (SimConfig), else none
    array_id: str | None = None  # a task of this array (Slurm's 1042 of 1042_3)
    array_limit: int = 0  # at most this many of the array's tasks run at once (0: no limit)
    array_index: int | None = None  # its index in the array (SLURM_ARRAY_TASK_ID)
    recorded: Recorded | None = None  # what happened to it live, when the trace says


@dataclass(frozen=True, slots=True)
class NodeFailure:
    time: float
    node: str
    repair_s: float


@dataclass(slots=True)
class JobOutcome:
    id: str
    queue: str
    gpus: int
    submit_time: float
    duration_s: float
    first_start: float | None = None
    end_time: float | None = None
    state: str = "PENDING"
    attempts: int = 0
    preemptions: int = 0
    run_s: float = 0.0  # time held on GPUs over all attempts
    # seconds of the job's work done and then lost (redone by a later attempt), by cause
    lost_preempted_s: float = 0.0
    lost_failed_s: float = 0.0  # node lost (or a failed attempt that is retried)
    # (start, end) of each attempt that held GPUs (the entitlement figure reads them)
    runs: list[tuple[float, float]] = field(default_factory=list)
    _attempt_start: float | None = None

    @property
    def jct(self) -> float | None:
        return None if self.end_time is None else self.end_time - self.submit_time

    @property
    def wait_s(self) -> float | None:
        j = self.jct
        return None if j is None else max(0.0, j - self.run_s)


MAX_REPORTS = 10_000  # an attempt's checkpoint reports at most (the heap's bound)


@dataclass(slots=True)
class SimConfig:
    restart_overhead_s: float = 0.0  # added to every attempt after the first
    failures: Sequence[NodeFailure] = ()
    mtbf_s: float | None = None  # per node; random failures when set
    repair_s: float = 3600.0
    seed: int = 0
    horizon_s: float | None = None  # stop scheduling new failures after this time
    checkpoint_interval_s: float | None = None  # for jobs that set none; None = restart from 0
    # every job saves its state on the preemption's stop signal and resumes there (Tiresias'
    # premise for LAS); False: a preempted attempt keeps only its last periodic checkpoint
    checkpoint_on_preempt: bool = False
    # every job that declares none declares ``checkpoint: {signal: USR1, grace_s: this}``: a
    # preempted job then holds its GPUs for its grace (capped by its queue: preemption costs
    # the preemptor that wait) and keeps its work (it saved it on the signal); None: no notice
    preempt_grace_s: float | None = None
    # the live controller's pass rule (a what-if schedules when the live cluster would); its
    # interval tick changes nothing here (the state moves only at events), so it is left out
    min_pass_gap_s: float = 0.0
    # the live controller's settings of the same names (``gpufleet controller``): a launch
    # that has not started within the deadline is requeued and its node made suspect (None:
    # none, the simulator's own ranks start at once); a failed job waits base · 2^(retry−1) s
    launch_timeout_s: float | None = None
    retry_backoff_s: float = 10.0
    retry_backoff_max_s: float = 600.0
    # the live controller's ``--node-grace-s``: a failed node is declared lost this long after
    # its last heartbeat (its jobs held until then, ``sim.silence``); None: lost at once
    node_grace_s: float | None = None
    # advance reservations (maintenance windows), in the simulation's seconds: given to the
    # controller at the start, as an admin's ``gpufleet reserve create`` before the trace
    reservations: tuple[NodeReservation, ...] = ()
    # the price of a node-hour, fixed or elastic (``sim/elastic.py``); None: the pools' own
    node_hour_price: float | None = None
    # a service replica answers this long after its start: its readiness probe passes at the
    # first probe after that (``Probe.ready_after``), as the live agent reports it
    replica_up_s: float = 0.0


@dataclass(slots=True)
class _Work:
    duration_s: float
    done_s: float = 0.0
    attempt_start: float = 0.0
    attempt: int = 0
    overhead_s: float = 0.0
    interval_s: float | None = None  # checkpoint interval


class Simulation:
    def __init__(
        self,
        cluster: ClusterSpec,
        profile: Profile,
        jobs: Iterable[TraceJob],
        config: SimConfig | None = None,
    ) -> None:
        self.cluster = cluster
        self.config = config or SimConfig()
        cfg = self.config
        self.controller = Controller(
            replace(profile, kill_invalid_depend=True),  # a trace has no user to cancel it
            cluster,
            backoff_base_s=cfg.retry_backoff_s,
            backoff_max_s=cfg.retry_backoff_max_s,
            launch_timeout_s=cfg.launch_timeout_s,
        )
        # this object is the driver's Executor (``apply``); its journal keeps nothing (a test
        # gives it the live server's, to make a run durable as live)
        grace = cfg.node_grace_s
        self.silence = None if grace is None else SilentNodes(grace)
        self.driver = Driver(
            self.controller,
            self,
            rule=PassRule(cfg.min_pass_gap_s),
            liveness=None if self.silence is None else self.silence.liveness,
        )
        # (time, seq, event): seq is unique, so events are never compared
        self.heap: list[tuple[float, int, Event | NodeFails]] = []
        self.seq = 0
        self.now = 0.0
        self.work: dict[str, _Work] = {}
        self.outcomes: dict[str, JobOutcome] = {}
        self.timeline: list[tuple[float, int, int, int]] = []  # t, pending, running, busy GPUs
        self.busy_gpus = 0
        self.gpu_seconds = 0.0
        self._last_t: float | None = None
        self.cycles = 0
        self.preemptions = 0
        self.routes: dict[str, tuple[RouteBackend, ...]] = {}  # each service's last Routes
        self._rng = random.Random(self.config.seed)
        self._node_specs = {n.name: n for n in cluster.nodes}
        self.power = SimPower(cluster, cfg.node_hour_price)  # elastic pools; node-hours
        for r in self.config.reservations:
            self._push(0.0, ReservationSet(r))
        for j in jobs:
            interval = j.checkpoint_interval_s or self.config.checkpoint_interval_s
            self.work[j.id] = _Work(j.duration_s, interval_s=interval)
            self.outcomes[j.id] = JobOutcome(
                j.id,
                j.spec.queue,
                j.spec.workers * j.spec.gpus_per_worker,
                j.submit_time,
                j.duration_s,
            )
            self._push(
                j.submit_time,
                JobSubmitted(
                    j.id,
                    self._noticed(j.spec),
                    j.submit_time,
                    j.depends_on,
                    oracle_duration_s=j.duration_s,
                    array_id=j.array_id,
                    array_limit=j.array_limit,
                    array_index=j.array_index,
                ),
            )
        for f in self.config.failures:
            self._fail(f.time, f.node, "scripted failure")
            self._push(f.time + f.repair_s, NodeUp(self._node_specs[f.node]))
        if self.config.mtbf_s:
            horizon = self.config.horizon_s
            if horizon is None:
                horizon = max(
                    (o.submit_time + o.duration_s for o in self.outcomes.values()), default=0.0
                )
            for name in self._node_specs:
                self._schedule_random_failures(name, horizon)

    # ----- the loop ----------------------------------------------------------------------

    def run(
        self, progress: Callable[[float, int], None] | None = None, until: float | None = None
    ) -> None:
        """Run to the end (every job finished, or no event left), or up to time ``until``."""
        done_every = max(1, len(self.outcomes) // 200)
        reported = 0
        driver = self.driver
        while True:
            due = driver.due()
            if not self.heap and due is None:
                break
            t = self.heap[0][0] if self.heap else math.inf
            if due is not None and due < t:
                t = max(due, self.now)
            if until is not None and t > until:
                return
            batch: list[Event] = []
            while self.heap and self.heap[0][0] == t:
                ev = heapq.heappop(self.heap)[2]
                if self.silence is None and not isinstance(ev, NodeFails):
                    batch.append(ev)
                else:
                    self._silently(t, ev, batch)
            self._account(t)
            self.now = t
            before = self.controller.cycle
            driver.step(t, batch)
            self.cycles += self.controller.cycle - before
            if progress is not None and self._finished_count - reported >= done_every:
                reported = self._finished_count
                progress(t, reported)
            self.timeline.append(
                (t, self.controller.pending_count, len(self.controller.running), self.busy_gpus)
            )
            if (
                self._finished_count == len(self.outcomes)
                and not self._has_job_events()
                and not self.controller.services.services  # a service runs until deleted
            ):
                break  # the timers left (time limits, back-offs) are all of ended attempts
        self._account(self.now)

    _finished_count = 0

    def _has_job_events(self) -> bool:
        return any(not isinstance(ev, NodeLost | NodeUp | NodeFails) for _, _, ev in self.heap)

    def _silently(self, t: float, ev: Event | NodeFails, batch: list[Event]) -> None:
        """``ev`` as the controller sees it when failed nodes go silent: a failure is not
        seen (the liveness timers will tell), a silent node's ranks report nothing, and a
        node repaired within its grace comes back having lost its jobs."""
        silence = self.silence
        assert silence is not None
        if isinstance(ev, NodeFails):
            silence.fails(ev.node, t)
        elif isinstance(ev, TaskStarted | TaskExited):
            if silence.reports(ev):
                batch.append(ev)
        else:
            if isinstance(ev, NodeUp):
                batch.extend(silence.comes_back(ev.spec.name, t))
            batch.append(ev)

    def _account(self, t: float) -> None:
        if self._last_t is not None and t > self._last_t:
            self.gpu_seconds += self.busy_gpus * (t - self._last_t)
            self.power.account(t - self._last_t, self.controller.elastic.book)
        self._last_t = t

    # ----- the executor ------------------------------------------------------------------

    def apply(self, commands: Sequence[Command]) -> None:
        """The Executor: commands become events on the heap (timers stay with the driver)."""
        t = self.now
        for c in commands:
            if isinstance(c, Transition):
                self._record(c)
            elif isinstance(c, Launch) and c.job_id not in self.work:
                self._replica(c, t)
            elif isinstance(c, Routes):
                self.routes[c.service] = c.backends
            elif isinstance(c, PowerUp | PowerDown):
                self.power.apply(c, t, self._push)
            elif isinstance(c, Launch):
                w = self.work[c.job_id]
                w.attempt = c.attempt
                w.attempt_start = t
                w.overhead_s = self.config.restart_overhead_s if c.attempt > 1 else 0.0
                if self.silence is not None:
                    self.silence.launched(c.job_id, c.attempt, c.allocation, t)
                end = t + w.overhead_s + max(0.0, w.duration_s - w.done_s)
                for rank in range(len(c.allocation)):
                    if rank in c.skip:
                        continue
                    self._push(t, TaskStarted(c.job_id, c.attempt, rank))
                    self._push(end, TaskExited(c.job_id, c.attempt, rank, 0))
                self._checkpoints(c.job_id, c.attempt, t + w.overhead_s, end, w.interval_s)
                gpus = sum(len(p.gpus) for p in c.allocation)
                self.busy_gpus += gpus
            elif isinstance(c, Kill):
                # progress is settled when the attempt ends (_interrupted), for every cause; a
                # preemption's notice holds the GPUs for its whole wait (the checkpoint's write
                # is not modelled shorter), then the ranks exit
                end = t + (c.notice.wait_s if c.notice is not None else 0.0)
                for rank in c.ranks:
                    self._push(end, TaskExited(c.job_id, c.attempt, rank, 137, c.why))

    def _replica(self, c: Launch, t: float) -> None:
        """A service's replica (core/services): it serves until it is stopped, and is ready
        when its readiness probe would first pass (none: running is ready)."""
        if self.silence is not None:
            self.silence.launched(c.job_id, c.attempt, c.allocation, t)
        for rank in range(len(c.allocation)):
            if rank not in c.skip:
                self._push(t, TaskStarted(c.job_id, c.attempt, rank))
        probes = self.controller.services.probes(c.job_id)
        readiness = None if probes is None else probes[0]
        if readiness is not None and 0 not in c.skip:
            at = t + readiness.ready_after(self.config.replica_up_s)
            self._push(at, ReplicaProbe(c.job_id, c.attempt, "readiness", True, "simulated"))

    def _record(self, c: Transition) -> None:
        o = self.outcomes.get(c.job_id)
        if o is None:
            return
        o.state = c.new.value
        if c.new is JobState.STARTING:
            o.attempts = c.attempt
            o._attempt_start = c.time
            if o.first_start is None:
                o.first_start = c.time
        elif c.old in (JobState.STARTING, JobState.RUNNING) and c.new is not JobState.RUNNING:
            if o._attempt_start is not None:
                o.run_s += c.time - o._attempt_start
                o.runs.append((o._attempt_start, c.time))
                o._attempt_start = None
            self.busy_gpus -= o.gpus if o.gpus else 0
            if c.new is JobState.PREEMPTED:
                o.preemptions += 1
                self.preemptions += 1
            if c.new in _INTERRUPTED and not self._over(c):
                lost = self._interrupted(c)
                if c.new is JobState.PREEMPTED:
                    o.lost_preempted_s += lost
                else:
                    o.lost_failed_s += lost
            if self.silence is not None:
                self.silence.ended(c.job_id, c.attempt)
        if c.new in (JobState.SUCCEEDED, JobState.TIMED_OUT, JobState.CANCELLED) or self._over(c):
            o.end_time = c.time
            self._finished_count += 1

    def _over(self, c: Transition) -> bool:
        """A failure with no retry left: the job's last transition."""
        return c.new is JobState.FAILED and self.controller.jobs[c.job_id].job.finished

    def _interrupted(self, c: Transition) -> float:
        """Keep what the attempt's last checkpoint saved; return the seconds of work lost."""
        w = self.work[c.job_id]
        if w.attempt != c.attempt:
            return 0.0
        w.attempt = -1  # settled once
        end = c.time
        stopped = None if self.silence is None else self.silence.stopped_at(c.job_id, c.attempt)
        if stopped is not None:  # it stopped working when its node died
            end = min(end, stopped)
        useful = min(max(0.0, end - w.attempt_start - w.overhead_s), w.duration_s - w.done_s)
        noticed = self.controller.jobs[c.job_id].job.spec.preempt_notice is not None
        saved = c.new is JobState.PREEMPTED and noticed  # checkpoint_on_preempt: a notice
        kept = kept_work_s(useful, w.interval_s, saved_at_stop=saved)
        w.done_s += kept
        return useful - kept

    # ----- helpers -----------------------------------------------------------------------

    def _checkpoints(
        self, job_id: str, attempt: int, start: float, end: float, interval: float | None
    ) -> None:
        """The attempt's periodic checkpoints, reported as a live agent reports its file's
        writes (victims are chosen by the work since the last one), up to ``MAX_REPORTS``."""
        if not interval:
            return
        at = start + interval
        for _ in range(MAX_REPORTS):
            if at >= end:
                return
            self._push(at, TaskCheckpointed(job_id, attempt, 0))
            at += interval

    def _noticed(self, spec: JobSpec) -> JobSpec:
        """``spec`` with the checkpoint notice ``preempt_grace_s`` gives every job (of 0 s with
        ``checkpoint_on_preempt``: each saves at the signal, and the scheduler knows it)."""
        g = self.config.preempt_grace_s
        if g is None and self.config.checkpoint_on_preempt:
            g = 0.0
        if g is None or spec.preempt_notice is not None:
            return spec
        return replace(spec, checkpoint=CheckpointNotice(SIGNALS["USR1"], round(g)))

    def at(self, t: float, *events: Event) -> None:
        """Events from outside the trace (a service created, a crash, a load sample) at ``t``."""
        for ev in events:
            self._push(t, ev)

    def _push(self, t: float, ev: Event | NodeFails) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, ev))

    def _fail(self, t: float, node: str, why: str) -> None:
        """The node fails at ``t``: lost then, or silent until its grace runs out."""
        self._push(t, NodeLost(node, why) if self.silence is None else NodeFails(node))

    def _schedule_random_failures(self, node: str, horizon: float) -> None:
        """Exponential times between failures (per-node MTBF), each followed by a repair."""
        cfg = self.config
        assert cfg.mtbf_s
        t = 0.0
        while True:
            t += self._rng.expovariate(1.0 / cfg.mtbf_s)
            if t > horizon:
                return
            self._fail(t, node, "random failure (MTBF)")
            self._push(t + cfg.repair_s, NodeUp(self._node_specs[node]))
            t += cfg.repair_s
