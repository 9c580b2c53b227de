"""Commands out of the controller: what the executor (agents, or the simulator) must do.

``Transition`` commands come first in a batch and must be made durable before the commands
after them are carried out: the store is the truth."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufleet.core.launch_env import JobFacts, rank_env
from gpufleet.model.allocation import Allocation
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.elastic import Provider
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.notice import StopNotice

if TYPE_CHECKING:
    from gpufleet.core.services import RestoredService
    from gpufleet.scheduler.snapshot import DefragMove


@dataclass(frozen=True, slots=True)
class Transition:
    job_id: str
    attempt: int
    old: JobState | None
    new: JobState
    time: float
    why: str = ""
    # the job's spec changed with it (scontrol update, ADR 0076): the store writes the spec
    spec_changed: bool = False


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
    # a preemption's notice (model/notice.py): the job's signal, then up to its wait for the
    # checkpoint file, before the SIGTERM; None: SIGTERM at once
    notice: StopNotice | None = None


@dataclass(frozen=True, slots=True)
class Signal:
    """``signal`` to these ranks of the attempt, which go on running (``JobSignal``): whom on
    each node ``scope`` says (steps, batch, full)."""

    job_id: str
    attempt: int
    ranks: tuple[int, ...]
    signal: int
    scope: str = "steps"


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


@dataclass(frozen=True, slots=True)
class HealOrder:
    """A step of the heal loop for a node's agent (``core/heal.py``): ``remediate`` by
    ``remedy`` (a GPU reset, or the site's ``command``), or ``burn-in`` for ``burn_in_s``
    seconds, with the network layer against ``peer`` ("" for none)."""

    node: str
    round: int
    step: str  # "remediate" | "burn-in"
    remedy: str = "reset"
    command: tuple[str, ...] = ()
    burn_in_s: float = 0.0
    peer: str = ""
    timeout_s: float = 900.0  # the step's bound (the core fails it at this deadline)
    net_limits: tuple[float, float] = (1.0, 2.0)  # the link's least Gb/s, most RTT ms


# ----- elastic pools (core/elastic/) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PowerUp:
    """Ask the pool's provider for these nodes (Slurm's ResumeProgram): each node's agent
    registers itself; a provider that fails says so with ``PowerFailed``."""

    pool: str
    provider: Provider
    nodes: tuple[NodeSpec, ...]
    why: str = ""


@dataclass(frozen=True, slots=True)
class PowerDown:
    """Release these nodes (Slurm's SuspendProgram): they run nothing (idle, failed or lost)."""

    pool: str
    provider: Provider
    nodes: tuple[str, ...]
    why: str = ""


# ----- services (core/services/) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaAdded:
    """The ServiceMaster made a replica job (its Transition to PENDING follows): the store keeps
    the job with this spec and its link to the service and generation."""

    service: str
    job_id: str
    generation: int
    spec: JobSpec


@dataclass(frozen=True, slots=True)
class RouteBackend:
    """One ready replica: the node it runs on (the server knows its address) and its port."""

    job_id: str
    node: str
    port: int


@dataclass(frozen=True, slots=True)
class Routes:
    """The service's ready replicas changed: the gateway balances over exactly these now
    (empty: no backend; a deleted service's last Routes is empty)."""

    service: str
    backends: tuple[RouteBackend, ...]


@dataclass(frozen=True, slots=True)
class ServiceEvent:
    """Something a person wants to see about a service (its history, the audit log)."""

    service: str
    what: str  # "created", "updated", "scaled", "rollout", "rolled out", "rolled back",
    # "replica ready", "replica not ready", "replica failed", "deleting", "removed"
    time: float
    why: str = ""


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    """What the store must hold of a service for a restart to rebuild it (``RestoredService``),
    written whenever it changed; ``None``: the service is gone, its row is deleted."""

    service: str
    record: RestoredService | None


@dataclass(frozen=True, slots=True)
class DefragMoved:
    """A defragmentation move made (ADR 0045): the store keeps each leaf's last, so that a
    restarted controller knows the moves in progress (``Controller.restore(defrag_moves=)``):
    their victims still stopping, the gangs they free a leaf for, the "how often" bounds."""

    move: DefragMove


@dataclass(frozen=True, slots=True)
class IdleNotice:
    """A job's GPUs have sat idle past a step of its queue's policy (core/idle.py): ``stage``
    "warn" (the ``n``th warning) or the action taken ("cancel", "requeue", or "warn" once the
    action time passed under a warn-only policy). The site's hook hears of it (mail, chat)."""

    job_id: str
    user: str
    queue: str
    stage: str
    n: int
    idle_s: float
    act_at_s: float
    action: str
    why: str


Command = (
    Transition
    | Launch
    | Kill
    | Signal
    | SetTimer
    | DropLaunches
    | NodeEvent
    | HealOrder
    | PowerUp
    | PowerDown
    | ReplicaAdded
    | Routes
    | ServiceEvent
    | ServiceRecord
    | IdleNotice
    | DefragMoved
)
