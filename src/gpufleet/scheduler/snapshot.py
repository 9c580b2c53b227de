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
from gpufleet.model.resources import Resources

if TYPE_CHECKING:
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

    def attained(self, now: float) -> float:
        """GPU-seconds of service so far, this attempt included."""
        return self.attained_gpu_s + self.lost_work(now)

    @property
    def expected_end(self) -> float | None:
        if self.stopping_since is not None:
            return self.stopping_since
        limit = self.spec.time_limit_s
        return None if limit is None else self.start_time + limit

    def lost_work(self, now: float) -> float:
        """GPU-seconds that preempting this job now would throw away (since its last start)."""
        return (now - self.start_time) * self.spec.total_gpu_milli / 1000


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
