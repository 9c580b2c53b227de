"""The controller's settings, with defaults that run on a laptop."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path = Path("./gpufleet-data")
    db_url: str = ""  # empty: SQLite in data_dir; else e.g. postgresql+psycopg://…
    host: str = "127.0.0.1"
    port: int = 8600
    order: str = "fairshare"
    place: str = "topology"
    backfill: str = "easy"
    preempt: tuple[str, ...] = ("reclaim",)
    cluster_spec: Path | None = None  # queues (and expected nodes) from a cluster YAML
    queues_file: Path | None = None  # queues from a YAML list (applied at start)
    # Fencing needs lease + the agent's fence grace (2 s) < node grace: a partitioned agent has
    # stopped its tasks before we restart them elsewhere. Agents sample their GPUs with each
    # heartbeat, so the heartbeat is also the metrics interval (5 s, as dcgm-exporter's default
    # collection interval is a few seconds).
    heartbeat_s: float = 5.0
    lease_s: float = 7.5  # an agent that cannot reach us this long stops its tasks
    node_grace_s: float = 10.0  # heartbeats missing this long: the node is lost
    schedule_interval_s: float = 5.0
    long_poll_s: float = 20.0
    grace_kill_s: float = 10.0  # SIGTERM → SIGKILL
    # a failed job waits base · 2^(retry − 1) seconds, at most max, before it may run again
    retry_backoff_s: float = 10.0
    retry_backoff_max_s: float = 600.0
    batch_max: int = 500  # submissions and events handled per loop turn
    # bad input at the edge: a body over this is refused (413) before it is parsed; an array
    # of more tasks is refused (422) before it is expanded (Slurm's MaxArraySize)
    max_body_bytes: int = 1 << 20
    max_array_size: int = 1001
    prometheus_url: str = ""  # the Prometheus whose alerts the dashboard shows (empty: none)
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1024:
            raise ValueError(f"max body bytes: need at least 1024, got {self.max_body_bytes}")
        if not 1 <= self.max_array_size <= 4_000_001:  # Slurm's own ceiling
            raise ValueError(f"max array size: need 1 to 4000001, got {self.max_array_size}")
        # checked before anything is opened or written (the core checks it again)
        if not 0 < self.retry_backoff_s <= self.retry_backoff_max_s:
            raise ValueError(
                f"retry back-off: need 0 < base ({self.retry_backoff_s:g} s) <= max "
                f"({self.retry_backoff_max_s:g} s)"
            )

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{(self.data_dir / 'gpufleet.db').resolve()}"
