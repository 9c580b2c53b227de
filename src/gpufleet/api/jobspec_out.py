"""The job spec as a job shows it (``JobOut.spec``): the store's own shape (milli-CPUs, MiB,
the environment as pairs), for the OpenAPI schema (``jobspec.documented_as``)."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.model.job import JobSpec, TopologyLevel

_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclass_fields(JobSpec)}


class MountOut(BaseModel):
    model_config = ConfigDict(extra="forbid", title="MountOut")

    source: str
    target: str
    read_only: bool = False


class ContainerOut(BaseModel):
    model_config = ConfigDict(extra="forbid", title="ContainerOut")

    image: str
    mounts: list[MountOut] = []
    workdir: str = ""


class SignalOut(BaseModel):
    model_config = ConfigDict(extra="forbid", title="SignalOut")

    signal: int
    before_s: int = 60
    batch_only: bool = False


class CheckpointOut(BaseModel):
    model_config = ConfigDict(extra="forbid", title="CheckpointOut")

    signal: int
    grace_s: int = 60
    batch_only: bool = False


class TopologyOut(BaseModel):
    model_config = ConfigDict(extra="forbid", title="TopologyOut")

    level: TopologyLevel = TopologyLevel.ANY
    required: bool = False


class SecretRefOut(BaseModel):
    model_config = ConfigDict(extra="forbid", title="SecretRefOut")

    name: str
    scope: str = ""
    env: str = ""
    file: str = ""


class JobSpecOut(BaseModel):
    """A job's spec as the controller keeps it: milli-CPUs and MiB per worker, models by their
    catalog name, the environment as [name, value] pairs."""

    model_config = ConfigDict(extra="forbid", title="JobSpecOut")

    name: str
    user: str
    queue: str = _DEFAULTS["queue"]
    workers: int = _DEFAULTS["workers"]
    gpus_per_worker: int = _DEFAULTS["gpus_per_worker"]
    gpu_milli: int = _DEFAULTS["gpu_milli"]
    cpu_milli: int = _DEFAULTS["cpu_milli"]
    memory_mib: int = _DEFAULTS["memory_mib"]
    gpu_models: list[str] = []
    time_limit_s: float | None = None
    priority: int = _DEFAULTS["priority"]
    preemptible: bool = _DEFAULTS["preemptible"]
    topology: TopologyOut = TopologyOut()
    dataset: str = ""
    max_retries: int = _DEFAULTS["max_retries"]
    command: list[str] = []
    env: list[Annotated[list[str], Field(min_length=2, max_length=2)]] = []
    signal: SignalOut | None = None
    requeue: bool = _DEFAULTS["requeue"]
    secrets: list[SecretRefOut] = []
    distinct_nodes: bool = _DEFAULTS["distinct_nodes"]
    tasks_per_worker: int = _DEFAULTS["tasks_per_worker"]
    nodelist: list[str] = []
    exclude: list[str] = []
    constraint: str = ""
    exclusive: bool = _DEFAULTS["exclusive"]
    whole_node_memory: bool = _DEFAULTS["whole_node_memory"]
    gres_type: str = ""
    gpu_engines: dict[str, int] = {}
    reservation: str = ""
    batch: bool = _DEFAULTS["batch"]
    workdir: str = ""
    output: str = ""
    error: str = ""
    open_mode: Literal["truncate", "append"] = "truncate"
    input: str = ""
    # submit_env is never shown (server/views.spec_dict)
    container: ContainerOut | None = None
    queues: list[str] = []
    checkpoint: CheckpointOut | None = None
    min_runtime_s: float = 0.0
    idle_exempt_s: float = 0.0
    kill_invalid_dep: bool | None = None
    hold: bool = False  # submitted held (sbatch -H)
    begin_time: float = 0.0  # not started before (sbatch --begin; seconds since the epoch)
