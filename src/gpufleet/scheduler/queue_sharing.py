"""Which ways of sharing a GPU a queue's jobs may hold shares under (ADR 0064): a queue's
``gpu_sharing`` (model/queue.py), e.g. ``[mps]`` for desktops whose memory must be bounded, or
``[timeslice]`` for a render queue. The way is the node's (its label
``gpufleet.io/gpu-sharing``, one per node, so modes never mix on one GPU): a fractional job
of such a queue is kept off the GPU nodes that share another way, as node exclusions for
this cycle (as the reservations' terms are: every step, placement, backfill, preemption and
the Reasons, then sees them), and waits, told why, when no node of the cluster shares its
way. Whole-GPU jobs and queues without the setting are untouched. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpufleet.model.job import JobSpec
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.replicas import sharing_of
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.reservations import with_exclude
from gpufleet.scheduler.snapshot import NodeView, PendingJob, Snapshot


def _ways(modes: tuple[str, ...]) -> str:
    return " or ".join(modes)


def nowhere(
    spec: JobSpec,
    modes: tuple[str, ...],
    views: Sequence[NodeView],
    off: Sequence[str] | None = None,
) -> Reason | None:
    """Why a share of a queue whose policy is ``modes`` can run on no GPU node of ``views``
    (``off``: those that share another way, if known), or None when one shares its way. The
    cycle's word, and the submit's (server/admission.py)."""
    if not modes or not spec.gpus_per_worker or spec.gpu_milli >= MILLI:
        return None
    gpu = [v for v in views if v.gpus]
    if off is None:
        off = [v.name for v in gpu if sharing_of(v.labels) not in modes]
    if not gpu or len(off) < len(gpu):
        return None
    ways = sorted({sharing_of(v.labels) for v in gpu})
    msg = (
        f"holds a share of a GPU, and the policy of queue {spec.queue} lets its shares run only "
        f"where GPUs are shared by {_ways(modes)} (its gpu_sharing); none of the cluster's "
        f"{len(gpu)} GPU node(s) is (they share by {_ways(tuple(ways))})"
    )
    data = {"queue": spec.queue, "gpu_sharing": list(modes), "node_sharing": ways}
    return Reason(ReasonCode.NEVER, msg, data)


class ShareTerms:
    """The queues' policies and, per policy, the GPU nodes that share another way."""

    def __init__(self, snap: Snapshot, views: Sequence[NodeView]) -> None:
        self.policies = {q.name: q.gpu_sharing for q in snap.queues.values() if q.gpu_sharing}
        self.views = views
        self._off: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.kept: dict[str, tuple[str, ...]] = {}  # job id → the nodes kept from it, its modes
        self.gpu_nodes = sum(1 for v in views if v.gpus)

    @staticmethod
    def of(snap: Snapshot, views: Sequence[NodeView]) -> ShareTerms | None:
        if not any(q.gpu_sharing for q in snap.queues.values()):
            return None
        return ShareTerms(snap, views)

    def off(self, modes: tuple[str, ...]) -> tuple[str, ...]:
        """The GPU nodes that share a GPU in none of ``modes``."""
        got = self._off.get(modes)
        if got is None:
            got = tuple(v.name for v in self.views if v.gpus and sharing_of(v.labels) not in modes)
            self._off[modes] = got
        return got

    def apply(self, job: PendingJob) -> tuple[PendingJob | None, Reason | None]:
        """``job`` kept off the nodes its queue's policy rules out, or (None, why it waits)."""
        s = job.spec
        modes = self.policies.get(s.queue)
        if not modes or not s.gpus_per_worker or s.gpu_milli >= MILLI:
            return job, None
        off = self.off(modes)
        if not off:
            return job, None
        if len(off) >= self.gpu_nodes:  # every GPU node shares another way
            why = nowhere(s, modes, self.views, off)
            if why is not None:
                return None, why
        self.kept[job.id] = modes
        spec = with_exclude(s, tuple(dict.fromkeys(s.exclude + off)))
        return replace(job, spec=spec), None

    def said(self, r: Reason, queue: str, modes: tuple[str, ...]) -> Reason:
        """The Reason of a waiting share kept off nodes by its queue's policy: what it was
        told, and which nodes were not counted; where only the exclusions ruled it out (the
        nodes that share its way are drained or down), that instead of "-x"."""
        n = len(self.off(modes))
        if r.data.get("filter") == "filter/exclude":
            msg = (
                f"the policy of queue {queue} lets its shares run only where GPUs are shared "
                f"by {_ways(modes)} (its gpu_sharing), and no schedulable node is; {n} "
                "node(s) that share another way are not counted"
            )
            return replace(r, message=msg, data={**r.data, "gpu_sharing": list(modes)})
        return replace(
            r,
            message=r.message + f"; queue policy: its shares run only where GPUs are shared by "
            f"{_ways(modes)} (the queue's gpu_sharing), so {n} node(s) that share another way "
            "are not counted",
        )
