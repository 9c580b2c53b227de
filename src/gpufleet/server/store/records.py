"""What goes into the store and what comes out of it: small frozen dataclasses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gpufleet.core.controller import RestoredJob, RestoredService
from gpufleet.core.state import JobRecord
from gpufleet.model.allocation import Allocation
from gpufleet.model.cluster import NodeSpec
from gpufleet.model.job import Job, JobSpec, JobState
from gpufleet.model.job_end import JobEnd
from gpufleet.model.queue import QueueSpec
from gpufleet.scheduler.snapshot import DefragMove

# metrics: reads /metrics and nothing else (Prometheus's scrape token)
Role = Literal["user", "admin", "agent", "metrics"]
ROLES: tuple[Role, ...] = ("user", "admin", "agent", "metrics")
DEPENDENCY_KINDS = ("afterok", "afterany")


class StoreError(ValueError):
    """A write the store refused (a constraint, an unknown job); nothing of it was stored."""


class StoreUnavailable(Exception):
    """The database did not answer (stopped, unreachable, disk full): nothing is known to have
    been stored, and trying again later may work (HTTP 503). Not a ValueError: a caller that
    maps a refusal to 409 must not take an outage for one."""


class LastAdminToken(StoreError):
    """Revoking this token would leave no active admin token: nobody could manage the cluster."""


class IdempotencyConflict(StoreError):
    """An idempotency key reused for a different job (another user or another spec)."""


@dataclass(frozen=True, slots=True)
class NewJob:
    """A submission. ``array_index`` without ``array_id`` joins the array that this batch
    creates for its ``array_group``: the array's id is the id given to the group's first job
    (Slurm's ``1042_3``). A batch holding several submissions (the server's group commit)
    gives each its own group. Without a ``submit_time`` the job takes the batch's ``now``."""

    spec: JobSpec
    submit_time: float | None = None
    depends_on: tuple[tuple[str, str], ...] = ()  # (afterok|afterany, job id)
    array_id: str | None = None
    array_index: int | None = None
    idempotency_key: str | None = None
    array_group: int = 0
    array_limit: int | None = None  # Slurm's %N: at most N tasks of this array run at once


@dataclass(frozen=True, slots=True)
class SubmitAudit:
    """Who submitted the next ``count`` jobs of a batch: its audit entry is written in the
    transaction that stores them, so an accepted job always has one (and a burst costs one
    commit, not one per request)."""

    actor: str
    actor_role: str
    count: int
    name: str


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """The mutable part of a job row, as the controller holds it after a transition."""

    id: str
    state: JobState
    attempt: int
    retries_used: int
    start_time: float | None
    end_time: float | None
    eligible_time: float
    attained_gpu_s: float
    allocation: Allocation = ()
    borrowing: bool = False
    # the queue it runs (or last ran) in: of a job of several queues, the one it started in
    # (the row's queue column; None: unchanged)
    queue: str | None = None
    ended: JobEnd | None = None
    held: str = ""  # its hold: "user", "admin", "" (ADR 0074)
    spec: JobSpec | None = None  # its spec, changed (scontrol update, ADR 0076); None: as stored

    @staticmethod
    def of(job: Job, allocation: Allocation = (), borrowing: bool = False) -> JobUpdate:
        return JobUpdate(
            job.id,
            job.state,
            job.attempt,
            job.retries_used,
            job.start_time,
            job.end_time,
            job.eligible_time,
            job.attained_gpu_s,
            allocation,
            borrowing,
            job.spec.queue,
            job.ended,
            job.held,
        )

    @staticmethod
    def of_record(rec: JobRecord, spec_changed: bool = False) -> JobUpdate:
        """From the controller's record (``Controller.jobs[id]``); ``spec_changed``: with its
        spec, to be written again."""
        u = JobUpdate.of(rec.job, rec.allocation, rec.borrowing)
        return replace(u, spec=rec.job.spec) if spec_changed else u


@dataclass(frozen=True, slots=True)
class StoredJob:
    id: str
    seq: int  # allocation order: the controller's FIFO tie-break after a restart
    spec: JobSpec
    state: JobState
    attempt: int
    retries_used: int
    submit_time: float
    start_time: float | None
    end_time: float | None
    eligible_time: float
    attained_gpu_s: float
    allocation: Allocation
    borrowing: bool
    depends_on: tuple[tuple[str, str], ...]
    array_id: str | None
    array_index: int | None
    idempotency_key: str | None
    array_limit: int | None = None
    ended: JobEnd | None = None
    held: str = ""

    @property
    def finished(self) -> bool:
        return self.to_job().finished

    def to_job(self) -> Job:
        """The model's Job (without its in-memory history; see ``Store.job_events``)."""
        return Job(
            self.id,
            self.spec,
            self.submit_time,
            self.state,
            self.attempt,
            self.retries_used,
            self.start_time,
            self.end_time,
            self.eligible_time,
            self.attained_gpu_s,
            ended=self.ended,
            held=self.held,
        )

    def to_restored(self) -> RestoredJob:
        """What ``Controller.restore`` takes."""
        return RestoredJob(
            self.to_job(),
            self.seq,
            self.allocation,
            self.borrowing,
            self.depends_on,
            self.array_id,
            self.array_limit or 0,
            self.array_index,
        )


@dataclass(frozen=True, slots=True)
class JobEvent:
    seq: int
    job_id: str
    time: float
    attempt: int
    old: JobState | None
    new: JobState
    why: str


@dataclass(frozen=True, slots=True)
class NodeRecord:
    spec: NodeSpec
    address: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    healthy: bool = True
    drained: bool = False  # written on insert only: registering again never un-drains
    lost: bool = False
    why: str = ""
    last_heartbeat: float | None = None
    driver_version: str = ""
    cuda_version: str = ""
    gpu_info: tuple[Mapping[str, Any], ...] = ()  # per GPU: uuid, model, memory, PCIe, NVLink

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class NodeEventRecord:
    seq: int
    node: str
    time: float
    what: str
    why: str


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: int
    name: str
    role: Role
    user: str | None
    node: str | None
    created_time: float
    revoked_time: float | None

    @property
    def active(self) -> bool:
        return self.revoked_time is None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    seq: int
    time: float
    actor: str
    actor_role: str
    action: str
    target: str
    detail: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """GPU-hours of one user or queue over a period, from the attempts that overlap it."""

    key: str
    gpu_hours: float
    attempts: int
    jobs: int


@dataclass(frozen=True, slots=True)
class RestartState:
    """What the controller needs to rebuild itself: every unfinished job (in ``seq`` order),
    the finished jobs they depend on, the nodes, the queues and the services."""

    jobs: tuple[StoredJob, ...]
    dependencies: tuple[StoredJob, ...]
    nodes: tuple[NodeRecord, ...]
    queues: tuple[QueueSpec, ...]
    services: tuple[RestoredService, ...] = ()
    defrag_moves: tuple[DefragMove, ...] = ()  # each leaf's last move (ADR 0045)

    def restored_jobs(self) -> list[RestoredJob]:
        """What ``Controller.restore`` takes: the unfinished jobs and their dependencies."""
        return [j.to_restored() for j in (*self.dependencies, *self.jobs)]


class Deposed(StoreUnavailable):
    """A write of a controller that no longer leads: another took the leader lease (a higher
    epoch) since. Nothing of it was stored; this controller must step down (ADR 0032)."""


@dataclass(frozen=True, slots=True)
class LeaderRow:
    """The leader lease as stored (``schema.leader``): who leads, under which epoch, and how
    many times it renewed (``version``); ``holder`` empty: nobody leads."""

    epoch: int
    version: int
    holder: str
    address: str
