"""Events into the controller: everything that happens outside it, with the time it happened."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.cluster import NodeSpec
from gpufleet.model.job import JobSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reservation import NodeReservation
from gpufleet.model.service import ServiceSpec

# (job id, attempt, rank): one task of one attempt
TaskKey = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    job_id: str
    spec: JobSpec
    submit_time: float
    depends_on: tuple[tuple[str, str], ...] = ()  # (afterok|afterany, job id)
    oracle_duration_s: float | None = None  # the simulator's knowledge, for the sjf oracle
    array_id: str | None = None  # a task of this array (Slurm's 1042 of 1042_3)
    array_limit: int = 0  # at most this many of the array's tasks run at once (0: no limit)
    array_index: int | None = None  # its index in the array (SLURM_ARRAY_TASK_ID)


@dataclass(frozen=True, slots=True)
class JobCancelled:
    job_id: str
    why: str = "cancelled by user"


@dataclass(frozen=True, slots=True)
class JobHold:
    """A job held or released (Slurm's scontrol hold, uhold, release; ADR 0074): ``held``
    "user" or "admin", "" to release it. Who may is the API's to judge."""

    job_id: str
    held: str
    why: str


@dataclass(frozen=True, slots=True)
class JobAmend:
    """A submitted job's spec changed (Slurm's scontrol update, ADR 0076): ``spec`` replaces
    its spec. What may change, when and by whom is the API's to judge (model/job_amend.py)."""

    job_id: str
    spec: JobSpec
    why: str


@dataclass(frozen=True, slots=True)
class JobRequeue:
    """A running job sent back to pending (Slurm's scontrol requeue, ADR 0076): its attempt
    stopped as a preemption's, then pending again under its id. The API judges who may."""

    job_id: str
    why: str


@dataclass(frozen=True, slots=True)
class JobSignal:
    """A signal to a running job's processes, which it does not end (Slurm's ``scancel
    --signal``, ADR 0078): ``scope`` "steps" (its steps, not the batch shell: scancel's
    default), "batch" (the batch shell alone: ``--batch``) or "full" (the shell, its children
    and the steps: ``--full``). The API judges who may."""

    job_id: str
    signal: int
    scope: str = "steps"


@dataclass(frozen=True, slots=True)
class TaskStarted:
    job_id: str
    attempt: int
    rank: int
    node: str = ""  # who reported it (a start clears that node's suspicion); "" unknown


@dataclass(frozen=True, slots=True)
class TaskExited:
    job_id: str
    attempt: int
    rank: int
    exit_code: int
    why: str = ""  # "killed", "timeout", "preempted", "oom", … as the executor saw it
    # its agent stopped it on the controller's Kill of an eviction (a preemption, a drain's
    # deadline): a controller restarted since, which forgot that stop, requeues the job
    evicted: bool = False


@dataclass(frozen=True, slots=True)
class TaskCheckpointed:
    """A rank's agent saw the job's checkpoint file written ``age_s`` seconds ago (by its own
    clock: an age, not a time, so that no two clocks need agree). Victims are chosen by the
    work since then (scheduler/victims.py)."""

    job_id: str
    attempt: int
    rank: int
    age_s: float = 0.0


@dataclass(frozen=True, slots=True)
class TaskFenced:
    """A node stopped (or refused) a task for the node's sake, not the job's: its agent lost
    its lease and fenced what it ran. The rank is gone, as a reconcile would find; the job is
    requeued, not charged a retry."""

    node: str
    job_id: str
    attempt: int
    rank: int
    why: str = ""


@dataclass(frozen=True, slots=True)
class NodeUp:
    """A node registered (or came back): its spec and whether it passed its health checks."""

    spec: NodeSpec
    healthy: bool = True
    datasets: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class NodeRegistered:
    """An agent (re-)registered: its node is up, what its tasks did while nobody listened comes
    first (``events``), then every rank placed there that it does not list in ``running`` is
    gone. One event, so that no scheduling pass places anything on the node in between."""

    spec: NodeSpec
    running: tuple[TaskKey, ...] = ()
    events: tuple[TaskStarted | TaskExited | TaskFenced, ...] = ()
    # ranks that ran here and ended, as the agent remembers them (``JobMaster.attempts_seen``)
    ended: tuple[TaskKey, ...] = ()
    # ranks it is stopping for an eviction, which a restarted controller knows nothing of
    stopping: tuple[TaskKey, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeLost:
    node: str
    why: str = "heartbeats stopped"


@dataclass(frozen=True, slots=True)
class PowerFailed:
    """An elastic pool's provider could not make the node (its script failed, its process
    would not start): the node is marked failed, as a missed ResumeTimeout would."""

    node: str
    why: str = ""


@dataclass(frozen=True, slots=True)
class NodeHealth:
    node: str
    healthy: bool
    why: str = ""
    bad_gpus: tuple[int, ...] = ()
    # the node's own fault (its data disk full): drained, but what runs there runs on
    jobs_unaffected: bool = False


@dataclass(frozen=True, slots=True)
class NodeHealReport:
    """A node's agent answers a step of the heal loop (``core/heal.py``): its round, the step
    (remediate, burn-in), whether it passed, and what it found."""

    node: str
    round: int
    step: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class NodeDrain:
    node: str
    drain: bool  # False resumes
    why: str = ""
    force: bool = False  # with a resume: back into service even though its checks still fail
    # with a drain: also stop the jobs running there now, requeued and not charged (rolling
    # maintenance past its drain deadline), each as a preemption stops it (its checkpoint
    # notice, then SIGTERM and SIGKILL after the grace)
    requeue: bool = False
    # with a drain: what still runs there this many seconds later is stopped so (None: it
    # runs on)
    deadline_s: float | None = None


@dataclass(frozen=True, slots=True)
class NodeAccounts:
    """What a node that runs tasks as their owners found of users' Unix accounts (NSS on the
    node): (user, uid or None for no account) each; ``checks`` False: the node runs every task
    as its agent's own user, and keeps no job off for its user (scheduler/identity.py)."""

    node: str
    answers: tuple[tuple[str, int | None], ...] = ()
    checks: bool = True
    forget: tuple[str, ...] = ()  # users no longer asked about: their answers dropped everywhere


@dataclass(frozen=True, slots=True)
class QueueChanged:
    """An admin set a queue's weight, cohort or quota (already stored): the next pass uses it."""

    spec: QueueSpec


@dataclass(frozen=True, slots=True)
class ReservationSet:
    """An admin created (or replaced) an advance reservation (already stored)."""

    spec: NodeReservation


@dataclass(frozen=True, slots=True)
class ReservationRemoved:
    """An admin removed an advance reservation (already stored)."""

    name: str


@dataclass(frozen=True, slots=True)
class TimerFired:
    kind: str  # "timelimit" | "backoff" | "launch" | "tick"
    job_id: str = ""
    attempt: int = 0


# ----- services (core/services/) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceCreated:
    """A service was stored: its replicas are created (``initial_replicas`` of them).
    ``first_index``: its first replica's number (after those of an earlier service of the same
    name, whose jobs the store keeps: a job id is never used twice)."""

    spec: ServiceSpec
    first_index: int = 1


@dataclass(frozen=True, slots=True)
class ServiceUpdated:
    """A new spec for a service: a changed replica (template, port, probes) rolls out as a new
    generation; counts, autoscaling, rollout and back-off settings apply at once."""

    spec: ServiceSpec


@dataclass(frozen=True, slots=True)
class ServiceScaled:
    """Set the desired count (within min and max when the service autoscales)."""

    name: str
    replicas: int


@dataclass(frozen=True, slots=True)
class ServiceDeleted:
    name: str


@dataclass(frozen=True, slots=True)
class ReplicaProbe:
    """An agent's probe runner changed its verdict on a replica (thresholds applied there, as
    the kubelet does): ``readiness`` ok/not ok (in or out of the routes), ``liveness`` not ok
    (the replica is killed and replaced). A report on another attempt changes nothing."""

    job_id: str
    attempt: int
    kind: str  # "readiness" | "liveness"
    ok: bool
    why: str = ""


@dataclass(frozen=True, slots=True)
class ServiceLoad:
    """The gateway's measured request rate of a service (requests per second) at ``now``,
    and its client connections open then (a desktop's WebSocket is one long request)."""

    name: str
    qps: float
    now: float
    connections: int = 0


@dataclass(frozen=True, slots=True)
class GpuUtilization:
    """The GPU utilization (DCGM_FI_DEV_GPU_UTIL, percent) of each running attempt's GPUs, from
    its nodes' latest samples, as /metrics shows them: the idle-GPU policy's input
    (core/idle.py). Sent by the controller's service at its own cadence."""

    samples: tuple[tuple[str, int, tuple[float, ...]], ...]  # (job id, attempt, per GPU)


# what a user asks of a job of theirs (the JobMaster's ``request``)
JobRequest = JobCancelled | JobHold | JobAmend | JobRequeue | JobSignal

Event = (
    JobSubmitted
    | JobCancelled
    | JobHold
    | JobAmend
    | JobRequeue
    | JobSignal
    | TaskStarted
    | TaskExited
    | TaskFenced
    | TaskCheckpointed
    | NodeUp
    | NodeRegistered
    | NodeLost
    | PowerFailed
    | NodeHealth
    | NodeHealReport
    | NodeDrain
    | NodeAccounts
    | QueueChanged
    | ReservationSet
    | ReservationRemoved
    | TimerFired
    | ServiceCreated
    | ServiceUpdated
    | ServiceScaled
    | ServiceDeleted
    | ReplicaProbe
    | ServiceLoad
    | GpuUtilization
)
