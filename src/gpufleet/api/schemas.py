"""Request and response bodies of ``/api/v1``. Validation of job specs themselves stays in
``gpufleet.model`` (one place says what a valid job is); these are the envelopes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["user", "admin", "agent"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ----- users ------------------------------------------------------------------------------


class Dependency(Strict):
    type: Literal["afterok", "afterany"]
    job: str


class JobSubmit(Strict):
    spec: dict[str, Any]  # a JobSpec mapping; validated by JobSpec.from_dict
    array: str | None = Field(None, description="Slurm-style array: '0-9', '1,3,5', '0-15%4'")
    depends_on: list[Dependency] = []
    idempotency_key: str | None = Field(None, max_length=128)


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
    start_bound: str = ""  # "reserved" (at the latest) | "planned" (if jobs run to their limits)


class EventOut(Strict):
    time: float
    attempt: int
    state: str
    why: str = ""


class JobOut(Strict):
    id: str
    name: str
    user: str
    queue: str
    state: str
    attempt: int
    retries_used: int
    submit_time: float
    start_time: float | None = None
    end_time: float | None = None
    gpus: float
    workers: int
    spec: dict[str, Any]
    placement: list[PlacementOut] = []
    reason: ReasonOut | None = None
    events: list[EventOut] | None = None  # only in GET /jobs/{id}


class LogOut(Strict):
    job: str
    rank: int
    stream: Literal["stdout", "stderr"]
    offset: int
    next_offset: int
    data: str
    complete: bool  # the rank has exited and everything it wrote is here


class NodeOut(Strict):
    name: str
    state: str  # idle | mixed | allocated | drained | unhealthy | lost
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
    last_heartbeat: float | None = None
    jobs: list[str] = []
    # what the agent registered with (``gpufleet validate`` compares nodes with these)
    address: str = ""
    driver_version: str = ""
    cuda_version: str = ""
    gpu_info: list[GpuInfo] = []


class DrainRequest(Strict):
    reason: str = Field("drained by admin", max_length=500)


class QueueOut(Strict):
    name: str
    cohort: str
    weight: float
    quota_gpus: float | None
    used_gpus: float
    borrowing: bool
    pending: int
    running: int
    dominant_share: float
    fair_share_usage: float  # decayed past usage, share·s


class QueueUpdate(Strict):
    weight: float | None = Field(None, gt=0)
    cohort: str | None = None
    quota_gpus: float | None = Field(None, ge=0)


class AccountingRow(Strict):
    key: str  # the user or the queue
    jobs: int
    gpu_hours: float


class TokenCreate(Strict):
    name: str = Field(..., min_length=1, max_length=100)
    role: Role
    user: str | None = None  # for user tokens: whose jobs it may touch
    node: str | None = None  # for agent tokens: the only node it may report for


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


class ErrorOut(Strict):
    detail: str | list[dict[str, Any]]


# ----- agents -----------------------------------------------------------------------------


class GpuInfo(Strict):
    index: int
    uuid: str
    model: str
    memory_mib: int
    pci_bus_id: str = ""
    pcie_gen: int = 0
    pcie_width: int = 0
    nvlink_up: int = 0


class AgentRegister(Strict):
    node: str
    address: str  # where other ranks reach this node (MASTER_ADDR)
    gpu_model: str
    gpus: list[GpuInfo]
    cpu_cores: float
    memory_gib: float
    leaf: str = "leaf-0"
    pod: str = "pod-0"
    labels: dict[str, str] = {}
    driver_version: str = ""
    cuda_version: str = ""
    running: list[TaskRef] = []  # tasks it still runs (after a controller restart)
    # task events not yet acknowledged (exits while the controller was away): applied before
    # ``running`` is reconciled, so a task that finished meanwhile is not taken for lost
    events: list[AgentEvent] = []


class RegisterResult(Strict):
    lease_s: float
    heartbeat_s: float


class Health(Strict):
    healthy: bool = True
    why: str = ""
    bad_gpus: list[int] = []


class TaskRef(Strict):
    job: str
    attempt: int
    rank: int


class Heartbeat(Strict):
    health: Health = Health()
    metrics: dict[str, Any] = {}
    running: list[TaskRef] = []


class HeartbeatResult(Strict):
    lease_s: float
    stale: list[TaskRef] = []  # tasks the agent must stop: their attempt is no longer current


class AgentCommand(Strict):
    kind: Literal["launch", "kill"]
    job: str
    attempt: int
    rank: int
    command: list[str] = []
    env: dict[str, str] = {}
    gpus: list[int] = []
    gpu_milli: int = 1000
    time_limit_s: float | None = None
    grace_s: float = 10.0
    why: str = ""
    # the Unix account a root agent runs the task as (the job's user), and the one it uses
    # when the node has no such account (empty: refuse); see gpufleet.agent.accounts
    run_as: str = ""
    fallback_account: str = ""


class CommandBatch(Strict):
    commands: list[AgentCommand]


class AgentEvent(Strict):
    kind: Literal["started", "exited"]
    job: str
    attempt: int
    rank: int
    exit_code: int = 0
    why: str = ""


class AgentEvents(Strict):
    events: list[AgentEvent]


class LogChunk(Strict):
    job: str
    attempt: int
    rank: int
    stream: Literal["stdout", "stderr"]
    offset: int
    data: str
    final: bool = False


AgentRegister.model_rebuild()
NodeOut.model_rebuild()
