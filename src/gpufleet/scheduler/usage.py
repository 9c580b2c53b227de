"""Queue usage during a cycle (quota, borrowing) and decayed past usage (fair share)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import Resources
from gpufleet.scheduler.snapshot import NodeView, RunningJob, Snapshot


@dataclass(frozen=True, slots=True)
class Room:
    """A limited queue's room at one moment of a cycle, each part as the admission counts it."""

    used: Resources
    quota: Resources
    own: Resources  # the rest of its nominal quota
    cohort_idle: Resources  # the idle quota of the other lending members of its cohort
    cohort_lent: Resources  # of that, what is lent already (to this queue or another)
    cohort_free: Resources  # cohort_idle less cohort_lent: what the cohort can still lend
    unassigned: Resources  # the capacity outside every quota
    unassigned_free: Resources  # of that, what is not in use and may be lent to this queue

    @property
    def lendable(self) -> Resources:
        return self.cohort_free + self.unassigned_free

    @property
    def total(self) -> Resources:
        return self.own + self.lendable


def capacity_of(nodes: Iterable[NodeView]) -> Resources:
    """What the schedulable ``nodes`` hold in all."""
    cap = Resources()
    for n in nodes:
        if n.schedulable:
            cap = cap + Resources(n.gpus * 1000, n.cpu_total, n.mem_total)
    return cap


class QueueUsage:
    """What each queue holds now, updated as the cycle admits jobs.

    Quota follows Kueue's cohorts: a queue may use its nominal quota, and beyond it the idle
    nominal quota of the other members of its cohort that lend."""

    def __init__(
        self,
        queues: Mapping[str, QueueSpec],
        running: Iterable[RunningJob],
        capacity: Resources,
        used: Mapping[str, Resources] | None = None,
    ) -> None:
        self.queues = dict(queues)
        self.capacity = capacity
        self.used: dict[str, Resources] = {}
        self.cohorts: dict[str, list[str]] = {}
        for q in self.queues.values():
            if q.cohort:
                self.cohorts.setdefault(q.cohort, []).append(q.name)
        # the queues with a quota (``spec`` of any other name is unlimited)
        self.limited = frozenset(name for name, q in self.queues.items() if q.limited)
        if used is not None:
            self.used = dict(used)  # kept incrementally by the caller: O(queues), not O(running)
        else:
            for r in running:
                self.add(r.spec.queue, r.spec.total_resources)

    @staticmethod
    def of(snap: Snapshot) -> QueueUsage:
        cap = snap.capacity
        if cap is None:
            cap = capacity_of(snap.nodes)
        return QueueUsage(snap.queues, snap.running, cap, snap.queue_used)

    def spec(self, queue: str) -> QueueSpec:
        return self.queues.get(queue) or QueueSpec(queue)

    def of_queue(self, queue: str) -> Resources:
        return self.used.get(queue, Resources())

    def add(self, queue: str, res: Resources) -> None:
        self.used[queue] = self.of_queue(queue) + res

    def remove(self, queue: str, res: Resources) -> None:
        self.used[queue] = (self.of_queue(queue) - res).clamp0()

    def unassigned(self) -> Resources:
        """The capacity outside every quota: the cluster less the nominal quotas of all queues
        (Kueue's unassigned capacity; lent, when the admit plugin lends it, as by a
        cluster-level default cohort)."""
        assigned = Resources()
        for name in self.limited:
            assigned = assigned + self.queues[name].quota
        return (self.capacity - assigned).clamp0()

    def unassigned_used(self) -> Resources:
        """What of the unassigned capacity is in use: all that queues without a quota hold,
        and what limited queues hold beyond their quota that their cohort's idle quota does
        not cover (a cohort's borrowers take its idle quota first)."""
        used = Resources()
        for name, u in self.used.items():
            if name not in self.limited:
                used = used + u
        lone = Resources()
        for name in self.limited:
            q = self.queues[name]
            if not q.cohort:
                lone = lone + (self.of_queue(name) - q.quota).clamp0()
        for members in self.cohorts.values():
            idle, over = self._cohort_idle_over(members, "")
            used = used + (over - idle).clamp0()
        return used + lone

    def _cohort_idle_over(self, members: list[str], but: str) -> tuple[Resources, Resources]:
        """(idle lendable quota of ``members`` but ``but``, what all ``members`` borrow)."""
        idle, over = Resources(), Resources()
        for name in members:
            q = self.spec(name)
            if not q.limited:
                continue
            u = self.of_queue(name)
            over = over + (u - q.quota).clamp0()
            if name != but and q.can_lend:
                idle = idle + (q.quota - u).clamp0()
        return idle, over

    def room(self, queue: str, lend_unassigned: bool) -> Room:
        """What ``queue`` may still take now, and from where: the rest of its own quota, the
        idle quota of its cohort not lent yet (to it or another member), and (when
        ``lend_unassigned``) the unassigned capacity not in use."""
        q = self.spec(queue)
        used = self.of_queue(queue)
        own = (q.quota - used).clamp0()
        idle = lent = free = Resources()
        if q.cohort and q.can_borrow:
            idle, over = self._cohort_idle_over(self.cohorts.get(q.cohort, []), queue)
            free = (idle - over).clamp0()
            lent = idle - free
        unassigned = self.unassigned()
        pool = Resources()
        if lend_unassigned and q.cohort and q.can_borrow:
            pool = (unassigned - self.unassigned_used()).clamp0()
        return Room(used, q.quota, own, idle, lent, free, unassigned, pool)

    def lendable(self, queue: str) -> Resources:
        """Idle nominal quota that the other lending members of the cohort could lend, less
        what other members already borrow (idle quota is lent once, not to every borrower)."""
        q = self.spec(queue)
        if not q.cohort or not q.can_borrow:
            return Resources()
        total = Resources()
        borrowed = Resources()
        for name in self.cohorts.get(q.cohort, ()):
            other = self.spec(name)
            if name == queue or not other.limited:
                continue
            borrowed = borrowed + (self.of_queue(name) - other.quota).clamp0()
            if other.can_lend:
                total = total + (other.quota - self.of_queue(name)).clamp0()
        return (total - borrowed).clamp0()

    def lendable_at_most(self, queue: str) -> Resources:
        """What the cohort could lend with every other member idle (the borrowing ceiling)."""
        q = self.spec(queue)
        total = Resources()
        for name in self.cohorts.get(q.cohort, ()) if q.cohort else ():
            other = self.spec(name)
            if name != queue and other.can_lend and other.limited:
                total = total + other.quota
        return total

    def borrowing(self, queue: str) -> bool:
        q = self.spec(queue)
        return q.limited and not self.of_queue(queue).fits_in(q.quota)

    def dominant_share(self, queue: str) -> float:
        """The queue's largest share of any cluster resource it holds (DRF)."""
        u, c = self.of_queue(queue), self.capacity
        shares = [
            u.gpu_milli / c.gpu_milli if c.gpu_milli else 0.0,
            u.cpu_milli / c.cpu_milli if c.cpu_milli else 0.0,
            u.memory_mib / c.memory_mib if c.memory_mib else 0.0,
        ]
        return max(shares)


class DecayedUsage:
    """Past usage per queue in share·seconds, halved every ``half_life_s`` (Slurm's
    PriorityDecayHalfLife, default 7 days). Advanced by the core with event times only."""

    def __init__(self, half_life_s: float = 7 * 86400.0) -> None:
        if half_life_s <= 0:
            raise ValueError("half_life_s must be positive")
        self.half_life_s = half_life_s
        self.values: dict[str, float] = {}
        self.last: float | None = None

    @property
    def tau(self) -> float:
        """Mean life of the decay: usage at a constant share s settles at s·tau."""
        return self.half_life_s / math.log(2)

    def restore(self, values: Mapping[str, float], as_of: float, now: float) -> None:
        """Take a saved ledger back (a controller restart): decayed from ``as_of`` to ``now``
        with nothing gained in between (what ran meanwhile was not watched)."""
        decay = 2.0 ** (-max(0.0, now - as_of) / self.half_life_s)
        self.values = {q: u * decay for q, u in values.items()}
        self.last = max(now, as_of)

    def advance(self, now: float, shares: Mapping[str, float]) -> None:
        """Account for ``shares`` (dominant share per queue) held constant since the last call."""
        if self.last is None or now <= self.last:
            self.last = now if self.last is None else self.last
            for q in shares:
                self.values.setdefault(q, 0.0)
            return
        decay = 2.0 ** (-(now - self.last) / self.half_life_s)
        gain = self.tau * (1.0 - decay)
        for q in set(self.values) | set(shares):
            self.values[q] = self.values.get(q, 0.0) * decay + shares.get(q, 0.0) * gain
        self.last = now
