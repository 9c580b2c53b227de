"""The elastic pools' decisions, pure functions of what the scheduler just said.

Grow: a pending job gets nodes only if the scheduler's own Reason says it waits for capacity
(never for a quota, a dependency, a back-off, an array's limit or a reservation) and the
scheduler's own placement (``place_gang``, the profile's place plugin, the job's topology)
puts it on the cluster as it is plus the nodes the pools could add: the powered-down nodes it
lands on are resumed. A gang that needs 4 whole nodes under one leaf gets 4 in one leaf or
none, since the placement that decides is the one that will start it. Jobs are taken in
arrival order, each placement kept, so that two jobs never count on the same new capacity.

Shrink: an up node idle for its pool's ``suspend_after_s`` is released, never below the pool's
``min``, and never one the growth plan would use."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from random import Random

from gpufleet.core.elastic.book import ElasticBook, ElasticNode, Power
from gpufleet.core.state import NodeRuntime
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import Resources
from gpufleet.scheduler.framework import PlacePlugin
from gpufleet.scheduler.gang import place_gang
from gpufleet.scheduler.request import Shape, shape_of
from gpufleet.scheduler.snapshot import NodeView, PendingJob, Snapshot
from gpufleet.scheduler.workspace import Workspace

C = ReasonCode
# the Reasons that say a job waits for capacity: more nodes could start it
GROWABLE = frozenset(
    {
        C.RESOURCES,
        C.TOPOLOGY,
        C.GPU_MODEL,
        C.PRIORITY,
        C.RESERVED,
        C.HELD,
        C.NEVER,  # never on the nodes up now; perhaps on the pool's max
        C.GROWING,
    }
)
MAX_EXAMINED = 256  # pending jobs placed per decision, in order: a bound on its cost


@dataclass(slots=True)
class Growth:
    """Which powered-down nodes to resume, and which jobs wait on nodes not up yet."""

    resume: list[str] = field(default_factory=list)
    waiting_on: dict[str, tuple[str, ...]] = field(default_factory=dict)  # job → its new nodes
    busy: set[str] = field(default_factory=set)  # up nodes the plan places a job on


def wants_capacity(job: PendingJob, reason: Reason | None, now: float) -> bool:
    """The job waits for capacity alone, as far as the scheduler said (without a Reason, as
    in the simulator's fast mode, from its own facts: dependency, back-off)."""
    if job.waiting_for or job.eligible_time > now:
        return False
    return reason is None or reason.code in GROWABLE


class QuotaRoom:
    """What each queue with a quota of its own (no cohort to borrow from) may still run, the
    jobs planned in this decision counted: the scheduler says NeverSchedulable for the
    cluster's size before it asks the quota, and counts only running jobs, so a pool must not
    grow for jobs their queue could not run together."""

    def __init__(self, queues: Mapping[str, QueueSpec], used: Mapping[str, Resources]) -> None:
        self.queues = queues
        self.used = dict(used)

    def _need(self, job: PendingJob) -> tuple[QueueSpec | None, Resources]:
        s = job.spec
        q = self.queues.get(s.queue)
        if q is None or not q.limited or (q.cohort and q.can_borrow):
            return None, Resources()
        return q, Resources(s.total_gpu_milli, s.cpu_milli * s.workers, s.memory_mib * s.workers)

    def fits(self, job: PendingJob) -> bool:
        q, need = self._need(job)
        return q is None or (self.used.get(q.name, Resources()) + need).fits_in(q.quota)

    def take(self, job: PendingJob) -> None:
        q, need = self._need(job)
        if q is not None:
            self.used[q.name] = self.used.get(q.name, Resources()) + need


def plan_growth(
    pending: Sequence[PendingJob],
    reason_of: Callable[[str], Reason | None],
    now: float,
    up: Sequence[NodeView],
    coming: Sequence[NodeSpec],
    down: Sequence[NodeSpec],
    place: PlacePlugin,
    seed: int = 0,
    quota: QuotaRoom | None = None,
) -> Growth:
    """``up``: the cluster's nodes as they are (after this cycle's starts); ``coming``: nodes
    powering up, counted as free; ``down``: those the pools may resume, in the order to
    prefer. Pure: no I/O, the time and the random seed passed in."""
    out = Growth()
    if not pending or not (coming or down):
        return out
    fresh = [NodeRuntime.of(s).view() for s in (*coming, *down)]
    views = [*up, *fresh]
    new = {v.name for v in fresh}
    resumable = {s.name for s in down}
    ws = Workspace(views)
    place.prepare(Snapshot(now, views, (), ()), ws)
    rng = Random(seed)
    failed: set[Shape] = set()
    examined = 0
    for job in pending:
        if examined >= MAX_EXAMINED:
            break
        if not wants_capacity(job, reason_of(job.id), now):
            continue
        if quota is not None and not quota.fits(job):
            continue
        shape = shape_of(job.spec)
        if shape in failed:
            continue
        examined += 1
        alloc, _ = place_gang(job.spec, ws, place, rng)
        if alloc is None:
            failed.add(shape)  # not even with every node the pools may add
            continue
        nodes = tuple(dict.fromkeys(p.node for p in alloc))
        out.busy.update(n for n in nodes if n not in new)
        needs = tuple(n for n in nodes if n in new)
        if quota is not None:
            quota.take(job)
        if not needs:
            continue  # it fits on the nodes up now: it waits for something else
        out.waiting_on[job.id] = needs
        for n in needs:
            if n in resumable and n not in out.resume:
                out.resume.append(n)
    return out


def to_release(book: ElasticBook, now: float, busy: set[str]) -> list[ElasticNode]:
    """Up nodes idle past their pool's ``suspend_after_s`` that may go (the pool stays at or
    above its ``min``); the highest-numbered first, so the pool shrinks from its end."""
    out: list[ElasticNode] = []
    if not any(n.idle_since is not None for n in book.nodes.values()):
        return out  # the common case, cheaply
    for name, pool in book.pools.items():
        after = pool.spec.suspend_after_s
        idle = [
            n
            for n in book.of_pool(name)
            if n.power is Power.UP
            and n.idle_since is not None
            and now - n.idle_since >= after
            and n.name not in busy
        ]
        spare = book.counted(name) - pool.spec.min
        idle.sort(key=lambda n: n.name, reverse=True)
        out += idle[: max(0, spare)]
    return out


def to_top_up(book: ElasticBook) -> list[ElasticNode]:
    """Powered-down nodes to resume so that each pool has its ``min`` up or on the way."""
    out: list[ElasticNode] = []
    for name, pool in book.pools.items():
        if not pool.spec.min:
            continue
        need = pool.spec.min - book.counted(name)
        if need > 0:
            out += [n for n in book.of_pool(name) if n.power is Power.DOWN][:need]
    return out
