"""Response bodies of the dashboard's JSON (``/api/v1/dashboard/*``, ``/api/v1/nodes/{name}/
history``) and of ``/healthz``: what those routes return, typed for the OpenAPI schema and
checked on the way out (a field added to a route and not here is a 500 in the tests, not a
silent drift).

Fields that a route leaves out rather than setting to null (a GPU value its node did not report,
the Prometheus URL that only admins see) are optional here and the routes serialize with
``response_model_exclude_unset``: absent stays absent (the dashboard's script tells the two
apart)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpufleet.api.schemas import Role, Strict

_UNREPORTED = "absent when the GPU's last heartbeat did not report it"


class DashboardMe(Strict):
    name: str  # the token's name
    role: Role
    user: str | None = None
    time: float = Field(description="the controller's clock (the page reckons ages against it)")


class GpuView(Strict):
    index: int
    util: float | None = Field(None, description=f"DCGM_FI_DEV_GPU_UTIL, %; {_UNREPORTED}")
    temp: float | None = Field(None, description=f"DCGM_FI_DEV_GPU_TEMP, °C; {_UNREPORTED}")
    power: float | None = Field(None, description=f"DCGM_FI_DEV_POWER_USAGE, W; {_UNREPORTED}")
    fb_used: float | None = Field(None, description=f"DCGM_FI_DEV_FB_USED, MiB; {_UNREPORTED}")
    fb_free: float | None = Field(None, description=f"DCGM_FI_DEV_FB_FREE, MiB; {_UNREPORTED}")
    xid: float | None = Field(None, description=f"DCGM_FI_DEV_XID_ERRORS; {_UNREPORTED}")
    alloc: float = Field(description="the share of the GPU allocated, 0 to 1")
    jobs: list[str] = Field(description="the jobs holding it (a user's token: only their own)")
    healthy: bool
    reporting: bool = Field(description="whether the last heartbeat reported this GPU")


class NodeView(Strict):
    name: str
    state: str  # idle | mixed | allocated | drained | suspect | unhealthy | lost
    why: str
    gpu_model: str
    leaf: str
    pod: str
    last_heartbeat: float | None
    driver_version: str
    cuda_version: str
    cpu_cores: float
    cpu_free: float
    memory_gib: float
    memory_free_gib: float
    gpus: list[GpuView]


class ClusterView(Strict):
    time: float
    nodes: list[NodeView]
    states: dict[str, int] = Field(description="how many nodes are in each state")
    gpus_total: float
    gpus_allocated: float
    running_jobs: int
    pending_jobs: int


class AlertOut(Strict):
    name: str  # the alertname label
    state: Literal["firing", "pending"]
    severity: str
    node: str
    gpu: str
    summary: str
    description: str
    labels: dict[str, str]
    active_at: str = Field(description="Prometheus's activeAt, RFC 3339; '' when it gave none")
    since: float | None = Field(description="active_at in seconds since the epoch")


class AlertsOut(Strict):
    configured: bool = Field(description="whether the controller was given --prometheus")
    alerts: list[AlertOut]
    error: str | None = Field(description="why the alerts are unknown: Prometheus's failure")
    url: str | None = Field(None, description="the Prometheus asked; admin tokens only")
    more: int | None = Field(None, description="alerts beyond those listed; once it answered")


class NodeEventOut(Strict):
    time: float
    what: str  # lost, drained, resumed, unhealthy, healthy, …
    why: str


class NodeHistoryOut(Strict):
    node: str
    state: str
    why: str
    gpu_model: str
    gpus: int
    time: float
    times: list[float] = Field(description="the samples' times, oldest first")
    series: dict[str, dict[str, list[float | None]]] = Field(
        description="metric (DCGM field name) → GPU index → one value per sample (null: "
        "not reported then)"
    )
    events: list[NodeEventOut] = Field(description="the node's newest events, oldest first")


class StoreHealth(Strict):
    ok: bool
    why: str | None = Field(description="why the store does not answer; null when it does")
    failed_turns: int
    rebuilds: int
    last_recovery_s: float | None


class HaHealth(Strict):
    role: str = Field(
        description="leader, standby, lapsed (leads but could not renew its lease in time: "
        "acts no more until it does) or deposed (high availability, ADR 0032)"
    )
    epoch: int | None = Field(description="the leader's epoch, while this one leads")
    leader: str = Field(description="where the leader is, as last seen (empty: unknown)")
    read_ahead: int | None = Field(
        default=None,
        description="a standby: the unfinished jobs whose bodies it has read ahead from the "
        "store, once it has caught up (a takeover then reads only what changed: ADR 0059); "
        "null until then, and on a leader",
    )


class HealthOut(Strict):
    ok: bool
    version: str
    time: float = Field(description="the controller's clock (gpufleet validate checks skew)")
    nodes: int
    jobs: int
    pending: int
    turns: int
    store: StoreHealth
    ha: HaHealth | None = None
