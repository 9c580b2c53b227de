"""What a cycle decides: starts, preemptions, a reservation, and a Reason per waiting job."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.model.allocation import Allocation
from gpufleet.model.reason import Reason


@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    allocation: Allocation
    borrowing: bool = False


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str  # the victim
    for_job: str
    reason: str


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
    reasons: dict[str, Reason] = field(default_factory=dict)
    examined: int = 0  # pending jobs the cycle looked at
    free_whole_gpus: int = -1  # fully free devices on schedulable nodes when the cycle ended

    @property
    def started_ids(self) -> list[str]:
        return [s.job_id for s in self.starts]
