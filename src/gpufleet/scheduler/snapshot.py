"""The immutable input of one scheduling cycle.

The core builds a Snapshot from its state; the cycle reads it and never changes it. Sequences may
be the core's own tuples (no copy per cycle): the contract is that nobody mutates them meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpufleet.model.allocation import Allocation
from gpufleet.model.job import JobSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reservation import NodeReservation
from gpufleet.model.resources import Resources
from gpufleet.scheduler.arrivals import ArrivalHistory
from gpufleet.scheduler.runtime_history import RuntimeHistory
from gpufleet.scheduler.start_errors import StartErrors

if TYPE_CHECKING:
    from gpufleet.scheduler.identity import Accounts
    from gpufleet.scheduler.workspace import Workspace


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    leaf: str
    pod: str
    gpu_model: str
    gpu_free: tuple[int, ...]  # free milli of each device, 0..1000
    cpu_free: int
    mem_free: int
    cpu_total: int
    mem_total: int
    schedulable: bool = True  # healthy, not drained, not lost
    labels: tuple[tuple[str, str], ...] = ()
    datasets: frozenset[str] = frozenset()  # datasets cached on the node (locality)
    features: frozenset[str] = frozenset()  # Slurm's node features (-C)
    gres_type: str = ""  # the GPU type name --gres=gpu:TYPE matches here

    @property
    def gpus(self) -> int:
        return len(self.gpu_free)


@dataclass(frozen=True, slots=True)
class ServiceMark:
    """What Tiresias' starvation rule needs of a job across its attempts, kept by the core (an
    order's ``started`` hook sets it at each start; the core stamps ``stopped_at`` at each
    attempt's end). Not stored: a restarted controller starts every job's mark afresh."""

    base_gpu_s: float = 0.0  # its attained service when last promoted: levels count from here
    waited_s: float = 0.0  # time pending after a run since that promotion, to its last start
    stopped_at: float | None = None  # when its last attempt ended; None: never ran
    aged: bool = False  # it started past LAS' age limit: kept running, first level, to its end

    def waited(self, now: float) -> float:
        """Time pending after a run since the last promotion, the current wait included."""
        return self.waited_s + (now - self.stopped_at if self.stopped_at is not None else 0.0)


NO_MARK = ServiceMark()


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: str
    spec: JobSpec
    allocation: Allocation
    start_time: float
    borrowing: bool = False  # admitted beyond its queue's nominal quota
    attained_gpu_s: float = 0.0  # service received in earlier attempts (LAS)
    # its stop began then (its outcome decided, its ranks being killed): its devices count as
    # freed from then on, for a reservation and an estimate, whatever its time limit
    stopping_since: float | None = None
    # when this attempt last wrote its checkpoint (its agent's report); None: not since start
    checkpoint_time: float | None = None
    mark: ServiceMark = NO_MARK  # as of this attempt's start (LAS' starvation rule)
    # a service's replica: moved make-before-break, it loses no work (defrag counts none)
    replica: bool = False

    def attained(self, now: float) -> float:
        """GPU-seconds of service so far, this attempt included."""
        return self.attained_gpu_s + (now - self.start_time) * self.spec.total_gpu_milli / 1000

    @property
    def saved_since(self) -> float:
        """Where a preemption now would send the job back to: its last checkpoint in this
        attempt, else the attempt's start."""
        c = self.checkpoint_time
        return self.start_time if c is None or c < self.start_time else c

    def protected(self, now: float) -> bool:
        """Not yet to be preempted: it has run less than the ``min_runtime_s`` it asked for."""
        return now - self.start_time < self.spec.min_runtime_s

    @property
    def expected_end(self) -> float | None:
        if self.stopping_since is not None:
            return self.stopping_since
        limit = self.spec.time_limit_s
        return None if limit is None else self.start_time + limit

    def lost_work(self, now: float) -> float:
        """GPU-seconds that preempting this job now would throw away: those since its last
        checkpoint (``saved_since``)."""
        return (now - self.saved_since) * self.spec.total_gpu_milli / 1000


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: str
    spec: JobSpec
    submit_time: float
    seq: int = 0  # arrival order among equal submit times
    attained_gpu_s: float = 0.0  # service received in earlier attempts (LAS)
    eligible_time: float = 0.0  # retry back-off: not before this time
    waiting_for: str = ""  # an unmet dependency, explained as is
    oracle_duration_s: float | None = None  # known only to the simulator (for sjf)
    nominated: bool = False  # an earlier cycle preempted jobs to make room for this one
    throttled: bool = False  # ``waiting_for`` is its array's task limit, not a dependency
    mark: ServiceMark = NO_MARK  # LAS' starvation rule: service and waits since a promotion
    # ``waiting_for`` is a dependency that can never be met (an afterok job that did not
    # succeed): Slurm's DependencyNeverSatisfied; it waits until its user cancels it
    never_met: bool = False
    # its dependencies not met yet, in Slurm's words (``afterok:1(failed)``): its Reason's
    # data, which ``scontrol show job`` prints as ``Dependency=``
    deps: tuple[str, ...] = ()
    # ``waiting_for`` is a hold ("user" or "admin": Slurm's JobHeldUser, JobHeldAdmin)
    held: str = ""
    # the id of the array it is a task of ("": none): Slurm keeps an array's pending tasks as
    # one job, with one reason (scheduler/slurm_words.py)
    array: str = ""


@dataclass(frozen=True, slots=True)
class DefragMove:
    """A defragmentation move the core made (``preempt/defrag``): when, under which leaf, for
    which pending job, the victims it stopped and the Reason it gave. Stored (``DefragMoved``), so
    that a restarted controller keeps its moves in progress."""

    leaf: str
    time: float
    for_job: str
    victims: tuple[str, ...]
    message: str  # "moving 3 jobs to free 2 nodes under leaf-4"
    data: Mapping[str, object] = field(default_factory=dict)
    # victims that stop only once their replacements are ready (service replicas moved
    # make-before-break)
    replacing: tuple[str, ...] = ()
    # each victim's attempt (as ``victims``): a restarted controller stops again only those
    # still in it, and holds the freed leaf for ``for_job`` (the store keeps the move)
    attempts: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PendingIndex:
    """What a cycle would otherwise scan every pending job for, kept by the caller as jobs come
    and go (the core does). Given only with a ``Snapshot.pending`` sorted by
    ``(submit_time, seq)``, and must agree with it."""

    by_queue: Mapping[str, Sequence[PendingJob]]  # each queue's pending jobs, same order
    ready: bool  # no job waits for a dependency or has a back-off time (eligible_time > 0)
    whole_only: bool  # every job wants whole GPUs
    nominated: int  # jobs with ``nominated`` set
    one_priority: bool = False  # every job has the same priority


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: Sequence[NodeView]
    running: Sequence[RunningJob]
    pending: Sequence[PendingJob]  # in arrival order
    queues: Mapping[str, QueueSpec] = field(default_factory=dict)
    usage: Mapping[str, float] = field(default_factory=dict)  # decayed past usage, share·s
    cycle: int = 0
    # What the running jobs hold per queue, when the caller keeps it incrementally (the core
    # does); None: the cycle adds it up from ``running``. Must equal that sum.
    queue_used: Mapping[str, Resources] | None = None
    # What the schedulable nodes hold in all, when the caller keeps it (the core does); None:
    # the cycle adds it up from ``nodes``. Must equal that sum.
    capacity: Resources | None = None
    # ``Workspace(nodes)`` when the caller keeps one (``Workspace.refreshed``, as the core does):
    # the cycle works on a copy of it instead of indexing every node again. Never changed.
    workspace: Workspace | None = None
    pending_index: PendingIndex | None = None
    # (expected end, allocation) of the running jobs with a time limit, by end (ties in the order
    # of ``running``), when the caller keeps them so (the core does); None: the cycle sorts.
    ends: Sequence[tuple[float, Allocation]] | None = None
    # the advance reservations (maintenance windows) that have not ended (scheduler/reservations)
    reservations: Sequence[NodeReservation] = ()
    # the Unix accounts the nodes that run tasks as their owners found (scheduler/identity);
    # None: no node checks, no job is kept off a node for its user
    accounts: Accounts | None = None
    # what the cluster's finished jobs ran for (the core keeps it): the start plan's run times;
    # None: every job runs to its time limit
    history: RuntimeHistory | None = None
    # the jobs submitted over the last hours (the core keeps them): the start plan's forecast of
    # what will arrive (``Profile.plan_arrivals``); None: nothing forecast
    arrivals: ArrivalHistory | None = None
    # how the estimated starts came out so far (the core keeps it; the plan tells it what it
    # estimated): each estimate calibrated and banded; None: the plan's starts as they are
    start_errors: StartErrors | None = None
    # each leaf's last defragmentation move (the core keeps them, in memory): its time bounds
    # how often ``preempt/defrag`` acts, and its gang's Reason says it while the victims stop
    defrag_moves: Mapping[str, DefragMove] = field(default_factory=dict)
