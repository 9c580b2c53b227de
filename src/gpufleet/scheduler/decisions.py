"""What a cycle decides: starts, preemptions, a reservation, and a Reason per waiting job."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpufleet.model.allocation import Allocation
from gpufleet.model.reason import Reason
from gpufleet.scheduler.snapshot import PendingJob

if TYPE_CHECKING:
    from gpufleet.scheduler.estimate import StartPlan


class Reasons(Mapping[str, Reason]):
    """Every waiting job's Reason. The cycle sets those it works out; the jobs it never reached
    get theirs from ``defer``'s function (shared Reasons, worked out once per shape) only when
    someone asks, so a pass over 100,000 pending jobs costs what it examined, not 100,000
    assignments. Read-only once the cycle has ended."""

    __slots__ = ("_by_id", "_given", "_pending", "_plan", "_rest", "_skip")

    def __init__(self, given: Mapping[str, Reason] | None = None) -> None:
        self._given: dict[str, Reason] = dict(given or {})
        self._pending: Sequence[PendingJob] = ()
        self._skip: Callable[[str], bool] = lambda _: True
        self._rest: Callable[[PendingJob], Reason] | None = None
        self._by_id: dict[str, PendingJob] | None = None
        self._plan: StartPlan | None = None

    def __setitem__(self, job_id: str, reason: Reason) -> None:
        self._given[job_id] = reason

    def defer(
        self,
        pending: Sequence[PendingJob],
        skip: Callable[[str], bool],
        rest: Callable[[PendingJob], Reason],
    ) -> None:
        """The jobs of ``pending`` without a Reason yet, and not ``skip``ped (they started),
        get ``rest(job)`` when asked for; ``rest`` must be a pure function of the job."""
        self._pending, self._skip, self._rest, self._by_id = pending, skip, rest, None

    def reword_rest(self, words: Callable[[PendingJob, Reason], Reason]) -> None:
        """The deferred Reasons as ``words`` changes each (Slurm's reason, worked out when
        asked for as the Reason itself is); ``words`` must be a pure function too."""
        rest = self._rest
        if rest is not None:
            self._rest = lambda job: words(job, rest(job))

    def estimate_with(self, plan: StartPlan) -> None:
        """Each Reason read gets its job's estimated start from ``plan`` (worked out on the
        first read: a cycle nobody asks about costs nothing)."""
        self._plan = plan

    def raw(self, job_id: str) -> Reason | None:
        """The Reason without an estimated start from the plan (what the plan is made from)."""
        r = self._given.get(job_id)
        if r is not None:
            return r
        job = self._deferred().get(job_id)
        return None if job is None or self._rest is None else self._rest(job)

    def _deferred(self) -> dict[str, PendingJob]:
        if self._by_id is None:
            given, skip = self._given, self._skip
            self._by_id = (
                {}
                if self._rest is None
                else {p.id: p for p in self._pending if p.id not in given and not skip(p.id)}
            )
        return self._by_id

    def __getitem__(self, job_id: str) -> Reason:
        r = self.raw(job_id)
        if r is None:
            raise KeyError(job_id)
        if self._plan is not None:
            e = self._plan.get(job_id)
            # a Reason's own estimate (a reservation's end) stands where it is the earlier one
            if e is not None and (r.estimated_start is None or e.at <= r.estimated_start):
                return self._plan.shown(job_id, r, e)
        return r

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._given or job_id in self._deferred()

    def __iter__(self) -> Iterator[str]:
        yield from self._given
        yield from self._deferred()

    def __len__(self) -> int:
        return len(self._given) + len(self._deferred())


@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    allocation: Allocation
    borrowing: bool = False
    # the queue it starts in: its spec's queue, or for a job of several queues (Slurm's
    # -p a,b) the one that admitted it; "" (a Start made by hand): its spec's queue
    queue: str = ""


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str  # the victim
    for_job: str
    reason: str
    # the topology domain (leaf) a defragmentation move frees; "" for any other preemption
    domain: str = ""


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: str
    start_time: float
    allocation: Allocation  # where it will start, as far as known now


@dataclass(slots=True)
class CycleResult:
    cycle: int
    now: float
    starts: list[Start] = field(default_factory=list)
    preemptions: list[Preempt] = field(default_factory=list)
    reservation: Reservation | None = None
    reasons: Reasons = field(default_factory=Reasons)
    examined: int = 0  # pending jobs the cycle looked at
    free_whole_gpus: int = -1  # fully free devices on schedulable nodes when the cycle ended

    @property
    def started_ids(self) -> list[str]:
        return [s.job_id for s in self.starts]
