"""Request and response bodies of ``/api/v1``. Validation of job specs themselves stays in
``gpufleet.model`` (one place says what a valid job is); these are the envelopes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.api.bounds import (
    CleanJson,
    Count,
    Int64,
    Line,
    LogText,
    Name,
    NonNegative,
    OptName,
    Reason,
    SmallCount,
    Text,
)
from gpufleet.api.idle import IdlePolicyOut as IdlePolicyOut
from gpufleet.api.jobend import JobEndOut as JobEndOut
from gpufleet.api.jobend import LogOut as LogOut
from gpufleet.api.jobmetrics import JobMetricsIn, JobMetricsOut
from gpufleet.api.jobspec import JobSpecIn, documented_as
from gpufleet.api.jobspec_out import JobSpecOut
from gpufleet.api.queues import QueueOut as QueueOut
from gpufleet.api.queues import QueueUpdate as QueueUpdate
from gpufleet.api.specclean import CleanSpec

Role = Literal["user", "admin", "agent", "metrics"]  # metrics: GET /metrics only
MAX_LIST = 10_000  # tasks, events and dependencies in one request
MAX_ACCOUNTS = 4096  # users a node is asked about at once (its recent users: server/identity.py)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Input(Strict):
    """A request body: every field bounded (``api/bounds.py``), NaN and infinities refused,
    and no type guessed: "1" is not a number, nor 1.0 a string (strict)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


# ----- users ------------------------------------------------------------------------------


class Dependency(Input):
    type: Literal["afterok", "afterany"]
    job: Name


class JobSubmit(Input):
    # a JobSpec mapping (its schema: jobspec.JobSpecIn), read by JobSpec.from_dict; every
    # string and number in it is checked first, and with any such problem the rest of it is
    # read too, so that all problems are reported together (specclean.py)
    spec: Annotated[dict[str, Any], CleanSpec, documented_as(JobSpecIn, "validation")]
    array: Text | None = Field(
        None,
        description="Slurm-style array: '0-9', '1,3,5', '0-15%4'; at most the controller's "
        "--max-array-size tasks (default 1001)",
    )
    depends_on: list[Dependency] = Field(default=[], max_length=MAX_LIST)
    idempotency_key: Annotated[Text, Field(max_length=128)] | None = None
    # a validation probe (admin tokens only): the job runs as the controller's probe account
    # (--probe-account, default gpufleet-probe), not as the token's name
    probe: bool = False


class SubmitResult(Strict):
    ids: list[str]


class PlacementOut(Strict):
    node: str
    gpus: list[int]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int


class ReasonOut(Strict):
    code: str
    message: str
    data: dict[str, Any] = {}
    estimated_start: float | None = None
    estimated_start_at: str | None = None  # the same, ISO 8601 in UTC
    start_bound: str = ""  # "reserved" (at the latest) | "planned" (the queue played forward)
    # 80 % of such estimates' starts fell in [start_low, start_high] (the cluster's history)
    start_low: float | None = None
    start_high: float | None = None
    # Slurm's word for it where the job's place in the queue makes it other than the code
    # (Priority behind a job of its queue that waits for resources); "": the code
    slurm: str = ""


JobStateName = Literal[
    "PENDING",
    "STARTING",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
    "TIMED_OUT",
    "PREEMPTED",
    "NODE_LOST",
]


class EventOut(Strict):
    time: float
    attempt: int
    state: JobStateName
    why: str = ""


class JobOut(Strict):
    id: str
    name: str
    user: str
    queue: str
    state: JobStateName
    attempt: int
    retries_used: int
    submit_time: float
    start_time: float | None = None
    end_time: float | None = None
    gpus: float
    workers: int
    # the stored shape (its schema: jobspec.JobSpecOut); a plain mapping for the SDK's callers
    spec: Annotated[dict[str, Any], documented_as(JobSpecOut, "serialization")]
    placement: list[PlacementOut] = []
    reason: ReasonOut | None = None
    events: list[EventOut] | None = None  # only in GET /jobs/{id}
    # a task of an array: the array's id (its first task's, as Slurm's ArrayJobId) and index
    array_id: str | None = None
    array_index: int | None = None
    metrics: JobMetricsOut | None = None  # what its metrics file said last (api/jobmetrics.py)
    ended: JobEndOut | None = None  # how it ended, once it has (api/jobend.py)


class NodeOut(Strict):
    name: str
    # idle | mixed | allocated | drained | suspect | unhealthy | lost; an elastic pool's node
    # not up: powered_down | powering_up | powering_down | power_failed
    state: str
    gpu_model: str
    gpus: int
    gpus_free: float
    cpu_cores: float
    cpu_free: float
    memory_gib: float
    memory_free_gib: float
    leaf: str
    pod: str
    why: str = ""
    labels: dict[str, str] = {}
    features: list[str] = []  # Slurm's node features (what -C matches)
    gres_type: str = ""  # the GPU type name --gres=gpu:TYPE matches here
    last_heartbeat: float | None = None
    jobs: list[str] = []
    # what the agent registered with (``gpufleet validate`` compares nodes with these)
    address: str = ""
    driver_version: str = ""
    cuda_version: str = ""
    gpu_info: list[GpuInfo] = []
    # the advance reservation it is in now ("": none), and whether it is a maintenance window
    reservation: str = ""
    maint: bool = False


class DrainRequest(Input):
    reason: Annotated[Line, Field(max_length=500)] = "drained by admin"
    # what still runs there this many seconds from now is stopped as a preemption stops it
    # (each job's checkpoint notice), and requeued, not charged; None: it runs on
    deadline_s: Annotated[float, Field(ge=0, le=30 * 86400)] | None = Field(
        None,
        description="seconds from now: what still runs there then is stopped as a preemption "
        "stops it (each job's checkpoint notice) and requeued, not charged",
    )


class AccountingRow(Strict):
    key: str  # the user or the queue
    jobs: int
    gpu_hours: float  # allocated: the attempts' GPUs times their time in the period
    # used: the GPU-time weighted by the GPUs' utilization (DCGM_FI_DEV_GPU_UTIL), per hour
    used_gpu_hours: float = 0.0


class TokenCreate(Input):
    name: Annotated[Name, Field(min_length=1, max_length=100)]
    role: Role
    user: Name | None = None  # for user tokens: whose jobs it may touch
    node: Name | None = None  # for agent tokens: the only node it may report for


class TokenOut(Strict):
    name: str
    role: Role
    user: str | None = None
    node: str | None = None
    token: str | None = None  # shown once, on creation


class AuditOut(Strict):
    time: float
    actor: str
    action: str
    target: str
    detail: dict[str, Any] = {}


class FieldProblem(Strict):
    field: str  # where: "body.spec.env.FOO", "query.offset", "path.job_id"
    message: str


class ErrorOut(Strict):
    """The body of every 4xx and 5xx the API returns."""

    detail: str  # for people: every problem, "field: message; …"
    errors: list[FieldProblem] = []  # for programs: one entry per field at fault


# ----- agents -----------------------------------------------------------------------------


class GpuInfo(Input):
    index: SmallCount  # the node's GPU index: NVML's, a MIG GPU's MIG devices in its place
    uuid: OptName
    model: OptName  # the catalog's name ("H100-SXM")
    name: OptName = ""  # NVML's device name ("NVIDIA H100 80GB HBM3"), dcgm-exporter's modelName
    memory_mib: Count
    pci_bus_id: OptName = ""
    pcie_gen: SmallCount = 0
    pcie_width: SmallCount = 0
    nvlink_up: SmallCount = 0
    # a MIG device (a slice of a GPU in MIG mode; uuid "MIG-…", model "H200-1g.18gb"): its
    # profile, its index among its parent's MIG devices, and its parent's NVML index and UUID
    mig_profile: OptName = ""
    mig_index: SmallCount | None = None
    parent_index: SmallCount | None = None
    parent_uuid: OptName = ""


class AgentRegister(Input):
    node: Name
    address: Text  # where other ranks reach this node (MASTER_ADDR)
    gpu_model: OptName
    gpus: list[GpuInfo] = Field(max_length=64)  # a node's most (model.cluster)
    cpu_cores: NonNegative = Field(le=100_000)
    memory_gib: NonNegative = Field(le=1 << 20)
    leaf: Name = "leaf-0"
    pod: Name = "pod-0"
    labels: dict[Name, Text] = Field(default={}, max_length=1024)
    # Slurm's node features (what -C matches), the site's GPU type name (--gres=gpu:TYPE; "")
    features: list[Name] = Field(default=[], max_length=64)
    gres_type: OptName = ""
    driver_version: OptName = ""
    cuda_version: OptName = ""
    # the container runtimes it has (apptainer, enroot, podman, docker), the one it uses first
    container_runtimes: list[OptName] = Field(default=[], max_length=8)
    # tasks it still runs (after a controller restart)
    running: list[TaskRef] = Field(default=[], max_length=MAX_LIST)
    # task events not yet acknowledged (exits while the controller was away): applied before
    # ``running`` is reconciled, so a task that finished meanwhile is not taken for lost
    events: list[AgentEvent] = Field(default=[], max_length=MAX_LIST)
    # the latest exits it remembers, reported before or not: a controller restored from a
    # backup that still holds one of these ranks running here takes the exit (not a loss)
    ended: list[AgentEvent] = Field(default=[], max_length=MAX_LIST)
    stopping: list[TaskRef] = Field(default=[], max_length=MAX_LIST)  # for an eviction (notice)
    # it runs each task as its owner's Unix account (a root agent): the controller asks it
    # about its users' accounts ("accounts" commands) and keeps jobs off where one is missing
    runs_as_owner: bool = False


class AccountAnswers(Input):
    """A node's answers to an "accounts" command: each user's uid there, or None (no account;
    NSS on the node said so). Bounded: the controller asks about its recent users only."""

    answers: dict[Name, Annotated[int, Field(ge=0, le=2**32 - 1)] | None] = Field(
        max_length=MAX_ACCOUNTS
    )


class UserAccountsOut(Strict):
    """What the nodes that run tasks as their owners said of a user's Unix account (ADR 0037):
    its uid on each (null: no account there), the nodes that have not answered, and the
    words for a UID that differs between nodes ("" when it does not)."""

    user: str
    nodes: dict[str, int | None]
    not_answered: list[str] = []
    uid_mismatch: str = ""


class RegisterResult(Strict):
    lease_s: float
    heartbeat_s: float
    # the SIGTERM → SIGKILL grace of fencing that the controller's node-loss timing counts on
    fence_grace_s: float | None = None
    # how long without us the agent keeps its tasks (refusing launches past the lease), which
    # the node grace counts on; None: an older controller, the tasks are fenced at the lease
    outage_tolerance_s: float | None = None
    epoch: int = 0  # this registration's number: launches sent under an older one are stale
    # the leader's epoch (high availability, ADR 0032; 0: one controller): an agent refuses
    # every command of a lower one than the highest it has seen
    term: int = 0


class Health(Input):
    healthy: bool = True
    why: Reason = ""
    # a fault of the node's own (a full or read-only data disk): no new work, but its running
    # tasks are unharmed and finish (ADR 0031)
    jobs_unaffected: bool = False
    bad_gpus: list[SmallCount] = Field(default=[], max_length=64)


class TaskRef(Input):
    job: Name
    attempt: Count
    rank: SmallCount


class Heartbeat(Input):
    health: Health = Health()
    metrics: Annotated[dict[str, Any], CleanJson] = {}
    running: list[TaskRef] = Field(default=[], max_length=MAX_LIST)


class HeartbeatResult(Strict):
    lease_s: float
    stale: list[TaskRef] = []  # tasks the agent must stop: their attempt is no longer current
    # register again (the lease goes on meanwhile): the controller rebuilt its state from the
    # store and reconciles what the agent runs at its registration
    register_again: bool = False


class TaskSecret(Strict):
    """A secret a launch carries. In the controller's outbox only its reference; the value is
    filled in the poll's answer that hands the launch to its agent (server/secrets.py)."""

    name: str
    scope: str
    owner: str
    env: str = ""  # as this environment variable, or
    file: str = ""  # as this file in the task's $GPUFLEET_SECRETS_DIR
    value: str = Field("", repr=False)


class AgentCommand(Strict):
    # "exec", "validate", "restart": an operator's command on the node (api/nodecommands.py);
    # ``job`` holds its id, ``command`` what to run, ``time_limit_s`` its bound.
    # "heal": a step of the heal loop (ADR 0042): ``step``, its round in ``attempt``
    # "accounts": look ``users`` up (NSS) and answer with AccountAnswers (job, attempt, rank
    # unused); only agents that registered with runs_as_owner get it
    # "signal": ``signal`` to the rank's processes that ``signal_scope`` names (ADR 0078)
    kind: Literal["launch", "kill", "signal", "exec", "validate", "restart", "heal", "accounts"]
    job: str
    attempt: int
    rank: int
    command: list[str] = []
    env: dict[str, str] = {}
    gpus: list[int] = []
    # a batch script's rank: every GPU of the job on its node, which the batch shell sees as
    # Slurm's does (-n2 --gpus-per-task=1 on one node: both); [] for the rank's own ``gpus``
    batch_gpus: list[int] = []
    gpu_milli: int = 1000
    time_limit_s: float | None = None
    grace_s: float = 10.0
    # the job's warning signal (Slurm's --signal; 0: none): sent signal_before_s before the
    # time limit, to the task's process group, or with signal_batch_only to its main process
    signal: int = 0
    signal_before_s: float = 0.0
    signal_batch_only: bool = False
    signal_scope: Literal["steps", "batch", "full"] = "steps"  # a "signal" command's
    # a kill's notice (a preemption's: model/notice.py; 0: none): notice_signal now (to whom
    # as the warning signal goes, or to the batch shell alone), then up to notice_wait_s
    # before the SIGTERM, over early once the checkpoint file is written
    notice_signal: int = 0
    notice_wait_s: float = 0.0
    notice_batch_only: bool = False
    # a launch's: the job's checkpoint file (relative: to the task's working directory), the
    # same for every attempt; the task finds it as $GPUFLEET_CHECKPOINT_FILE
    checkpoint_file: str = ""
    why: str = ""
    # the Unix account a root agent runs the task as (the job's user), and the one it uses
    # when the node has no such account (empty: refuse); see gpufleet.agent.accounts
    run_as: str = ""
    fallback_account: str = ""
    # a batch job's rank (Slurm's shape): "batch" runs the script, "step" the agent's step
    # daemon (gpufleet.slurm.stepd) instead of the command; "task": a plain job's rank
    role: Literal["task", "batch", "step"] = "task"
    workdir: str = ""  # where the task starts, entered as its user (/tmp if it cannot)
    # the batch script's files (patterns expanded; relative to workdir), opened as its user
    output: str = ""
    error: str = ""
    append: bool = False
    input: str = ""  # the batch script's stdin file (sbatch's --input); "": /dev/null
    # the submitter's environment (sbatch's --export), under the launch's own variables
    user_env: dict[str, str] = {}
    # the job's container (model.container.ContainerSpec.to_dict), run by the node's runtime
    container: dict[str, Any] | None = None
    epoch: int = 0  # the registration of the node it was sent under (0: not said)
    term: int = 0  # the leader's epoch it was sent under (0: one controller, not said)
    step: Literal["", "remediate", "burn-in"] = ""  # kind "heal"
    remedy: Literal["", "reset", "command", "none"] = ""
    burn_in_s: float = 0.0
    # kind "heal": the other node of the network test (its address), "" for none, and the
    # port the burn-in's node coordinates it on
    peer: str = ""
    net_port: int = 0
    net_min_gbps: float = 1.0  # the link's least bandwidth and most round trip
    net_max_rtt_ms: float = 2.0
    # its number in the node's queue: the next poll acknowledges it (``ack``), else it comes
    # again (a long-poll's answer can be lost with its connection)
    seq: int = 0
    secrets: list[TaskSecret] = []
    # a service replica's probes, as ``model.service.Probe.to_dict`` writes them (keys
    # "readiness", "liveness"); its port reaches the task as $PORT in ``env``
    probes: dict[str, dict[str, Any]] = {}
    users: list[str] = []  # kind "accounts": whose accounts to look up


class CommandBatch(Strict):
    commands: list[AgentCommand]


class AgentEvent(Input):
    # "probe": a replica's probe runner changed its verdict (``probe``, ``ok``, ``why``);
    # "checkpoint": the job's checkpoint file was written ``age_s`` ago (by the agent's clock);
    # "heal": a step of the heal loop done (``step``, its round in ``attempt``, ``ok``, ``why``)
    kind: Literal["started", "exited", "probe", "checkpoint", "heal", "metrics"]
    job: Name
    attempt: Count
    rank: SmallCount
    exit_code: Int64 = 0
    why: Reason = ""
    # "fenced": stopped for the node's sake (requeued, free); "evicted": on an eviction's Kill
    cause: Literal["", "fenced", "evicted"] = ""
    probe: Literal["", "readiness", "liveness"] = ""  # kind "probe": which probe
    ok: bool = False  # kind "probe": ready (readiness), or alive (liveness: only False is sent)
    age_s: Annotated[float, Field(ge=0, le=1e9)] = 0.0  # kind "checkpoint"
    step: Literal["", "remediate", "burn-in"] = ""  # kind "heal"
    metrics: JobMetricsIn | None = None  # kind "metrics": its metrics file's (api/jobmetrics.py)

    @model_validator(mode="after")
    def _probe_named(self) -> AgentEvent:
        if (self.kind == "probe") != bool(self.probe):
            raise ValueError("probe: readiness or liveness for a 'probe' event, and only there")
        if (self.kind == "heal") != bool(self.step):
            raise ValueError("step: remediate or burn-in for a 'heal' event, and only there")
        return self


class AgentEvents(Input):
    events: list[AgentEvent] = Field(max_length=MAX_LIST)


class LogChunk(Input):
    job: Name
    attempt: Count
    rank: SmallCount
    stream: Literal["stdout", "stderr"]
    offset: Count
    data: LogText
    final: bool = False


AgentRegister.model_rebuild()
NodeOut.model_rebuild()
