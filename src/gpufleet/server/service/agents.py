"""The agents' side: registration (and its reconcile), heartbeats and the leases they renew,
reports of what tasks did, and the check that an agent speaks only for its own node. Leases
are timed by the core's liveness timers (``core/liveness.py``): this module renews them, the
driver declares the losses."""

from __future__ import annotations

import time
from collections.abc import Sequence

from gpufleet.api import schemas as s
from gpufleet.core.events import (
    Event,
    NodeHealReport,
    NodeHealth,
    NodeRegistered,
    ReplicaProbe,
    TaskCheckpointed,
    TaskExited,
    TaskFenced,
    TaskStarted,
)
from gpufleet.model.cluster import NodeSpec
from gpufleet.server.refusals import Conflict, Forbidden
from gpufleet.server.service.identity import Identity
from gpufleet.server.service.links import NodeLink
from gpufleet.server.store import NodeRecord


class Agents(Identity):
    def check_own(self, node: str, field: str, events: Sequence[s.AgentEvent | s.TaskRef]) -> None:
        """403 unless every event (or task said to run) is about a rank placed on ``node``: an
        agent speaks only for its own node. One about an attempt that is not the job's current
        one (or a job the controller does not hold) changes nothing in the core, so it passes:
        a node may well report the end of an attempt that was requeued meanwhile. Ranks and
        attempts are never negative here: the wire schema bounds them (``SmallCount``)."""
        for i, e in enumerate(events):
            if isinstance(e, s.AgentEvent) and e.kind == "heal":
                continue  # about the node itself, not a rank
            placed = self.ctrl.placed_elsewhere(e.job, e.attempt, e.rank, node)
            if placed is not None:
                raise Forbidden(
                    f"{field}[{i}]: rank {e.rank} of job {e.job} (attempt {e.attempt}) runs on "
                    f"node {placed}, not {node}: an agent reports only for its own node"
                )

    async def register(self, req: s.AgentRegister, spec: NodeSpec) -> s.RegisterResult:
        self.down.check()  # before its link is replaced: it needs the store in any case
        self.check_own(req.node, "events", req.events)
        self.check_own(req.node, "running", req.running)
        self.check_own(req.node, "stopping", req.stopping)
        req.events = self.take_metrics(req.events)
        now = self.clock.now()
        link = NodeLink(
            req.address,
            now,
            driver_version=req.driver_version,
            cuda_version=req.cuda_version,
            gpu_info=list(req.gpus),
            registered=False,
            # wall-clock nanoseconds, so that it rises across a restart of ours as well
            epoch=max(time.time_ns(), self._last_epoch + 1),
        )
        self._last_epoch = link.epoch
        old, old_lease = self.links.get(req.node), self.liveness.renewed_at(req.node)
        self.links[req.node] = link
        self._renew(req.node)
        self.accounts_at_register(req.node, req.runs_as_owner)
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
                    ended=tuple((e.job, e.attempt, e.rank) for e in req.ended),
                    stopping=tuple((r.job, r.attempt, r.rank) for r in req.stopping),
                    events=(
                        *self._ended_unknown(req),
                        *(
                            ev
                            for e in req.events
                            # probe verdicts, heal reports and checkpoints (their ages
                            # counted at the registration) follow the reconcile
                            if not isinstance(
                                ev := task_event(req.node, e),
                                ReplicaProbe | TaskCheckpointed | NodeHealReport,
                            )
                        ),
                    ),
                )
            )
        except BaseException:
            # a registration that did not commit changed nothing: the link before it (and
            # the lease its heartbeats keep, ``rejoining``) stands
            if old is not None and self.links.get(req.node) is link:
                self.links[req.node] = old
                self.liveness.restore(req.node, old_lease)
            raise
        link.registered = True  # reconciled: its heartbeats and long-polls are taken now
        self._renew(req.node)  # the registration's answer renews the lease
        for e in req.events:  # after the reconcile: of the tasks it still runs
            if e.kind in ("probe", "heal", "checkpoint"):
                self.post(task_event(req.node, e))
        return s.RegisterResult(
            lease_s=self.lease_s,
            heartbeat_s=self.heartbeat_s,
            fence_grace_s=self.fence_grace_s,
            outage_tolerance_s=self.outage_tolerance_s,
            epoch=link.epoch,
            term=self.outbox.term,
        )

    def _ended_unknown(self, req: s.AgentRegister) -> list[TaskExited | TaskFenced]:
        """The exits the agent remembers of ranks we hold running on its node, beyond those it
        sends as new: we missed them (our store was restored from a backup taken before
        them), and they are exits, not lost ranks to run again."""
        sent = {(e.job, e.attempt, e.rank) for e in req.events}
        out: list[TaskExited | TaskFenced] = []
        for e in req.ended:
            if e.kind in ("started", "probe", "checkpoint", "heal", "metrics"):
                continue
            if (e.job, e.attempt, e.rank) in sent:
                continue
            if self.ctrl.current_rank(e.job, e.attempt, e.rank, req.node) is None:
                continue  # its end is known, or it is not ours (any more): never refused
            ev = task_event(req.node, e)
            assert isinstance(ev, TaskExited | TaskFenced)
            out.append(ev)
        return out

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
            return self._keep_lease(node, link, register=False)
        rt = self.ctrl.nodes.get(node)
        if link is not None and link.rejoining and not link.registered:
            if rt is not None and not rt.lost:
                # rebuilt from the store, and its registration (the reconcile) has not
                # committed yet: the lease goes on, and the agent is asked to register again
                return self._keep_lease(node, link, register=True)
            link.rejoining = False  # its node was declared lost meanwhile: refused below
        if link is None or not link.registered or rt is None or rt.lost:
            raise Conflict(
                f"node {node} is not registered with this controller (it restarted, or "
                "declared the node lost): register again"
            )
        link.last_seen = self.clock.now()
        self._renew(node)
        link.metrics = hb.metrics
        if self.on_heartbeat is not None:
            self.on_heartbeat(node, link.last_seen, hb.metrics)
        if hb.health != link.health or not link.reported:
            # the first report after a (re-)registration always reaches the core: a node the
            # controller drained for a failed check returns once its agent passes them again
            link.health = hb.health
            link.reported = True
            h = hb.health
            self.post(
                NodeHealth(
                    node, h.healthy, h.why, tuple(h.bad_gpus), jobs_unaffected=h.jobs_unaffected
                )
            )
        self.accounts_recheck(node, link.last_seen)
        current = self.ctrl.current_rank
        stale = [t for t in hb.running if current(t.job, t.attempt, t.rank, node) is None]
        return s.HeartbeatResult(lease_s=self.lease_s, stale=stale)

    def _keep_lease(self, node: str, link: NodeLink, *, register: bool) -> s.HeartbeatResult:
        link.last_seen = self.clock.now()
        self._renew(node)
        return s.HeartbeatResult(lease_s=self.lease_s, stale=[], register_again=register)

    async def agent_events(self, node: str, events: list[s.AgentEvent]) -> None:
        """Believed even before a node registers again after our restart: an exit that
        happened while we were down is the truth, better known before the reconcile.
        Returns once committed: the agent drops what it sent only on our answer. (This
        traffic does not renew the lease: only heartbeats and registrations do.)"""
        self.down.check()
        self.check_own(node, "events", events)
        link = self.links.get(node)
        if link is not None and link.registered:
            link.last_seen = self.clock.now()
        evs: list[Event] = [task_event(node, e) for e in self.take_metrics(events)]
        if evs:
            await self.report(evs)

    def take_metrics(self, events: list[s.AgentEvent]) -> list[s.AgentEvent]:
        """Keep what the jobs' metrics files said (in memory: no core event, nothing stored);
        the other events."""
        now = self.clock.now()
        for e in events:
            if e.kind == "metrics" and e.metrics is not None and e.rank == 0:
                self.job_metrics.record(e.job, e.attempt, e.metrics, now)
        return [e for e in events if e.kind != "metrics"]

    def commands_allowed(self, node: str) -> None:
        link = self.links.get(node)
        if link is None or not link.registered:
            raise Conflict(f"node {node} is not registered with this controller: register first")


def task_event(
    node: str, e: s.AgentEvent
) -> TaskStarted | TaskExited | TaskFenced | ReplicaProbe | TaskCheckpointed | NodeHealReport:
    """An agent's report as the core's event (the node: who reported it; ``check_own`` made
    sure the rank is the node's own, so a probe report speaks only of its own replicas; a
    heal report speaks of the node that sent it)."""
    if e.kind == "heal":
        return NodeHealReport(node, e.attempt, e.step, e.ok, e.why)
    if e.kind == "probe":
        return ReplicaProbe(e.job, e.attempt, e.probe, e.ok, e.why)
    if e.kind == "checkpoint":
        return TaskCheckpointed(e.job, e.attempt, e.rank, e.age_s)
    if e.kind == "started":
        return TaskStarted(e.job, e.attempt, e.rank, node)
    if e.cause == "fenced":  # stopped for the node's sake: requeued, not charged
        return TaskFenced(node, e.job, e.attempt, e.rank, e.why)
    return TaskExited(e.job, e.attempt, e.rank, e.exit_code, e.why, e.cause == "evicted")
