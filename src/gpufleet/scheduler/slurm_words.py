"""Slurm's word for why a job waits (squeue's ``%r``, scontrol's ``Reason=``) where the job's
place in the queue makes it other than its Reason's code, as Slurm 22.05's main scheduler gives
it (job_scheduler.c, ``_schedule``).

Slurm walks the pending jobs by priority. The first job of a partition that cannot start for
want of resources is told ``Resources``; its partition has then failed for the rest of the
pass: each later job of it is told ``Priority`` (a job of higher priority in its partition
waits), and the partition's nodes are kept from the other partitions' jobs, so that the first
waiting job of a partition whose nodes those hold is told ``Resources`` with the words
``HIGHER_PARTITIONS`` (what squeue prints), and its partition fails in turn. Backfill (every
30 s) starts what it can around them and leaves the others' reasons as they are. An array's
pending tasks are one job to Slurm: they share its word. (Checked against slurm_local.sh's
Slurm: tests/e2e/test_reasons_vs_slurm.py.)

Here the cycle's walk is that order, and a queue is a partition over its node set. gpufleet's
own code and message stay as they are (``gpufleet why`` says why in its own terms); this only
sets ``Reason.slurm`` where Slurm's word is not the code's. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from gpufleet.model.queue import in_node_set
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.scheduler.decisions import Reasons
from gpufleet.scheduler.framework import Profile
from gpufleet.scheduler.snapshot import PendingJob, Snapshot
from gpufleet.scheduler.usage import QueueUsage

C = ReasonCode
# the codes of a job that waits for capacity: Slurm's WAIT_RESOURCES, or its Priority behind
# a job of its partition that does (gpufleet's Held: the head of a profile without backfill)
CAPACITY = frozenset({C.RESOURCES, C.TOPOLOGY, C.GPU_MODEL, C.RESERVED, C.PRIORITY, C.HELD})
PRIORITY = "Priority"
RESOURCES = "Resources"
# Slurm's description of a job whose partition's nodes higher-priority waits hold: squeue prints
# it in place of the reason (scontrol with its blanks as _)
HIGHER_PARTITIONS = (
    "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
)


def _queues(job: PendingJob) -> tuple[str, ...]:
    return job.spec.queues or (job.spec.queue,)


def _min_nodes(job: PendingJob) -> int:
    """The nodes the job needs at least (Slurm's min_nodes): one per worker for -N or
    --exclusive, else one."""
    s = job.spec
    return s.workers if s.distinct_nodes or s.exclusive else 1


def worded(r: Reason, word: str) -> Reason:
    """``r`` with Slurm's ``word`` where it is not the code's own."""
    slurm = "" if word == r.code.value else word
    return r if slurm == r.slurm else replace(r, slurm=slurm)


class SlurmWords:
    """The partitions (queues) failed so far in one cycle's walk, and the words given."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.failed: dict[str, None] = {}  # in the order they failed
        self.arrays: dict[str, str] = {}  # array id → the word of its pending tasks
        # whether some queue has a node set (else every queue is over every node)
        self._sets = any(q.nodes for q in snap.queues.values())
        self._blocked: set[int] = set()  # the nodes of the failed queues, where sets exist
        self._nodes: dict[str, frozenset[int]] = {}

    def nodes_of(self, queue: str) -> frozenset[int]:
        got = self._nodes.get(queue)
        if got is None:
            q = self.snap.queues.get(queue)
            sel = q.nodes if q is not None else ()
            views = self.snap.nodes
            got = frozenset(i for i, v in enumerate(views) if in_node_set(v.labels, sel))
            self._nodes[queue] = got
        return got

    def held_off(self, job: PendingJob, fresh: Sequence[str], blocked: set[int]) -> bool:
        """Whether the failed queues hold so many of ``fresh``'s nodes that too few are left
        for the job (Slurm's test before it even tries: min_nodes > nodes available)."""
        if not self.failed:
            return False
        if not self._sets:
            return True  # every queue is over every node: the failed ones hold them all
        left = set().union(*(self.nodes_of(q) for q in fresh)) - blocked
        return len(left) < _min_nodes(job)

    def word(self, job: PendingJob, code: ReasonCode) -> str:
        """The word of the next job in the walk's order; "" where its code is no wait for
        capacity (the code's word is Slurm's)."""
        if code not in CAPACITY:
            return ""
        if job.array and job.array in self.arrays:
            return self.arrays[job.array]
        fresh = [q for q in _queues(job) if q not in self.failed]
        if not fresh:
            said = PRIORITY
        else:
            said = HIGHER_PARTITIONS if self.held_off(job, fresh, self._blocked) else RESOURCES
            for q in fresh:
                self.failed[q] = None
                if self._sets:
                    self._blocked |= self.nodes_of(q)
        if job.array:
            self.arrays[job.array] = said
        return said

    def walked(self, jobs: Sequence[PendingJob], reasons: Reasons, started: set[str]) -> None:
        """Each job the cycle examined, in the walk's order, told Slurm's word."""
        for job in jobs:
            if job.id in started:
                continue
            r = reasons.raw(job.id)
            if r is None:
                continue
            said = self.word(job, r.code)
            if said:
                reasons[job.id] = worded(r, said)

    def rest(
        self, profile: Profile, usage: QueueUsage, skip: Callable[[str], bool]
    ) -> Callable[[PendingJob, Reason], Reason]:
        """The words of the jobs the walk never reached, worked out when asked for, from what
        the walk left (so the same whatever order they are read in): ``Priority`` in a queue
        that failed; in one that did not, its first such job in the cycle's order is the one
        that fails it."""
        failed, arrays, blocked = set(self.failed), dict(self.arrays), set(self._blocked)
        firsts: dict[str, str] = {}  # queue → the id (an array's: its id) of its first job

        def first(queue: str) -> str:
            if queue not in firsts:
                snap = self.snap
                index = snap.pending_index
                of_queue = index.by_queue.get(queue, ()) if index is not None else snap.pending
                jobs = [
                    p
                    for p in of_queue
                    if queue in _queues(p)
                    and not skip(p.id)
                    and not p.waiting_for
                    and p.eligible_time <= snap.now
                ]
                head = next(iter(profile.order.order(jobs, snap, usage)), None)
                firsts[queue] = "" if head is None else head.array or head.id
            return firsts[queue]

        def words(job: PendingJob, r: Reason) -> Reason:
            if r.code not in CAPACITY:
                return r
            if job.array and job.array in arrays:
                return worded(r, arrays[job.array])
            fresh = [q for q in _queues(job) if q not in failed]
            if not fresh or all(first(q) != (job.array or job.id) for q in fresh):
                return worded(r, PRIORITY)
            said = HIGHER_PARTITIONS if self.held_off(job, fresh, blocked) else RESOURCES
            return worded(r, said)

        return words
