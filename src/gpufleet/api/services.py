"""/services: the bodies a client sends to make, change and scale a service, and what it is
shown. The service spec itself is read by ``gpufleet.model.service.ServiceSpec.from_dict``
(every problem at once, each naming its field); ``ServiceSpecIn`` documents it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.api.bounds import CleanJson
from gpufleet.api.jobspec import JobSpecIn, documented_as
from gpufleet.api.schemas import Input, Strict
from gpufleet.model.service import MAX_DELAY_S, MAX_QPS, MAX_REPLICAS, MAX_THRESHOLD

# a replica's job id is "<service>.<n>" and a job id is at most 32 characters (the store's
# column): 24 leave room for 10 million replicas over the service's life
MAX_SERVICE_NAME = 24
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,22}[a-z0-9])?$"
ServiceName = Annotated[str, Field(min_length=1, max_length=MAX_SERVICE_NAME, pattern=NAME_PATTERN)]
Delay = Annotated[float, Field(ge=0, le=MAX_DELAY_S)]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HttpProbeIn(_Doc):
    path: str = Field("/", description="GET this path: any status 200-399 passes")
    port: int | None = Field(None, ge=1, le=65535, description="default: the replica's port")


class TcpProbeIn(_Doc):
    port: int | None = Field(None, ge=1, le=65535, description="default: the replica's port")


class ProbeIn(_Doc):
    """Exactly one of http, tcp or command; Kubernetes' names and defaults."""

    http: HttpProbeIn | None = None
    tcp: TcpProbeIn | None = None
    command: list[str] | None = Field(None, min_length=1, description="an argv; exit 0 passes")
    initial_delay_s: Delay = 0.0
    period_s: Delay = 10.0
    timeout_s: Delay = 1.0
    failure_threshold: int = Field(3, ge=1, le=MAX_THRESHOLD)
    success_threshold: int = Field(1, ge=1, le=MAX_THRESHOLD, description="1 for liveness")


Amount = int | Annotated[str, Field(pattern=r"^[0-9]{1,3}%$")]


class RolloutIn(_Doc):
    max_surge: Amount = Field("25%", description="a count or a percentage of the replicas")
    max_unavailable: Amount = Field("25%", description="not 0 when max_surge is 0")
    progress_deadline_s: float = Field(600.0, ge=1, le=MAX_DELAY_S)
    max_failures: int = Field(3, ge=1, le=1000)


class BackoffIn(_Doc):
    base_s: Delay = 10.0
    max_s: Delay = 300.0
    reset_s: Delay = 600.0
    avoid_node_after: int = Field(3, ge=1, le=1000)


class ServiceSpecIn(_Doc):
    """A service: ``replicas`` copies of the ``replica`` job template (one worker, no time
    limit), or between ``min`` and ``max`` on the measured request rate."""

    name: ServiceName
    replica: JobSpecIn = Field(description="the job every replica runs (its user: the token's)")
    replicas: int = Field(1, ge=0, le=MAX_REPLICAS)
    port: int | None = Field(None, ge=1, le=65535, description="none: one free port each ($PORT)")
    min: int | None = Field(None, ge=0, le=MAX_REPLICAS)
    max: int | None = Field(None, ge=1, le=MAX_REPLICAS)
    target_qps_per_replica: float | None = Field(None, gt=0, le=MAX_QPS)
    upscale_delay_s: Delay = 30.0
    downscale_delay_s: Delay = 600.0
    readiness: ProbeIn | None = None
    liveness: ProbeIn | None = None
    rollout: RolloutIn | None = None
    restart_backoff: BackoffIn | None = None


SpecBody = Annotated[dict[str, Any], CleanJson, documented_as(ServiceSpecIn, "validation")]


class ServiceCreate(Input):
    spec: SpecBody


class ServiceUpdate(Input):
    """PUT: the whole new spec. PATCH: a JSON merge patch (RFC 7386) of the current spec
    (``{"replica": {"container": {"image": "..."}}}``; null removes a key)."""

    spec: SpecBody


class ServiceScale(Input):
    replicas: int | None = Field(None, ge=0, le=MAX_REPLICAS)
    min: int | None = Field(None, ge=0, le=MAX_REPLICAS, description="autoscaling's lower bound")
    max: int | None = Field(None, ge=1, le=MAX_REPLICAS, description="autoscaling's upper bound")


ProbeState = Literal["none", "waiting", "passing", "failing", "failed"]


class ReplicaOut(Strict):
    job_id: str
    generation: int
    index: int
    state: str = Field(description="the replica job's state")
    node: str | None = None
    port: int | None = None
    ready: bool = Field(description="passes its readiness probe: the core routes it")
    routed: bool | None = Field(
        None,
        description="the gateway's proxy sends it requests now (its reload done); none "
        "when the controller runs no gateway",
    )
    readiness: ProbeState
    liveness: ProbeState
    stopping: bool = False
    failed: str = ""
    created: float


class ServiceEventOut(Strict):
    time: float
    what: str
    why: str


class EndpointOut(Strict):
    """Where the service's clients connect: the gateway's port for it, load-balanced over the
    ready replicas, each request with ``Authorization: Bearer <token>``."""

    url: str = Field(description="the endpoint's URL: scheme, the gateway's host and the port")
    host: str
    port: int
    token: str | None = Field(
        None,
        description="the endpoint's bearer token: only in the answer that made it "
        "(createService, rotateServiceToken), never shown again",
    )


class DesktopOut(Strict):
    """A desktop session's state (``gpufleet desktop``): its owner (and admins) open it in a
    browser at ``open_url`` with their own gpufleet token."""

    suspended: bool = Field(description="scaled to 0 after its idle limit; run it again")
    idle_suspend_s: float
    geometry: str
    open_url: str | None = Field(None, description="the login page on the gateway")


class ServiceOut(Strict):
    name: str
    user: str
    queue: str
    generation: int
    desired: int
    live: int = Field(description="replicas that are not being stopped")
    ready: int = Field(description="replicas that get traffic")
    port: int | None = None
    image: str | None = None
    command: list[str] = Field(default_factory=list)
    autoscale: dict[str, float] | None = None
    request_rate: float | None = Field(None, description="the last measured requests/s")
    rolling_out: bool = False
    previous_generation: int | None = None
    deleting: bool = False
    note: str = ""
    spec: dict[str, Any] = Field(description="the current generation's spec")
    replicas: list[ReplicaOut] = Field(default_factory=list)
    events: list[ServiceEventOut] | None = None
    endpoint: EndpointOut | None = Field(
        None, description="none when the controller runs no gateway (--gateway off)"
    )
    desktop: DesktopOut | None = Field(None, description="a desktop session's (else none)")
