"""The ServiceMaster: every service's replicas, kept alive, routed, rolled and scaled.

Pure like the rest of the core: events in (``ServiceCreated``, ``ServiceUpdated``,
``ServiceScaled``, ``ServiceDeleted``, ``ReplicaProbe``, ``ServiceLoad``, its ``"service"``
timers, and the Transitions of its replica jobs, which the Controller hands on), commands out
(``ReplicaAdded``, ``Routes``, ``ServiceEvent``, ``ServiceRecord``, ``SetTimer``, and through the
JobMaster the replica jobs' own Transitions, Launches and Kills). The clock is the event's
``now``.

Each replica is a job the JobMaster runs like any other (scheduling, placement, Reasons,
secrets, containers, fencing all apply): one worker, no time limit, no retries of its own. Its id
is ``<service>.<n>`` (a service name has no '.', so it never meets a stored job's id). The
rules, all in ``_reconcile`` (idempotent: a timer or a tick may run it at any time):

- **alive**: the desired count of replicas of the current generation exists; one that ends
  (any exit, a liveness failure, a user's cancel) is a failure and is replaced once the back-off
  has passed: ``base_s`` doubled per failure in a row, at most ``max_s``; a replica that failed
  after staying ready ``reset_s`` starts the count again. After ``avoid_node_after`` failures in
  a row on one node, replacements get that node in their ``exclude``. A lost node or a
  preemption is no failure: the JobMaster requeues the replica's job, as any job's.
- **ready**: a replica is ready once its job runs and, with a readiness probe, its probe runner
  said so; ``Routes`` (node and port of each ready replica) go out whenever that set changes,
  before the Kills of the replicas that leave it (the gateway drains them first).
- **scale**: surplus replicas go not-ready first, then the newest.
- **rolling update**: a changed replica (template, port, probes) is a new generation; new
  replicas are added at most ``max_surge`` above the desired count, old ones stopped only while
  the ready ones stay at least ``max_unavailable`` below it (old not-ready ones first, they serve
  nothing). The rollout **failed** when no new replica became ready for ``progress_deadline_s``
  (Kubernetes' progressDeadlineSeconds: from the update, or from the last new replica that
  became ready) or new replicas failed ``max_failures`` times: it rolls back by itself (the
  previous generation becomes the current one again and the same rules replace the new
  replicas).
- **autoscale**: ``desired_replicas`` over the load history (a pure function).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from gpufleet.core.cluster_state import ClusterState
from gpufleet.core.commands import (
    Command,
    ReplicaAdded,
    RouteBackend,
    Routes,
    ServiceEvent,
    ServiceRecord,
    SetTimer,
    Transition,
)
from gpufleet.core.errors import ControllerError, UnknownObject
from gpufleet.core.events import (
    JobCancelled,
    JobSubmitted,
    ReplicaProbe,
    ServiceCreated,
    ServiceDeleted,
    ServiceLoad,
    ServiceScaled,
    ServiceUpdated,
)
from gpufleet.core.jobmaster import JobMaster
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.service import Autoscale, Probe, ServiceSpec

S = JobState
TIMER = "service"  # SetTimer/TimerFired kind; job_id carries the service's name
# a replica without a fixed port gets one of these, the lowest no other replica on its node
# holds: below the batch step daemons' (27500) and MASTER_PORT's (29500) ranges
REPLICA_PORT_BASE = 20000
REPLICA_PORT_SPAN = 7500
SUSPECT_PORT_S = 600.0  # how long a port a replica died on before it was ready is avoided
MAX_LOAD_SAMPLES = 4096


# ----- the autoscaler: a pure function ---------------------------------------------------------


def wanted(qps: float, policy: Autoscale) -> int:
    """The count one measured rate asks for: ceil(rate / target), within min and max; any
    request at all asks for one (a rate too small to count after the float tolerance once
    scaled a service up from zero and, within the down delay, back to zero: a flap)."""
    n = max(1, math.ceil(qps / policy.target_qps_per_replica - 1e-9)) if qps > 0 else 0
    return max(policy.min, min(policy.max, n))


def _held(samples: Sequence[tuple[float, float]], since: float) -> list[float] | None:
    """The rates in effect from ``since`` on (the sample in effect then and every later one);
    None when the history does not reach back that far."""
    start = None
    for i, (t, _) in enumerate(samples):
        if t <= since:
            start = i
        else:
            break
    return None if start is None else [q for _, q in samples[start:]]


def desired_replicas(
    samples: Sequence[tuple[float, float]], current: int, policy: Autoscale, now: float
) -> int:
    """How many replicas, given the rate samples ``(time, qps)`` (in time order) up to ``now``.

    Up to the least count the rate asked for throughout the last ``upscale_delay_s`` when that
    is above ``current``; down to the most it asked for throughout the last
    ``downscale_delay_s`` when that is below (so a change holds for at least the other delay:
    no flapping); always within [min, max]; from zero at once at the first request (as SkyServe:
    a service with no replica has nothing to wait for). Without enough history, no change."""
    if not policy.min <= current <= policy.max:
        return max(policy.min, min(policy.max, current))
    seen = [s for s in samples if s[0] <= now]
    if not seen:
        return current
    if current == 0 and seen[-1][1] > 0:
        return max(1, wanted(seen[-1][1], policy))
    up = _held(seen, now - policy.upscale_delay_s)
    if up is not None:
        n = min(wanted(q, policy) for q in up)
        if n > current:
            return n
    down = _held(seen, now - policy.downscale_delay_s)
    if down is not None:
        n = max(wanted(q, policy) for q in down)
        if n < current:
            return n
    return current


# ----- what the store holds --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RestoredReplica:
    job_id: str
    generation: int
    index: int
    port: int  # 0: none assigned (not started)
    created: float
    ready_since: float | None = None
    stopping: bool = False
    failed: str = ""  # why it was killed as failed (liveness), "" otherwise


@dataclass(frozen=True, slots=True)
class RestoredService:
    """A service as the store gives it back at restart (its replica jobs are ``RestoredJob``s
    as any job's). ``specs``: each generation still in use (the current one, the rollback
    target, and any a live replica has)."""

    specs: tuple[tuple[int, ServiceSpec], ...]
    generation: int
    desired: int
    replicas: tuple[RestoredReplica, ...] = ()
    previous: int | None = None  # the rollback target while a rollout runs
    rollout_since: float | None = None
    progress_at: float = 0.0
    rollout_failures: int = 0
    failures: int = 0  # failures in a row (the back-off's count)
    not_before: float = 0.0  # no replacement before
    node_failures: tuple[tuple[str, int], ...] = ()
    next_index: int = 1
    deleting: bool = False
    note: str = ""  # the last rollback, for people

    @property
    def name(self) -> str:
        return dict(self.specs)[self.generation].name


# ----- in memory ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Replica:
    job_id: str
    generation: int
    index: int
    created: float
    port: int = 0
    node: str = ""
    ready_since: float | None = None
    stopping: bool = False  # the service stops it: no failure
    failed: str = ""  # killed for failing liveness: a failure once it has ended

    @property
    def live(self) -> bool:
        return not self.stopping and not self.failed


@dataclass(slots=True)
class Service:
    specs: dict[int, ServiceSpec]
    generation: int
    desired: int
    replicas: dict[str, Replica] = field(default_factory=dict)
    previous: int | None = None
    rollout_since: float | None = None
    progress_at: float = 0.0
    rollout_failures: int = 0
    failures: int = 0
    not_before: float = 0.0
    node_failures: dict[str, int] = field(default_factory=dict)
    next_index: int = 1
    deleting: bool = False
    load: list[tuple[float, float]] = field(default_factory=list)
    note: str = ""
    routes: tuple[RouteBackend, ...] | None = None  # the last sent (None: never, since start)
    wakes: set[float] = field(default_factory=set)  # the timers set and not yet due

    @property
    def spec(self) -> ServiceSpec:
        return self.specs[self.generation]

    @property
    def name(self) -> str:
        return self.spec.name

    def record(self) -> RestoredService:
        return RestoredService(
            tuple(sorted(self.specs.items())),
            self.generation,
            self.desired,
            tuple(
                RestoredReplica(
                    r.job_id,
                    r.generation,
                    r.index,
                    r.port,
                    r.created,
                    r.ready_since,
                    r.stopping,
                    r.failed,
                )
                for r in sorted(self.replicas.values(), key=lambda r: r.index)
            ),
            self.previous,
            self.rollout_since,
            self.progress_at,
            self.rollout_failures,
            self.failures,
            self.not_before,
            tuple(sorted(self.node_failures.items())),
            self.next_index,
            self.deleting,
            self.note,
        )


def _template_changed(a: ServiceSpec, b: ServiceSpec) -> bool:
    return (a.replica, a.port, a.readiness, a.liveness) != (
        b.replica,
        b.port,
        b.readiness,
        b.liveness,
    )


def _on(r: Replica) -> str:
    return f"{r.job_id} on {r.node}:{r.port}" if r.node else r.job_id


class ServiceMaster:
    def __init__(self, state: ClusterState, jobmaster: JobMaster) -> None:
        self.state = state
        self.jobmaster = jobmaster
        self.services: dict[str, Service] = {}
        self._replica_of: dict[str, str] = {}  # replica job id → service name
        self._dirty: set[str] = set()
        self._rekill: set[str] = set()  # restored replicas being stopped: kill them again
        # (node, port) → until when: a replica there ended by itself before it was ever
        # ready (most often: something else holds the port). Its successors get another port
        # while one is free; a hint, not state (a restart forgets it)
        self._suspect: dict[tuple[str, int], float] = {}

    # ----- reading (the server's wiring asks these) ----------------------------------------

    def service_of(self, job_id: str) -> str | None:
        return self._replica_of.get(job_id)

    def replica(self, job_id: str) -> Replica | None:
        name = self._replica_of.get(job_id)
        return None if name is None else self.services[name].replicas.get(job_id)

    def replica_port(self, job_id: str) -> int | None:
        """The port the replica's process listens on: its ``$PORT`` at launch."""
        r = self.replica(job_id)
        return r.port if r is not None and r.port else None

    def probes(self, job_id: str) -> tuple[Probe | None, Probe | None, int] | None:
        """(readiness, liveness, port) of the replica's generation: what its agent's probe
        runner runs (a probe's own port, else the replica's); None for no replica."""
        name = self._replica_of.get(job_id)
        if name is None:
            return None
        svc = self.services[name]
        r = svc.replicas[job_id]
        spec = svc.specs[r.generation]
        return spec.readiness, spec.liveness, r.port

    def ready(self, name: str) -> tuple[RouteBackend, ...]:
        return self._backends(self.services[name])

    # ----- restart -------------------------------------------------------------------------

    def restore(self, services: Iterable[RestoredService]) -> None:
        """After the JobMaster's restore: the services as the store holds them. Routes go out
        again at the first reconcile (a tick)."""
        for rs in services:
            svc = Service(
                dict(rs.specs),
                rs.generation,
                rs.desired,
                previous=rs.previous,
                rollout_since=rs.rollout_since,
                progress_at=rs.progress_at,
                rollout_failures=rs.rollout_failures,
                failures=rs.failures,
                not_before=rs.not_before,
                node_failures=dict(rs.node_failures),
                next_index=rs.next_index,
                deleting=rs.deleting,
                note=rs.note,
            )
            for rr in rs.replicas:
                rec = self.jobmaster.jobs.get(rr.job_id)
                if rec is None or rec.job.finished:
                    continue  # it ended before the store caught up: the reconcile replaces it
                r = Replica(rr.job_id, rr.generation, rr.index, rr.created, rr.port)
                r.ready_since, r.stopping, r.failed = rr.ready_since, rr.stopping, rr.failed
                if rec.job.state in (S.STARTING, S.RUNNING) and rec.allocation:
                    r.node = rec.allocation[0].node
                svc.replicas[r.job_id] = r
                self._replica_of[r.job_id] = svc.name
                if not r.live:  # its Kill may have been lost with the old process
                    self._rekill.add(r.job_id)
            self.services[svc.name] = svc

    # ----- events --------------------------------------------------------------------------

    def create(self, ev: ServiceCreated, now: float, out: list[Command]) -> None:
        spec = ev.spec
        if spec.name in self.services:
            raise ControllerError(f"service {spec.name} exists already")
        svc = Service({1: spec}, 1, spec.initial_replicas, next_index=max(1, ev.first_index))
        self.services[spec.name] = svc
        out.append(ServiceEvent(spec.name, "created", now, f"{svc.desired} replica(s)"))
        self._reconcile(svc, now, out)

    def update(self, ev: ServiceUpdated, now: float, out: list[Command]) -> None:
        svc = self._get(ev.spec.name)
        if svc.deleting:
            raise ControllerError(f"service {svc.name} is being deleted")
        new, old = ev.spec, svc.spec
        a = new.autoscale
        svc.desired = new.replicas if a is None else max(a.min, min(a.max, svc.desired))
        self._mark(svc)
        if not _template_changed(new, old):
            svc.specs[svc.generation] = new  # counts and settings: at once, no rollout
            out.append(ServiceEvent(svc.name, "updated", now, "settings (no new replicas)"))
        else:
            gen = max(svc.specs) + 1
            if svc.rollout_since is None:
                svc.previous = svc.generation  # the last generation that rolled out
            svc.specs[gen] = new
            svc.generation = gen
            svc.rollout_since = svc.progress_at = now
            svc.rollout_failures = 0
            svc.failures, svc.not_before = 0, 0.0  # the new replicas start without back-off
            out.append(ServiceEvent(svc.name, "rollout", now, f"generation {gen}"))
            self._wake(svc, now + new.rollout.progress_deadline_s, now, out)
            self._mark(svc)
        self._prune_specs(svc)
        self._reconcile(svc, now, out)

    def scale(self, ev: ServiceScaled, now: float, out: list[Command]) -> None:
        svc = self._get(ev.name)
        a = svc.spec.autoscale
        lo, hi = (0, 1 << 20) if a is None else (a.min, a.max)
        if not lo <= ev.replicas <= hi:
            raise ControllerError(
                f"service {svc.name}: {ev.replicas} replicas is outside its {lo}-{hi}"
                if a is not None
                else f"service {svc.name}: replicas must be at least 0, got {ev.replicas}"
            )
        if svc.deleting:
            raise ControllerError(f"service {svc.name} is being deleted")
        if ev.replicas != svc.desired:
            out.append(ServiceEvent(svc.name, "scaled", now, f"{svc.desired} → {ev.replicas}"))
            svc.desired = ev.replicas
        self._mark(svc)
        if a is None:
            svc.specs[svc.generation] = replace(svc.spec, replicas=ev.replicas)
        self._reconcile(svc, now, out)

    def delete(self, ev: ServiceDeleted, now: float, out: list[Command]) -> None:
        svc = self._get(ev.name)
        if not svc.deleting:
            svc.deleting = True
            out.append(ServiceEvent(svc.name, "deleting", now))
            self._mark(svc)
        self._reconcile(svc, now, out)

    def probe(self, ev: ReplicaProbe, now: float, out: list[Command]) -> None:
        if ev.kind not in ("readiness", "liveness"):
            raise ControllerError(f"unknown probe kind {ev.kind!r} (readiness, liveness)")
        name = self._replica_of.get(ev.job_id)
        rec = self.jobmaster.jobs.get(ev.job_id)
        if name is None or rec is None or rec.job.attempt != ev.attempt:
            return  # not a replica, or another attempt's report: it changes nothing
        svc = self.services[name]
        r = svc.replicas[ev.job_id]
        if not r.live or rec.job.state is not S.RUNNING:
            return
        if ev.kind == "liveness":
            if ev.ok:
                return
            why = ev.why or "liveness probe failed"
            r.failed = f"liveness: {why}"
            self._mark(svc)
            self._routes(svc, out)  # out of the routes before the Kill goes out
            self.jobmaster.cancel(JobCancelled(r.job_id, r.failed), now, out)
            return
        if ev.ok and r.ready_since is None:
            r.ready_since = now
            self._progress(svc, r, now, out)
            out.append(ServiceEvent(svc.name, "replica ready", now, _on(r)))
        elif not ev.ok and r.ready_since is not None:
            r.ready_since = None
            why = f"{_on(r)}: {ev.why or 'readiness probe failed'}; out of the routes"
            out.append(ServiceEvent(svc.name, "replica not ready", now, why))
        self._mark(svc)
        self._reconcile(svc, now, out)

    def load(self, ev: ServiceLoad, now: float, out: list[Command]) -> None:
        if not math.isfinite(ev.qps) or ev.qps < 0 or not math.isfinite(ev.now):
            raise ControllerError(f"service load: a rate must be finite and >= 0, got {ev.qps}")
        svc = self._get(ev.name)
        a = svc.spec.autoscale
        if svc.load and ev.now < svc.load[-1][0]:
            return  # older than what was measured already
        svc.load.append((ev.now, ev.qps))
        if a is None or svc.deleting:
            del svc.load[:-1]
            return
        keep = max(a.upscale_delay_s, a.downscale_delay_s)
        first = 0
        while first + 1 < len(svc.load) and svc.load[first + 1][0] <= now - keep:
            first += 1
        del svc.load[: max(first, len(svc.load) - MAX_LOAD_SAMPLES)]
        n = desired_replicas(svc.load, svc.desired, a, now)
        if n != svc.desired:
            out.append(
                ServiceEvent(svc.name, "scaled", now, f"{svc.desired} → {n} at {ev.qps:g} req/s")
            )
            svc.desired = n
            self._mark(svc)  # the count (not the load history: after a restart, the
            # autoscaler waits for a delay's worth of new samples, which is safe)
            self._reconcile(svc, now, out)

    def timer(self, name: str, now: float, out: list[Command]) -> None:
        svc = self.services.get(name)
        if svc is not None:
            self._reconcile(svc, now, out)

    def tick(self, now: float, out: list[Command]) -> None:
        for svc in list(self.services.values()):
            self._reconcile(svc, now, out)

    def job_moved(self, t: Transition, now: float, out: list[Command]) -> None:
        """A replica job's transition (the Controller hands on every Transition it makes)."""
        name = self._replica_of.get(t.job_id)
        if name is None:
            return
        svc = self.services[name]
        r = svc.replicas.get(t.job_id)
        if r is None:
            return
        rec = self.jobmaster.jobs[t.job_id]
        if t.new is S.STARTING:
            r.node = rec.allocation[0].node if rec.allocation else ""
            r.ready_since = None
            spec = svc.specs[r.generation]
            r.port = spec.port or self._free_port(r.node, r.job_id, now)
            self._mark(svc)
        elif t.new is S.RUNNING:
            if svc.specs[r.generation].readiness is None and r.live:
                r.ready_since = now
                self._progress(svc, r, now, out)
                self._mark(svc)
        elif t.new in (S.PENDING, S.PREEMPTED, S.NODE_LOST):
            if r.ready_since is not None or r.node:
                r.ready_since, r.node = None, ""
                self._mark(svc)
        elif rec.job.finished:
            self._ended(svc, r, t, now, out)
        self._reconcile(svc, now, out)

    # ----- the rules -----------------------------------------------------------------------

    def _ended(
        self, svc: Service, r: Replica, t: Transition, now: float, out: list[Command]
    ) -> None:
        del svc.replicas[r.job_id]
        del self._replica_of[r.job_id]
        self._mark(svc)
        self._prune_specs(svc)
        if r.stopping:
            return
        # a failure: the replica ended by itself, failed liveness, or someone cancelled it
        spec = svc.specs[r.generation]
        b = spec.restart
        ran_fine = r.ready_since is not None and now - r.ready_since >= b.reset_s
        node = self.jobmaster.ran_on(r.job_id, self.jobmaster.jobs[r.job_id].job.attempt, 0)
        svc.failures = 1 if ran_fine else svc.failures + 1
        if node:
            svc.node_failures[node] = 1 if ran_fine else svc.node_failures.get(node, 0) + 1
            if r.ready_since is None and r.port and not spec.port:
                self._suspect[(node, r.port)] = now + SUSPECT_PORT_S
        delay = b.delay(svc.failures)
        svc.not_before = max(svc.not_before, now + delay)
        why = r.failed or t.why or t.new.value
        out.append(
            ServiceEvent(
                svc.name,
                "replica failed",
                now,
                f"{r.job_id}{f' on {node}' if node else ''}: {why}; a new replica in "
                f"{svc.not_before - now:g} s or later (failure {svc.failures} in a row)",
            )
        )
        self._wake(svc, svc.not_before, now, out)
        if svc.rollout_since is not None and r.generation == svc.generation:
            svc.rollout_failures += 1

    def _progress(self, svc: Service, r: Replica, now: float, out: list[Command]) -> None:
        if svc.rollout_since is not None and r.generation == svc.generation:
            svc.progress_at = now
            self._wake(svc, now + svc.spec.rollout.progress_deadline_s, now, out)

    def _reconcile(self, svc: Service, now: float, out: list[Command]) -> None:
        if self._rekill:
            for r in [r for r in svc.replicas.values() if r.job_id in self._rekill]:
                self._rekill.discard(r.job_id)
                rec = self.jobmaster.jobs.get(r.job_id)
                if rec is not None and not rec.job.finished:
                    why = r.failed or ("service deleted" if svc.deleting else "stopped")
                    self.jobmaster.cancel(JobCancelled(r.job_id, why), now, out)
        if svc.deleting:
            live = [r for r in svc.replicas.values() if not r.stopping]
            self._stop(svc, live, "service deleted", now, out)
            if not svc.replicas:
                if svc.routes != ():
                    out.append(Routes(svc.name, ()))
                del self.services[svc.name]
                self._dirty.add(svc.name)
                out.append(ServiceEvent(svc.name, "removed", now))
            return
        self._check_rollout(svc, now, out)
        desired, gen = svc.desired, svc.generation
        live = [r for r in svc.replicas.values() if r.live]
        new = [r for r in live if r.generation == gen]
        old = [r for r in live if r.generation != gen]
        victims: list[Replica] = []
        if len(new) > desired:
            extra = _surplus_order(new)[: len(new) - desired]
            victims += extra
            new = [r for r in new if r not in extra]
        if old:
            surge, unavailable = svc.spec.rollout.limits(desired)
            victims += [r for r in old if r.ready_since is None]  # they serve nothing
            old = [r for r in old if r.ready_since is not None]
            ready = len(old) + sum(r.ready_since is not None for r in new)
            removable = max(0, ready - (desired - unavailable))
            gone = _surplus_order(old)[:removable]
            victims += gone
            old = [r for r in old if r not in gone]
            create = min(desired - len(new), desired + surge - len(new) - len(old))
        else:
            create = desired - len(new)
        self._stop(svc, victims, "", now, out)
        if create > 0:
            if now < svc.not_before:
                self._wake(svc, svc.not_before, now, out)
            else:
                for _ in range(create):
                    self._add(svc, now, out)
        done = not old and len(new) >= desired and all(r.ready_since is not None for r in new)
        if svc.rollout_since is not None and done:
            svc.rollout_since, svc.previous = None, None
            svc.rollout_failures = 0
            self._prune_specs(svc)
            self._mark(svc)
            out.append(ServiceEvent(svc.name, "rolled out", now, f"generation {gen}"))
        self._routes(svc, out)

    def _check_rollout(self, svc: Service, now: float, out: list[Command]) -> None:
        if svc.rollout_since is None or svc.previous is None:
            return
        r = svc.spec.rollout
        why = ""
        if svc.rollout_failures >= r.max_failures:
            why = f"new replicas failed {svc.rollout_failures} times"
        elif now >= svc.progress_at + r.progress_deadline_s:
            why = (
                f"no new replica became ready within the progress deadline "
                f"({r.progress_deadline_s:g} s)"
            )
        if not why:
            return
        bad = svc.generation
        svc.generation = svc.previous
        svc.previous = None
        svc.rollout_since = svc.progress_at = now  # the way back is a rollout too (no rollback)
        svc.rollout_failures = 0
        svc.failures, svc.not_before = 0, 0.0
        a = svc.spec.autoscale
        if a is None:
            svc.desired = svc.spec.replicas
        svc.note = f"generation {bad} rolled back to {svc.generation}: {why}"
        self._mark(svc)
        out.append(ServiceEvent(svc.name, "rolled back", now, svc.note))

    def _add(self, svc: Service, now: float, out: list[Command]) -> None:
        i = svc.next_index
        svc.next_index += 1
        job_id = f"{svc.name}.{i}"
        while job_id in self.jobmaster.jobs:  # a stored job's id (never, by the '.'; still)
            i = svc.next_index
            svc.next_index += 1
            job_id = f"{svc.name}.{i}"
        spec = self._replica_spec(svc)
        r = Replica(job_id, svc.generation, i, now)
        svc.replicas[job_id] = r
        self._replica_of[job_id] = svc.name
        self._mark(svc)
        out.append(ReplicaAdded(svc.name, job_id, svc.generation, spec))
        self.jobmaster.submit(JobSubmitted(job_id, spec, now), now, out)

    def _replica_spec(self, svc: Service) -> JobSpec:
        s = svc.spec
        t = replace(
            s.replica, name=s.name, workers=1, time_limit_s=None, max_retries=0, batch=False
        )
        avoid = sorted(n for n, k in svc.node_failures.items() if k >= s.restart.avoid_node_after)
        if avoid:
            t = replace(t, exclude=tuple(dict.fromkeys((*t.exclude, *avoid))))
        return t

    def _stop(
        self, svc: Service, victims: list[Replica], why: str, now: float, out: list[Command]
    ) -> None:
        if not victims:
            return
        for r in victims:
            r.stopping = True
        self._mark(svc)
        self._routes(svc, out)  # out of the routes before the Kills go out
        for r in victims:
            rec = self.jobmaster.jobs.get(r.job_id)
            if rec is not None and not rec.job.finished:
                why_r = why or (
                    "replaced by the rollout" if r.generation != svc.generation else "scaled down"
                )
                self.jobmaster.cancel(JobCancelled(r.job_id, why_r), now, out)

    def _routes(self, svc: Service, out: list[Command]) -> None:
        b = self._backends(svc) if not svc.deleting else ()
        if b != svc.routes:
            svc.routes = b
            out.append(Routes(svc.name, b))

    def _backends(self, svc: Service) -> tuple[RouteBackend, ...]:
        out = []
        for r in svc.replicas.values():
            rec = self.jobmaster.jobs.get(r.job_id)
            if (
                r.live
                and r.ready_since is not None
                and rec is not None
                and rec.job.state is S.RUNNING
                and r.node
                and r.port
            ):
                out.append(RouteBackend(r.job_id, r.node, r.port))
        return tuple(sorted(out, key=lambda b: (b.node, b.port, b.job_id)))

    def _free_port(self, node: str, job_id: str, now: float) -> int:
        """The lowest port no other replica in the cluster holds, else the lowest none on
        ``node`` holds: only a node's own must differ, but nodes may share a host (a local
        cluster, agents in containers on the host's network), where two replicas of one port
        on two nodes would collide; the core does not know which nodes share one. A port
        where a replica on ``node`` recently died before it was ready is taken last."""
        for k in [k for k, until in self._suspect.items() if until <= now]:
            del self._suspect[k]
        suspect = {p for (n, p) in self._suspect if n == node}
        on_node: set[int] = set()
        anywhere: set[int] = set()
        for svc in self.services.values():
            for r in svc.replicas.values():
                if r.port and r.job_id != job_id:
                    anywhere.add(r.port)
                    if r.node == node:
                        on_node.add(r.port)
        ports = range(REPLICA_PORT_BASE, REPLICA_PORT_BASE + REPLICA_PORT_SPAN)
        for used in (anywhere | suspect, on_node | suspect, on_node):
            for p in ports:
                if p not in used:
                    return p
        raise ControllerError(f"node {node}: every replica port is taken")

    def _prune_specs(self, svc: Service) -> None:
        keep = {svc.generation, *(r.generation for r in svc.replicas.values())}
        if svc.previous is not None:
            keep.add(svc.previous)
        for g in [g for g in svc.specs if g not in keep]:
            del svc.specs[g]

    def _get(self, name: str) -> Service:
        svc = self.services.get(name)
        if svc is None:
            raise UnknownObject(f"unknown service {name}")
        return svc

    def _wake(self, svc: Service, at: float, now: float, out: list[Command]) -> None:
        """A reconcile at ``at`` (once per instant: the same wake-up is not asked twice)."""
        svc.wakes = {t for t in svc.wakes if t > now}
        if at not in svc.wakes:
            svc.wakes.add(at)
            out.append(SetTimer(at, TIMER, svc.name))

    def _mark(self, svc: Service) -> None:
        self._dirty.add(svc.name)

    def flush(self, out: list[Command]) -> None:
        """A ``ServiceRecord`` for each service that changed since the last flush."""
        for name in sorted(self._dirty):
            svc = self.services.get(name)
            out.append(ServiceRecord(name, None if svc is None else svc.record()))
        self._dirty.clear()


def _surplus_order(replicas: list[Replica]) -> list[Replica]:
    """Which go first: not-ready ones, then the newest."""
    return sorted(replicas, key=lambda r: (r.ready_since is not None, -r.index))
