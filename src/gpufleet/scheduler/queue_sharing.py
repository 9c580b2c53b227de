"""Which ways of sharing a GPU a queue's jobs may hold shares under (ADR 0064): a queue's
``gpu_sharing`` (model/queue.py), e.g. ``[mps]`` for desktops whose memory must be bounded, or
``[timeslice]`` for a render queue. The way is the node's (its label
``gpufleet.io/gpu-sharing``, one per node, so modes never mix on one GPU): a fractional job
of such a queue is kept off the GPU nodes that share another way, as node exclusions for
this cycle (as the reservations' terms are: every step, placement, backfill, preemption and
the Reasons, then sees them), and waits, told why, when no node of the cluster shares its
way. Whole-GPU jobs and queues without the setting are untouched.

A queue's node set (its ``nodes``, labels its nodes all carry: Slurm's partition ``Nodes=``;
ADR 0066) is kept the same way, for every job of the queue: the nodes outside it are
excluded this cycle, a job waits as never schedulable when no node is in it, and a waiting
one's Reason names the set. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpufleet.model.job import JobSpec
from gpufleet.model.queue import in_node_set, node_set_text
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


Selector = tuple[tuple[str, str], ...]


def _its_nodes(queue: str, selector: Selector) -> str:
    return (
        f"queue {queue} runs its jobs only on nodes labelled {node_set_text(selector)} (its nodes)"
    )


def no_node_set(queue: str, selector: Selector, views: Sequence[NodeView]) -> Reason | None:
    """Why a job of ``queue`` can run on no node of ``views``: none is in its node set
    (``selector``), or None when one is. The cycle's word, and the submit's."""
    if not selector or not views or any(in_node_set(v.labels, selector) for v in views):
        return None
    msg = f"{_its_nodes(queue, selector)}; none of the cluster's {len(views)} node(s) is"
    return Reason(ReasonCode.NEVER, msg, {"queue": queue, "nodes": dict(selector)})


class ShareTerms:
    """The queues' policies and, per policy, the GPU nodes that share another way."""

    def __init__(self, snap: Snapshot, views: Sequence[NodeView]) -> None:
        self.policies = {q.name: q.gpu_sharing for q in snap.queues.values() if q.gpu_sharing}
        self.sets = {q.name: q.nodes for q in snap.queues.values() if q.nodes}
        self.queues = frozenset(self.policies) | frozenset(self.sets)
        self.views = views
        self._outside: dict[Selector, tuple[str, ...]] = {}
        self.held: dict[str, Selector] = {}  # job id → its queue's node set, where some is not
        self._off: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.kept: dict[str, tuple[str, ...]] = {}  # job id → the nodes kept from it, its modes
        # a job of several queues waiting for the nodes of any: job id → its queues' words for
        # what they keep it to, and how many nodes none of them lets it use
        self.union_held: dict[str, tuple[tuple[str, ...], int]] = {}
        self.gpu_nodes = sum(1 for v in views if v.gpus)

    @staticmethod
    def of(snap: Snapshot, views: Sequence[NodeView]) -> ShareTerms | None:
        if not any(q.gpu_sharing or q.nodes for q in snap.queues.values()):
            return None
        return ShareTerms(snap, views)

    def off(self, modes: tuple[str, ...]) -> tuple[str, ...]:
        """The GPU nodes that share a GPU in none of ``modes``."""
        got = self._off.get(modes)
        if got is None:
            got = tuple(v.name for v in self.views if v.gpus and sharing_of(v.labels) not in modes)
            self._off[modes] = got
        return got

    def outside(self, selector: Selector) -> tuple[str, ...]:
        """The nodes outside a queue's node set."""
        got = self._outside.get(selector)
        if got is None:
            got = tuple(v.name for v in self.views if not in_node_set(v.labels, selector))
            self._outside[selector] = got
        return got

    def apply(self, job: PendingJob) -> tuple[PendingJob | None, Reason | None]:
        """``job`` kept off the nodes its queue's policies rule out, or (None, why it waits);
        what kept it is noted for its Reason (``said``)."""
        shared, why, selector, modes = self.terms(job)
        if selector:
            self.held[job.id] = selector
        if modes:
            self.kept[job.id] = modes
        return shared, why

    def terms(
        self, job: PendingJob
    ) -> tuple[PendingJob | None, Reason | None, Selector, tuple[str, ...]]:
        """``apply`` without noting anything: the job as its queue (``spec.queue``) keeps it,
        or (None, why), and the node set and ways of sharing that kept it off nodes."""
        s = job.spec
        off: tuple[str, ...] = ()
        held: Selector = ()
        kept: tuple[str, ...] = ()
        selector = self.sets.get(s.queue)
        if selector and (off := self.outside(selector)):
            if len(off) >= len(self.views):
                return None, no_node_set(s.queue, selector, self.views), (), ()
            held = selector
        modes = self.policies.get(s.queue)
        if modes and s.gpus_per_worker and s.gpu_milli < MILLI and (other := self.off(modes)):
            if len(other) >= self.gpu_nodes:  # every GPU node shares another way
                why = nowhere(s, modes, self.views, other)
                if why is not None:
                    return None, why, (), ()
            kept = modes
            off += other
        if not off:
            return job, None, held, kept
        spec = with_exclude(s, tuple(dict.fromkeys(s.exclude + off)))
        return replace(job, spec=spec), None, held, kept

    def union(self, job: PendingJob, tried: Sequence[PendingJob]) -> PendingJob:
        """A job of several queues (Slurm's ``-p a,b``) as it waits for a node of any of
        them: ``job`` kept off only the nodes that each of ``tried`` (it as the job of each
        queue that admits it, with that queue's terms) is kept off; noted for its Reason."""
        if len(tried) == 1:
            first = tried[0]
            _, _, selector, modes = self.terms(first)
            if selector:
                self.held[job.id] = selector
            if modes:
                self.kept[job.id] = modes
            return first
        own = set(job.spec.exclude)
        common = [n for n in tried[0].spec.exclude if n not in own]
        for t in tried[1:]:
            theirs = set(t.spec.exclude)
            common = [n for n in common if n in theirs]
        spec = with_exclude(tried[0].spec, job.spec.exclude + tuple(common))
        if not common:  # one of them may run it anywhere
            return replace(tried[0], spec=spec)
        words = []
        for t in tried:
            _, _, selector, modes = self.terms(t)
            said = [f"nodes labelled {node_set_text(selector)}"] if selector else []
            said += [f"GPUs shared by {_ways(modes)}"] if modes else []
            words.append(f"queue {t.spec.queue}: {' and '.join(said)}")
        self.union_held[job.id] = (tuple(words), len(common))
        return replace(tried[0], spec=spec)

    def said_union(self, r: Reason, job: str) -> Reason:
        """``said`` for a job of several queues waiting for the nodes of any of them."""
        words, n = self.union_held[job]
        terms = f"its queues run it only on their nodes ({'; '.join(words)})"
        if r.data.get("filter") == "filter/exclude":
            msg = (
                f"{terms}, and no schedulable one is; {n} node(s) outside them all are not counted"
            )
        else:
            msg = f"{r.message}; {terms}, so {n} node(s) outside them all are not counted"
        return replace(r, message=msg)

    def said(self, r: Reason, job: str, queue: str) -> Reason:
        """The Reason of a waiting job kept off nodes by its queue's node set or ways of
        sharing: what it was told, and which nodes were not counted; where only the exclusions
        ruled it out (the nodes left are drained or down), that instead of "-x"."""
        modes, selector = self.kept.get(job), self.held.get(job)
        if r.data.get("filter") == "filter/exclude":
            whys, data = [], dict(r.data)
            if selector:
                n = len(self.outside(selector))
                whys.append(
                    f"{_its_nodes(queue, selector)}, and no schedulable one is; {n} node(s) "
                    "outside them are not counted"
                )
                data["nodes"] = dict(selector)
            if modes:
                whys.append(
                    f"the policy of queue {queue} lets its shares run only where GPUs are shared "
                    f"by {_ways(modes)} (its gpu_sharing), and no schedulable node is; "
                    f"{len(self.off(modes))} node(s) that share another way are not counted"
                )
                data["gpu_sharing"] = list(modes)
            return replace(r, message="; ".join(whys), data=data)
        msg = r.message
        if modes:
            msg += (
                f"; queue policy: its shares run only where GPUs are shared by {_ways(modes)} "
                f"(the queue's gpu_sharing), so {len(self.off(modes))} node(s) that share "
                "another way are not counted"
            )
        if selector:
            msg += (
                f"; {_its_nodes(queue, selector)}, so {len(self.outside(selector))} node(s) "
                "outside them are not counted"
            )
            return replace(r, message=msg, data={**r.data, "nodes": dict(selector)})
        return replace(r, message=msg)
