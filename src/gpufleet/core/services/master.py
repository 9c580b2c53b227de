"""The ServiceMaster: the events of services (create, update, scale, delete, probes, load,
timers, and the transitions of their replica jobs) and what the server reads of them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from gpufleet.core.commands import Command, RouteBackend, ServiceEvent, Transition
from gpufleet.core.errors import ControllerError
from gpufleet.core.events import (
    JobCancelled,
    ReplicaProbe,
    ServiceCreated,
    ServiceDeleted,
    ServiceLoad,
    ServiceScaled,
    ServiceUpdated,
)
from gpufleet.core.services.autoscale import desired_replicas
from gpufleet.core.services.records import (
    MAX_LOAD_SAMPLES,
    Replica,
    RestoredService,
    Service,
    on_where,
    template_changed,
)
from gpufleet.core.services.rules import ReplicaRules
from gpufleet.model.job import JobState
from gpufleet.model.service import Probe

S = JobState


class ServiceMaster(ReplicaRules):
    """Every service's replicas: what the server's wiring reads, the restore after a restart,
    and the events (each ends in a reconcile of the service it changed)."""

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
                rec.replica = True
                if rec.job.id in self.state.running:  # its view, made before it was known
                    self.state.restate(rec.running_view())
                r = Replica(rr.job_id, rr.generation, rr.index, rr.created, rr.port)
                r.ready_since, r.stopping, r.failed = rr.ready_since, rr.stopping, rr.failed
                r.moving, r.moving_since = rr.moving, rr.moving_since
                if r.moving and r.live and rec.job.state in (S.STARTING, S.RUNNING):
                    self.jobmaster.leaving(rec, rr.moving_since or 0.0)  # serves on, leaving
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
        svc.active_at = now
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
        if not template_changed(new, old):
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
            what = "resumed" if svc.spec.desktop and svc.desired == 0 else "scaled"
            out.append(ServiceEvent(svc.name, what, now, f"{svc.desired} → {ev.replicas}"))
            svc.desired = ev.replicas
            svc.active_at = now  # a resumed desktop's idle time starts again
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
            out.append(ServiceEvent(svc.name, "replica ready", now, on_where(r)))
        elif not ev.ok and r.ready_since is not None:
            r.ready_since = None
            why = f"{on_where(r)}: {ev.why or 'readiness probe failed'}; out of the routes"
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
        if svc.spec.desktop is not None and not svc.deleting:
            self._idle(svc, ev, now, out)
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

    def _idle(self, svc: Service, ev: ServiceLoad, now: float, out: list[Command]) -> None:
        """A desktop in use (a request, an open connection) stays; one ready and unused for
        its ``idle_suspend_s`` is scaled to 0: suspended, its GPU freed, its endpoint kept."""
        desktop = svc.spec.desktop
        assert desktop is not None
        up = any(r.live and r.ready_since is not None for r in svc.replicas.values())
        if ev.qps > 0 or ev.connections > 0 or svc.active_at is None or not up:
            # in use, or not up yet (starting, resuming): its idle time has not begun
            svc.active_at = max(ev.now, svc.active_at or ev.now)
            return
        idle = ev.now - svc.active_at
        if svc.desired > 0 and idle >= desktop.idle_suspend_s:
            why = f"idle {idle:.0f} s (limit {desktop.idle_suspend_s:g} s)"
            out.append(ServiceEvent(svc.name, "suspended", now, why))
            svc.desired = 0
            svc.specs[svc.generation] = replace(svc.spec, replicas=0)
            self._mark(svc)
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
