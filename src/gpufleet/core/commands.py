"""Commands out of the controller: what the executor (agents, or the simulator) must do.

``Transition`` commands come first in a batch and must be made durable before the commands
after them are carried out: the store is the truth."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.core.launch_env import JobFacts, rank_env
from gpufleet.model.allocation import Allocation
from gpufleet.model.job import JobState


@dataclass(frozen=True, slots=True)
class Transition:
    job_id: str
    attempt: int
    old: JobState | None
    new: JobState
    time: float
    why: str = ""


@dataclass(frozen=True, slots=True)
class Launch:
    job_id: str
    attempt: int
    allocation: Allocation  # one placement per rank, rank order
    seq: int  # the job's number (its MASTER_PORT is drawn from it)
    skip: frozenset[int] = frozenset()  # ranks counted as gone before this was handed on

    @property
    def env(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        """Per rank, the launcher's environment; made when an executor asks (the simulator's
        never does, and made for every start it cost the replay 2 %)."""
        return rank_env(self.job_id, self.seq, self.attempt, self.allocation)

    def environment(self, facts: JobFacts) -> tuple[tuple[tuple[str, str], ...], ...]:
        """Per rank, the whole environment a task is given: the ranks and the job's facts
        (its name, queue, CPUs, memory, array; ``Controller.launch_facts``)."""
        return rank_env(self.job_id, self.seq, self.attempt, self.allocation, facts)


@dataclass(frozen=True, slots=True)
class Kill:
    job_id: str
    attempt: int
    ranks: tuple[int, ...]
    why: str  # "cancelled", "timeout", "preempted", "gang member failed", "node lost"


@dataclass(frozen=True, slots=True)
class SetTimer:
    at: float
    kind: str
    job_id: str = ""
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class DropLaunches:
    """A node registered again: launches for it not yet delivered, other than of the tasks it
    runs (``keep``), were counted as gone by the reconcile and must never start."""

    node: str
    keep: frozenset[tuple[str, int, int]]


@dataclass(frozen=True, slots=True)
class NodeEvent:
    node: str
    what: str  # "lost", "drained", "resumed", "unhealthy", "healthy", "suspect", "trusted"
    time: float
    why: str = ""


Command = Transition | Launch | Kill | SetTimer | DropLaunches | NodeEvent
