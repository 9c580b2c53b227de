"""Defragmentation: a large gang of whole GPUs that no leaf can hold because smaller
preemptible jobs are spread over the leaves frees ONE leaf, stopping the fewest-loss set of
those jobs inside it (``scheduler.defrag``), within a policy: the gang's size, the work one move
may lose and a savings-versus-disruption score (Karpenter's consolidation acts at >= 0.5).

The victims are smaller jobs (fewer GPUs in all) of no higher priority; they stop with their
checkpoint notice (ADR 0036) and are requeued as any preempted job. Name it first in a profile's
preempt list: its victims then come before the other plugins' (whose scan would take victims
anywhere)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpufleet.model.defrag import DefragPolicy
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.scheduler.defrag import LeafPlan, free_one_leaf, loss, wants_defrag
from gpufleet.scheduler.framework import NO_VICTIMS, SUCCESS, Admission, OrderPlugin, Victims
from gpufleet.scheduler.plugins.base import PreemptBase, cheapest_first
from gpufleet.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

NAME = "preempt/defrag"


class Plugin(PreemptBase):
    """Options: the fields of ``model.defrag.DefragPolicy`` (the cluster's policy); a queue's
    ``defrag:`` overrides them for its gangs."""

    def __init__(self, **options: Any) -> None:
        self.policy = DefragPolicy.of(options)
        # the leaves moved in the cycle of ``_cycle_snap`` (the snapshot's ``defrag_moves``
        # are those of earlier cycles): the "how often" bounds hold within a cycle too
        self._cycle_snap: Snapshot | None = None
        self._moved: dict[str, float] = {}

    def policy_for(self, job: PendingJob, snap: Snapshot) -> DefragPolicy:
        """The cluster's policy with the job's queue's changes."""
        q = snap.queues.get(job.spec.queue)
        return self.policy if q is None else self.policy.overridden(q.defrag)

    def moves(self, snap: Snapshot) -> Mapping[str, float]:
        """Each leaf's last move's time: earlier cycles' (the snapshot's), then this cycle's."""
        times = {leaf: m.time for leaf, m in snap.defrag_moves.items()}
        if self._cycle_snap is snap:
            times.update(self._moved)
        return times

    def candidates(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Iterable[RunningJob]:
        s = job.spec
        size = s.total_gpu_milli
        return (
            r
            for r in snap.running
            if r.stopping_since is None
            and r.spec.total_gpu_milli < size
            and r.spec.priority <= s.priority
        )

    def plan(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> LeafPlan | None:
        """The leaf to free for ``job`` and its victims, or None."""
        policy = self.policy_for(job, snap)
        if not wants_defrag(job.spec, policy):
            return None
        cands = cheapest_first(self.candidates(job, admission, snap, usage, order), snap.now)
        stopping = [r for r in snap.running if r.stopping_since is not None]
        return free_one_leaf(
            job.spec,
            [*stopping, *cands],
            snap.nodes,
            snap.now,
            policy,
            running=snap.running,
            moves=self.moves(snap),
        )

    def victims(
        self,
        job: PendingJob,
        admission: Admission,
        snap: Snapshot,
        usage: QueueUsage,
        order: OrderPlugin,
    ) -> Victims:
        plan = self.plan(job, admission, snap, usage, order)
        return NO_VICTIMS if plan is None else Victims(SUCCESS, plan.victims)

    def reason_for(
        self, job: PendingJob, victims: Sequence[RunningJob], snap: Snapshot
    ) -> Reason | None:
        """ "moving 3 jobs to free 2 nodes under leaf-4" when ``victims`` all lie in one leaf
        and ``job`` is a gang this plugin moves jobs for."""
        if not victims or not wants_defrag(job.spec, self.policy_for(job, snap)):
            return None
        leaf_of = {n.name: n.leaf for n in snap.nodes}
        nodes = sorted({p.node for v in victims for p in v.allocation})
        leaves = {leaf_of.get(n) for n in nodes}
        if len(leaves) != 1 or None in leaves:
            return None
        leaf = next(iter(leaves))
        assert leaf is not None
        if self._cycle_snap is not snap:
            self._cycle_snap, self._moved = snap, {}
        self._moved[leaf] = snap.now  # the cycle takes this Reason: the move is made
        lost = sum(loss(v, snap.now) for v in victims)
        plan = LeafPlan(leaf, tuple(victims), tuple(nodes), lost, 0.0)
        ids = [v.id for v in victims]
        return Reason(
            ReasonCode.DEFRAG,
            plan.describe(),
            {"victims": ids, "leaf": leaf, "nodes": nodes, "lost_gpu_s": round(lost, 1)},
        )
