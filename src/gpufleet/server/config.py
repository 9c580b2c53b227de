"""The controller's settings, with defaults that run on a laptop."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_ACCOUNT = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31}\$?")  # as useradd accepts them


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path = Path("./gpufleet-data")
    # empty: SQLite in data_dir; else e.g. postgresql+psycopg://… (may hold a password: no repr)
    db_url: str = field(default="", repr=False)
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
    prometheus_url: str = ""  # the Prometheus whose alerts the dashboard shows (empty: none)
    # a root agent runs a job as its user's Unix account; one the node lacks runs as this
    # account instead (empty: such a job is refused with a Reason that says so)
    fallback_account: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.fallback_account and not _ACCOUNT.fullmatch(self.fallback_account):
            raise ValueError(
                f"fallback_account {self.fallback_account!r}: not a Unix account name "
                "(letters, digits, '_', '-', '.'; not starting with '-')"
            )
        # checked before anything is opened or written (the core checks it again)
        if not 0 < self.retry_backoff_s <= self.retry_backoff_max_s:
            raise ValueError(
                f"retry back-off: need 0 < base ({self.retry_backoff_s:g} s) <= max "
                f"({self.retry_backoff_max_s:g} s)"
            )

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{(self.data_dir / 'gpufleet.db').resolve()}"
