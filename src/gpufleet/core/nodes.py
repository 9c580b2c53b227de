"""What happens on a node's events: up (new, back, or described anew), lost, a health report,
an admin's drain; and the hold on a node restored from the store until its agent is back.

The node's state changes through ``ClusterState``; its jobs are stopped and requeued by the
``JobMaster``."""

from __future__ import annotations

from gpufleet.core.cluster_state import ClusterState
from gpufleet.core.commands import Command, NodeEvent, SetTimer
from gpufleet.core.errors import UnknownObject
from gpufleet.core.events import NodeDrain, NodeHealth, NodeLost, NodeUp
from gpufleet.core.healing import Healer
from gpufleet.core.jobmaster import JobMaster
from gpufleet.core.state import NodeRuntime
from gpufleet.model.job import JobState

S = JobState

# The ``why`` of the drain and resume the controller makes itself on a node's health reports
# (the service audits these; an admin's drains carry the admin's own words).
HEALTH_DRAIN = "failed its health checks"
HEALTH_RESUME = "passed its health checks again"
DRAIN_TIMER = "drain-deadline"  # a drain's deadline: job_id is the node


class NodeLifecycle:
    def __init__(self, state: ClusterState, jobmaster: JobMaster, healer: Healer) -> None:
        self.state = state
        self.jm = jobmaster
        self.heal = healer

    def hold_restored(
        self, name: str, why: str, *, drained: bool = False, health_drained: bool = False
    ) -> None:
        n = self.state.nodes.get(name)
        if n is None or n.lost:
            return
        n.healthy = False  # NodeUp(healthy=True) lifts the hold
        n.drained = drained
        n.health_drained = drained and health_drained
        n.why = why
        self.state.node_changed(name)
        self.state.dirty = True

    def _trust(self, name: str, why: str, now: float, out: list[Command]) -> None:
        said = self.state.trust(name, why, now)
        if said is not None:
            out.append(said)

    def up(self, ev: NodeUp, now: float, out: list[Command]) -> None:
        st, name = self.state, ev.spec.name
        old = st.nodes.get(name)
        self.heal.up(name)
        if old is not None and not old.lost and old.spec == ev.spec:
            old.healthy = ev.healthy
            old.datasets = ev.datasets
            st.node_changed(name)
            self._trust(name, "registered again", now, out)
        elif old is not None and not old.lost:
            # the same node, described anew (a label, its memory): what runs there keeps its
            # devices; ranks on devices the node no longer has are gone
            new = NodeRuntime.of(ev.spec, ev.healthy, ev.datasets)
            new.drained, new.why = old.drained, old.why
            new.health_drained = old.health_drained
            st.put_node(new)
            if old.suspect:
                new.suspect = True
                self._trust(name, "registered again", now, out)
            for rec in self.jm.jobs_on(name):
                lost = False
                for r, p in enumerate(rec.allocation):
                    if p.node != name or r in rec.exited:
                        continue
                    if all(d < ev.spec.gpus for d in p.gpus):
                        st.take(p)
                    else:
                        rec.exited[r] = -1
                        lost = True
                if lost:
                    self.jm.stop(
                        rec,
                        S.NODE_LOST,
                        f"node {name} no longer has the devices of a rank",
                        out,
                        now=now,
                    )
                    if not rec.live_ranks():
                        self.jm.attempt_over(rec, now, out)
        else:
            # a new node, or one that comes back: it has stopped all its tasks (fencing)
            new = NodeRuntime.of(ev.spec, ev.healthy, ev.datasets)
            if old is not None and self.heal.holds(name):  # still to be healed, or given up
                new.drained = new.health_drained = True
                new.why = old.why
            st.put_node(new)
            if old is not None and not new.drained:
                out.append(NodeEvent(name, "resumed", now, "registered again"))
        st.node_changed(name)
        st.dirty = True

    def lost(self, ev: NodeLost, now: float, out: list[Command]) -> None:
        node = self.state.nodes.get(ev.node)
        if node is None or node.lost:
            return
        node.lost = True
        node.why = ev.why
        self.heal.lost(ev.node)
        self.state.node_changed(ev.node)
        out.append(NodeEvent(ev.node, "lost", now, ev.why))
        for rec in self.jm.jobs_on(ev.node):
            # ranks on the lost node will never report: count them as gone
            for r, p in enumerate(rec.allocation):
                if p.node == ev.node and r not in rec.exited:
                    rec.exited[r] = -1
            self.jm.stop(rec, S.NODE_LOST, f"node {ev.node} lost: {ev.why}", out, now=now)
            if not rec.live_ranks():
                self.jm.attempt_over(rec, now, out)
        self.state.dirty = True

    def health(self, ev: NodeHealth, now: float, out: list[Command]) -> None:
        """A failed check marks the node unhealthy and drains it (nothing new is placed there;
        the jobs on its bad GPUs are requeued, not charged); it returns to service only once
        it passes its checks again, and then only from a drain the controller set itself: an
        admin's drain stays until the admin resumes the node. With a heal policy, a GPU fault
        starts the heal loop instead, which alone returns the node (``core/healing.py``). A
        fault of the node's own that spares its tasks (``jobs_unaffected``: a full data disk)
        stops no job."""
        node = self.state.nodes.get(ev.node)
        if node is None:
            return
        was, was_bad = node.healthy, node.bad_gpus
        node.healthy = ev.healthy
        node.bad_gpus = frozenset(ev.bad_gpus) if not ev.healthy else frozenset()
        healing = self.heal.holds(ev.node)
        # while healing, the node's reason is the loop's step; a healthy node's report with
        # nothing to say keeps the reason it has ("passed its burn-in")
        if not healing and not (ev.healthy and was and not ev.why):
            node.why = ev.why
        if was != ev.healthy or node.bad_gpus != was_bad:
            out.append(NodeEvent(ev.node, "healthy" if ev.healthy else "unhealthy", now, ev.why))
        if not ev.healthy and not node.drained:
            node.drained = node.health_drained = True
            out.append(NodeEvent(ev.node, "drained", now, f"{HEALTH_DRAIN}: {ev.why}"))
        if not ev.healthy and not ev.jobs_unaffected and node.health_drained:
            self.heal.fault(ev.node, f"{HEALTH_DRAIN}: {ev.why}", now, out)
        elif ev.healthy and node.health_drained and not healing:
            node.drained = node.health_drained = False
            node.why = HEALTH_RESUME
            out.append(NodeEvent(ev.node, "resumed", now, HEALTH_RESUME))
        self.state.node_changed(ev.node)
        if not ev.healthy and not ev.jobs_unaffected:
            for rec in self.jm.jobs_on(ev.node):
                hit = not ev.bad_gpus or any(
                    p.node == ev.node and set(p.gpus) & set(ev.bad_gpus) for p in rec.allocation
                )
                if hit:
                    self.jm.stop(
                        rec, S.NODE_LOST, f"node {ev.node} unhealthy: {ev.why}", out, now=now
                    )
        self.state.dirty = True

    def drain(self, ev: NodeDrain, now: float, out: list[Command]) -> None:
        """An admin's drain or resume. A resume clears any drain, the controller's own too;
        ``force`` also puts a node whose checks still fail back into service (until its agent
        reports a new failure)."""
        node = self.state.nodes.get(ev.node)
        if node is None:
            raise UnknownObject(f"unknown node {ev.node}")
        node.drained = ev.drain
        node.health_drained = False  # an admin's word replaces the controller's
        node.drain_deadline = None  # a resume, or a drain anew, ends an earlier deadline
        if ev.drain and ev.deadline_s is not None:
            node.drain_deadline = now + max(0.0, ev.deadline_s)
            node.drain_why = ev.why
            out.append(SetTimer(node.drain_deadline, DRAIN_TIMER, ev.node))
        self.heal.admin(ev.node, resumed=not ev.drain)
        node.why = ev.why
        out.append(NodeEvent(ev.node, "drained" if ev.drain else "resumed", now, ev.why))
        if ev.drain and ev.requeue:  # each with its checkpoint notice (ADR 0036)
            for rec in self.jm.jobs_on(ev.node):
                self.jm.evict(rec, ev.why, now, out, "preempted")
        if not ev.drain and ev.force and not node.healthy:
            node.healthy = True
            node.bad_gpus = frozenset()
            out.append(NodeEvent(ev.node, "healthy", now, f"forced by admin: {ev.why}"))
        self.state.node_changed(ev.node)
        self.state.dirty = True

    def drain_deadline(self, name: str, now: float, out: list[Command]) -> None:
        """A drain's deadline came (its timer): what still runs on the node is stopped as a
        preemption is (each job's checkpoint notice, requeued, not charged)."""
        node = self.state.nodes.get(name)
        at = node.drain_deadline if node is not None else None
        if node is None or not node.drained or at is None or at > now:
            return  # resumed, drained anew (another timer), or not yet
        node.drain_deadline = None
        why = f"node {name} drained with a deadline"
        why += f": {node.drain_why}" if node.drain_why else ""
        for rec in self.jm.jobs_on(name):
            self.jm.evict(rec, why, now, out)
