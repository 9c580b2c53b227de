"""What an agent is told at start: its node, where it keeps its data, its timings and limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.agent.health import HealthLimits


@dataclass
class AgentConfig:
    node: str
    address: str
    data_dir: Path
    leaf: str = "leaf-0"
    pod: str = "pod-0"
    labels: dict[str, str] = field(default_factory=dict)
    features: tuple[str, ...] = ()  # Slurm's node features, as declared by the site
    gres_type: str = ""  # the site's GPU type name; "": the model's usual one
    heartbeat_s: float = 5.0  # the most; the controller may ask for shorter
    poll_wait_s: float = 20.0
    tick_s: float = 0.1
    fence_grace_s: float = 2.0
    cpu_cores: float | None = None  # None: what psutil finds
    memory_gib: float | None = None
    expected_gpus: int | None = None  # None: as many as discovered at start
    limits: HealthLimits = field(default_factory=HealthLimits)
    max_events: int = 10_000
    task_env: dict[str, str] = field(default_factory=dict)  # given to every task (--task-env)
    # --container-runtime: "" the first found (agent/containers ORDER), "none" no containers
    container_runtime: str = ""
