"""The rules that keep a service's replicas alive, ready, scaled and rolled out.

``ReplicaRules`` holds the services and their replicas and, in ``_reconcile`` (idempotent: a
timer or a tick may run it at any time), applies the rules the package's docstring lists; the
``ServiceMaster`` (``master``) turns events into changes and then asks for a reconcile."""

from __future__ import annotations

from dataclasses import replace

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
from gpufleet.core.events import JobCancelled, JobSubmitted
from gpufleet.core.jobmaster import JobMaster
from gpufleet.core.services.records import (
    REPLICA_PORT_BASE,
    REPLICA_PORT_SPAN,
    SUSPECT_PORT_S,
    TIMER,
    Replica,
    Service,
    surplus_order,
)
from gpufleet.model.job import JobSpec, JobState
from gpufleet.scheduler import filters

S = JobState


class ReplicaRules:
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
        # the ports replicas are given ($PORT): the controller's --replica-ports
        self.replica_ports = range(REPLICA_PORT_BASE, REPLICA_PORT_BASE + REPLICA_PORT_SPAN)

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
        new = [r for r in live if r.generation == gen and not r.moving]
        old = [r for r in live if r.generation != gen]
        self._moved_out(svc, [r for r in live if r.moving], new, now, out)
        victims: list[Replica] = []
        if len(new) > desired:
            extra = surplus_order(new)[: len(new) - desired]
            victims += extra
            new = [r for r in new if r not in extra]
        if old:
            surge, unavailable = svc.spec.rollout.limits(desired)
            victims += [r for r in old if r.ready_since is None]  # they serve nothing
            old = [r for r in old if r.ready_since is not None]
            ready = len(old) + sum(r.ready_since is not None for r in new)
            removable = max(0, ready - (desired - unavailable))
            gone = surplus_order(old)[:removable]
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

    def _moved_out(
        self,
        svc: Service,
        moving: list[Replica],
        new: list[Replica],
        now: float,
        out: list[Command],
    ) -> None:
        """Stop the replicas being moved (make-before-break) once the ready replicas not
        moving hold the desired count (their replacements are ready), or, so that a move never
        blocks for ever, once the rollout's progress deadline has passed."""
        if not moving:
            return
        ready = sum(r.ready_since is not None for r in new)
        deadline = svc.spec.rollout.progress_deadline_s
        late = [r for r in moving if (r.moving_since or now) + deadline <= now]
        if ready >= svc.desired:
            why = "moved: its replacement is ready"
            gone = moving
        elif late:
            why = f"moved: no replacement was ready within {deadline:g} s"
            gone = late
        else:
            self._wake(svc, min((r.moving_since or now) for r in moving) + deadline, now, out)
            return
        for r in gone:
            out.append(ServiceEvent(svc.name, "replica moved", now, f"{r.job_id}: {why}"))
        self._stop(svc, gone, why, now, out)

    def move(
        self, job_id: str, avoid: tuple[str, ...], why: str, now: float, out: list[Command]
    ) -> bool:
        """Make-before-break: replica ``job_id``, chosen to be moved off ``avoid`` (a
        defragmentation move), serves on while a replacement starts elsewhere and becomes
        ready, then stops. False when it cannot be so moved (not a live replica of the
        current generation, a rollout or a deletion under way): the caller preempts it."""
        name = self._replica_of.get(job_id)
        svc = None if name is None else self.services.get(name)
        r = None if svc is None else svc.replicas.get(job_id)
        rec = self.jobmaster.jobs.get(job_id)
        if (
            svc is None
            or r is None
            or rec is None
            or not r.live
            or r.moving
            or r.generation != svc.generation
            or svc.rollout_since is not None
            or svc.deleting
            or rec.job.state is not S.RUNNING
        ):
            return False
        r.moving = tuple(dict.fromkeys((*avoid, r.node)))
        r.moving_since = now
        self._mark(svc)
        out.append(
            ServiceEvent(
                svc.name,
                "replica moving",
                now,
                f"{job_id} off {r.node} ({why}): a replacement starts elsewhere and is ready "
                "before it stops",
            )
        )
        self.jobmaster.leaving(rec, now)
        self._reconcile(svc, now, out)
        return True

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
        rec = self.jobmaster.jobs.get(job_id)
        if rec is not None:
            rec.replica = True

    def _replica_spec(self, svc: Service) -> JobSpec:
        s = svc.spec
        t = replace(
            s.replica, name=s.name, workers=1, time_limit_s=None, max_retries=0, batch=False
        )
        avoid = sorted(n for n, k in svc.node_failures.items() if k >= s.restart.avoid_node_after)
        # the nodes replicas are being moved off (make-before-break): never back onto them
        avoid += sorted({n for r in svc.replicas.values() if r.live for n in r.moving})
        if avoid:
            away = replace(t, exclude=tuple(dict.fromkeys((*t.exclude, *avoid))))
            # a preference, never a ban: where the failing nodes are all the replica may run
            # on (its own -x, -w, -C), it goes back to them, paced by the back-off, instead of
            # waiting for ever as NeverSchedulable
            if filters.never(away, [n.view() for n in self.state.nodes.values()]) is None:
                t = away
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
        ports = self.replica_ports
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
