"""The controller's settings, with defaults that run on a laptop."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.base.portrange import port_range
from gpufleet.server.stepenv import JobPorts

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
    # preempt/defrag's policy, KEY=VALUE,... (model/defrag.py); "": its defaults
    defrag: str = ""
    pack_encoders: bool = False  # video jobs may use training GPUs' encoders (ADR 0050)
    # Slurm's SchedulerParameters=kill_invalid_depend: a job whose dependency can never be met
    # is cancelled at once; off (Slurm's default): it waits, DependencyNeverSatisfied (ADR 0072)
    kill_invalid_depend: bool = False
    cluster_spec: Path | None = None  # queues (and expected nodes) from a cluster YAML
    queues_file: Path | None = None  # queues from a YAML list (applied at start)
    # the heal loop's policy (model/heal.py, ADR 0042); None: the cluster spec's heal:, else
    # the defaults. heal False: no heal loop at all (--no-heal)
    heal_policy: Path | None = None
    heal: bool = True
    # Fencing needs lease + fence grace + kill margin <= node grace (check_fencing): a node we
    # declare lost has had its tasks killed by its watchdog before they restart elsewhere.
    # Agents sample their GPUs with each heartbeat, so the heartbeat is also the metrics
    # interval (5 s, as dcgm-exporter's default collection interval is a few seconds).
    heartbeat_s: float = 5.0
    lease_s: float = 7.5  # an agent that cannot reach us this long launches nothing more
    fence_grace_s: float = 2.0  # a fenced task gets SIGTERM, then SIGKILL this much later
    # an agent without us this long stops its tasks (Slurm's SlurmdTimeout); the node is lost
    # only after it, the fence grace and a margin (ADR 0031). 0: set the one from the other
    # (neither set: 300 s tolerance); __post_init__ fills both in.
    outage_tolerance_s: float = 0.0
    node_grace_s: float = 0.0
    launch_timeout_s: float = 120.0  # STARTING longer than this: requeued, node suspect
    schedule_interval_s: float = 5.0
    # after a pass, a mere change waits this long (Clock seconds) for the next one (the core
    # driver's PassRule, which the simulator shares)
    min_pass_gap_s: float = 0.1
    grace_kill_s: float = 10.0  # SIGTERM → SIGKILL
    # a failed job waits base · 2^(retry − 1) seconds, at most max, before it may run again
    retry_backoff_s: float = 10.0
    retry_backoff_max_s: float = 600.0
    batch_max: int = 500  # submissions and events handled per loop turn
    # bad input at the edge: a body over this is refused (413) before it is parsed; an array
    # of more tasks is refused (422) before it is expanded (Slurm's MaxArraySize)
    max_body_bytes: int = 1 << 20
    # a request's line and headers must all arrive within this (slowloris; server/headlimit.py)
    head_timeout_s: float = 30.0
    max_array_size: int = 1001
    prometheus_url: str = ""  # the Prometheus whose alerts the dashboard shows (empty: none)
    # /metrics needs a metrics (or admin) token unless public; a public one names no user in
    # its labels unless metrics_user_labels (routers/metrics.py)
    metrics_public: bool = False
    metrics_user_labels: bool = False
    # a root agent runs a job as its user's Unix account; one the node lacks runs as this
    # account instead (empty: such a job is refused with a Reason that says so)
    fallback_account: str = ""
    # how long a user's first submission waits for the nodes to look the user up (0: not at
    # all: the job is accepted and waits, with its Reason, until they answer; ADR 0037)
    account_lookup_s: float = 2.0
    # the Unix account `gpufleet validate`'s probe jobs run as (an admin's submit with
    # "probe": true), which every node needs: `useradd --system gpufleet-probe`
    probe_account: str = "gpufleet-probe"
    # the key that seals job secrets (a 0600 file of base64); None: $GPUFLEET_SECRETS_KEY,
    # else data_dir/secrets.key, made on first start (server/secrets_box.py)
    secrets_key_file: Path | None = None
    # the services' endpoints (server/gateway_executor.py): "" the first installed of haproxy,
    # nginx, the built-in proxy; one of those by name; "remote": a `gpufleet gateway` process
    # of its own (ADR 0044); "off": services get no endpoint. The proxy starts with the first
    # service. Each service listens on gateway_host at a port of
    # its own from the range (kept in data_dir/gateway/endpoints.json, stable across restarts)
    gateway: str = ""
    gateway_host: str = "127.0.0.1"
    # the ports replicas are given as $PORT (FIRST-LAST): --replica-ports
    replica_ports: str = "20000-27499"
    # MASTER_PORT and the step daemons' ports (FIRST-LAST, server/stepenv.py JobPorts):
    # --job-ports; "" the fixed ranges (27500-31499) that every controller draws from
    job_ports: str = ""
    gateway_port_base: int = 31500
    gateway_port_span: int = 1000
    # a replica out of the routes is killed this much after the proxy stopped routing to it
    gateway_drain_s: float = 2.0
    gateway_stats_s: float = 5.0  # the request rates are read this often (the autoscaler's)
    # the site's command (a shell line) the controller runs at each idle-GPU warning and action,
    # with the job's id, user and queue in its environment (server/service/idlewatch.py)
    idle_hook: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    # high availability (ADR 0032): several controllers on one PostgreSQL, one leading by a
    # lease of this length; ``advertise``: the URL clients reach this one at (default
    # http://host:port), which a standby tells them when this one leads
    ha: bool = False
    ha_lease_s: float = 3.0
    # an agent counts as heard by the leader, or as cut off from it by a standby, this long
    # after its last word (ADR 0048; 0: the longest of 5 heartbeats, 3 agent leases and 10 s)
    ha_agent_silence_s: float = 0.0
    advertise: str = ""

    def __post_init__(self) -> None:
        check_ha(self)
        self.replica_port_range()  # a bad range is refused here, before the start
        if self.job_ports:
            JobPorts.parse(self.job_ports)
        if self.defrag:
            check_defrag(self.defrag, self.preempt)
        if self.gateway not in ("", "off", "haproxy", "nginx", "builtin", "remote"):
            raise ValueError(
                f"gateway {self.gateway!r}: one of haproxy, nginx, builtin, remote (a `gpufleet "
                "gateway` process), off (or empty: the first installed)"
            )
        if not (
            self.gateway_port_base >= 1
            and self.gateway_port_span >= 1
            and self.gateway_port_base + self.gateway_port_span - 1 <= 65535
        ):
            raise ValueError(
                f"gateway ports: {self.gateway_port_base} and {self.gateway_port_span} more "
                "must lie within 1-65535"
            )
        if not 0 <= self.gateway_drain_s <= 600 or not 0 < self.gateway_stats_s <= 3600:
            raise ValueError(
                f"gateway drain {self.gateway_drain_s!r} s (0-600) or stats interval "
                f"{self.gateway_stats_s!r} s (above 0, at most 3600) out of range"
            )
        if not 0 <= self.min_pass_gap_s <= self.schedule_interval_s:
            raise ValueError(
                f"min pass gap: need 0 <= {self.min_pass_gap_s!r} s <= the schedule interval "
                f"({self.schedule_interval_s:g} s)"
            )
        if self.max_body_bytes < 1024:
            raise ValueError(f"max body bytes: need at least 1024, got {self.max_body_bytes}")
        if not 1 <= self.max_array_size <= 4_000_001:  # Slurm's own ceiling
            raise ValueError(f"max array size: need 1 to 4000001, got {self.max_array_size}")
        if self.fallback_account and not _ACCOUNT.fullmatch(self.fallback_account):
            raise ValueError(
                f"fallback_account {self.fallback_account!r}: not a Unix account name "
                "(letters, digits, '_', '-', '.'; not starting with '-')"
            )
        if not _ACCOUNT.fullmatch(self.probe_account):
            raise ValueError(
                f"probe_account {self.probe_account!r}: not a Unix account name "
                "(letters, digits, '_', '-', '.'; not starting with '-')"
            )
        if not 0 <= self.account_lookup_s <= 60:
            raise ValueError(f"account lookup wait: 0 to 60 s, got {self.account_lookup_s!r}")
        # checked before anything is opened or written (the core checks it again)
        if not 0 < self.retry_backoff_s <= self.retry_backoff_max_s:
            raise ValueError(
                f"retry back-off: need 0 < base ({self.retry_backoff_s:g} s) <= max "
                f"({self.retry_backoff_max_s:g} s)"
            )
        grace, tolerance = fencing_timings(
            self.lease_s, self.fence_grace_s, self.node_grace_s, self.outage_tolerance_s
        )
        object.__setattr__(self, "node_grace_s", grace)  # frozen: filled in once, here
        object.__setattr__(self, "outage_tolerance_s", tolerance)
        check_fencing(self.heartbeat_s, self.lease_s, self.fence_grace_s, grace, tolerance)
        for flag, v in (
            ("--launch-timeout-s", self.launch_timeout_s),
            ("--head-timeout-s", self.head_timeout_s),
        ):
            if not v > 0:
                raise ValueError(f"{flag} {v:g}: must be above 0")

    def replica_port_range(self) -> range:
        """The replicas' ports (``replica_ports``); ValueError naming the option."""
        first, count = port_range(self.replica_ports, "--replica-ports")
        return range(first, first + count)

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{(self.data_dir / 'gpufleet.db').resolve()}"


def check_ha(cfg: ServerConfig) -> None:
    """``--ha`` needs a database that every controller shares and that fences (PostgreSQL)."""
    if not cfg.ha:
        return
    if not cfg.database_url.startswith(("postgresql", "postgres:")):
        raise ValueError(
            "--ha needs PostgreSQL (--db postgresql://…): SQLite is a file on one host that "
            "one controller opens, so a standby elsewhere could neither share the store nor "
            "take over a leader lease in it"
        )
    if not 1.0 <= cfg.ha_lease_s <= 120.0:
        raise ValueError(f"--ha-lease-s {cfg.ha_lease_s:g}: need 1 to 120 seconds")


# What the node's watchdog may take beyond the lease and the grace before a task is dead: its
# polling step (0.1 s) and a busy machine's scheduling delay.
KILL_MARGIN_S = 0.5


# How long an agent keeps its tasks without the controller when neither the tolerance nor the
# node grace is set: Slurm's SlurmdTimeout.
DEFAULT_OUTAGE_TOLERANCE_S = 300.0


def fencing_timings(
    lease_s: float, fence_grace_s: float, node_grace_s: float, outage_tolerance_s: float
) -> tuple[float, float]:
    """(node grace, outage tolerance), the one that is 0 derived from the other: the agent keeps
    its tasks as long as the node grace allows, and the controller waits as long as the agent
    keeps them. Neither set: the default tolerance. Checked by ``check_fencing``."""
    if outage_tolerance_s <= 0 and node_grace_s <= 0:
        outage_tolerance_s = DEFAULT_OUTAGE_TOLERANCE_S
    if node_grace_s <= 0:
        node_grace_s = max(lease_s, outage_tolerance_s) + fence_grace_s + KILL_MARGIN_S
    if outage_tolerance_s <= 0:
        outage_tolerance_s = max(lease_s, node_grace_s - fence_grace_s - KILL_MARGIN_S)
    return node_grace_s, outage_tolerance_s


def check_fencing(
    heartbeat_s: float,
    lease_s: float,
    fence_grace_s: float,
    node_grace_s: float,
    outage_tolerance_s: float = 0.0,
) -> None:
    """Refuse timings where a job could run twice: the controller starts a lost node's jobs
    elsewhere ``node_grace_s`` after the last heartbeat it answered, and by then the node's
    watchdog must have killed them (the outage tolerance, at least the lease, then SIGTERM,
    SIGKILL after the fence grace)."""
    for flag, v in (("--heartbeat-s", heartbeat_s), ("--lease-s", lease_s)):
        if not v > 0:
            raise ValueError(f"{flag} {v:g}: must be above 0")
    if not fence_grace_s >= 0:
        raise ValueError(f"--fence-grace-s {fence_grace_s:g}: must be 0 or more")
    if not lease_s > heartbeat_s:
        raise ValueError(
            f"--lease-s {lease_s:g} must be longer than --heartbeat-s {heartbeat_s:g}: "
            "otherwise every agent fences its tasks between two heartbeats"
        )
    if outage_tolerance_s > lease_s:
        kept, term = outage_tolerance_s, f"--outage-tolerance-s {outage_tolerance_s:g}"
    else:
        kept, term = lease_s, f"--lease-s {lease_s:g}"
    need = kept + fence_grace_s + KILL_MARGIN_S
    if not node_grace_s >= need:
        raise ValueError(
            f"--node-grace-s {node_grace_s:g} must be at least {term} + "
            f"--fence-grace-s {fence_grace_s:g} + {KILL_MARGIN_S:g} s kill margin = {need:g} s: "
            "otherwise a lost node's job could start elsewhere before its old attempt is dead"
        )


def check_defrag(text: str, preempt: tuple[str, ...]) -> None:
    """``--defrag``'s policy reads and is for a profile that defragments; else ValueError."""
    from gpufleet.model.defrag import DefragPolicy, parse_options

    if not any(p in ("defrag", "preempt/defrag") for p in preempt):
        raise ValueError(f"--defrag {text!r} is for --preempt defrag,... (not in the profile)")
    DefragPolicy.of(parse_options(text))
