"""`gpufleet controller` and `gpufleet agent`: the two long-running processes."""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from gpufleet.base.portrange import port_range
from gpufleet.model.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.server.config import ServerConfig
    from gpufleet.server.tls import TlsFiles


# the controller's options (declared here, so that its signature reads as a list)
_DATA_DIR = typer.Option(
    Path("./gpufleet-data"), help="where the SQLite file, logs and the first admin token live"
)
_DB = typer.Option(
    "",
    help="database URL without a password; default SQLite in the data dir "
    "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)",
)
_DB_FILE = typer.Option(
    None,
    "--db-file",
    help="file (mode 0600) holding a database URL with its password; or env GPUFLEET_DB",
)
_TLS_CERT = typer.Option(
    None, "--tls-cert", help="serve HTTPS with this certificate (PEM; with --tls-key)"
)
_TLS_KEY = typer.Option(None, "--tls-key", help="the certificate's private key (PEM, mode 0600)")
_HOST = typer.Option("127.0.0.1", help="listen address")
_PORT = typer.Option(8600, help="listen port")
_CLUSTER = typer.Option(None, help="cluster spec YAML: its queues and quotas")
_QUEUES = typer.Option(None, help="queues YAML (a list of name, weight, cohort, quota)")
_HEAL_POLICY = typer.Option(
    None,
    "--heal-policy",
    help="the heal loop's policy YAML (remedy, burn_in_s, max_failures, window_s, ...): a node "
    "drained for a GPU fault is remediated and burnt in before it returns (default: the "
    "cluster spec's heal:, else remedy reset, a 60 s burn-in, given up after 3 failures in 24 h)",
)
_HEAL = typer.Option(
    True,
    "--heal/--no-heal",
    help="--no-heal: no heal loop; a node drained for a GPU fault returns as soon as its agent "
    "reports it healthy",
)
_ORDER = typer.Option("fairshare", help="order plugin")
_PLACEMENT = typer.Option("topology", help="placement plugin")
_BACKFILL = typer.Option("easy", help="backfill plugin")
_PREEMPT = typer.Option("reclaim", help="preemption plugins, comma-separated")
_DEFRAG = typer.Option(
    "",
    "--defrag",
    help="the defrag plugin's policy as KEY=VALUE,... (with --preempt defrag,...): "
    "min_gang_gpus, max_lost_gpu_s, min_score, savings_horizon_s, restart_cost_s, "
    "room_elsewhere, interval_s, leaf_interval_s, enabled; a queue's defrag: overrides it",
)
_PACK_ENCODERS = typer.Option(
    False,
    "--pack-encoders",
    help="a video job (one GPU share asking for NVENC/NVDEC only) may use the encoders of a "
    "GPU a training job holds, taking none of its compute (default: kept apart)",
)
_KILL_INVALID_DEPEND = typer.Option(
    False,
    "--kill-invalid-depend",
    help="cancel at once a job whose dependency can never be met (an afterok job that did not "
    "succeed), ended DependencyNeverSatisfied, as Slurm's SchedulerParameters="
    "kill_invalid_depend (default: it stays pending with that Reason until its user cancels it)",
)
_HEARTBEAT_S = typer.Option(
    5.0, help="agent heartbeat interval; agents sample their GPUs with each heartbeat"
)
_NODE_GRACE_S = typer.Option(
    0.0,
    help="missing heartbeats this long: node lost, its jobs restart elsewhere "
    "(at least the outage tolerance + fence grace + 0.5 s; 0: exactly that)",
)
_OUTAGE_TOLERANCE_S = typer.Option(
    0.0,
    help="agents keep their tasks running this long without us, then stop them "
    "(0: node grace - fence grace - 0.5 s, or 300 s when neither is set)",
)
_LEASE_S = typer.Option(7.5, help="agents launch nothing more past this without us")
_FENCE_GRACE_S = typer.Option(2.0, help="a fenced task gets SIGTERM, then SIGKILL this much later")
_LAUNCH_TIMEOUT_S = typer.Option(
    120.0, help="a job STARTING longer than this is requeued and its silent nodes suspect"
)
_SCHEDULE_INTERVAL_S = typer.Option(5.0, help="schedule at least this often")
_MIN_PASS_GAP_S = typer.Option(
    0.1, help="after a scheduling pass, a change waits this long for the next one"
)
_RETRY_BACKOFF_S = typer.Option(
    10.0, help="a failed job with retries left waits this · 2^(retry-1) s before it runs again"
)
_RETRY_BACKOFF_MAX_S = typer.Option(600.0, help="the longest retry back-off")
_PROMETHEUS = typer.Option(
    "",
    help="URL of the Prometheus that scrapes this controller (e.g. http://127.0.0.1:9090): "
    "the dashboard shows its firing and pending alerts",
)
_METRICS_PUBLIC = typer.Option(
    False,
    "--metrics-public",
    help="serve /metrics to anyone, without a token (default: a metrics or admin token, "
    "'gpufleet token create prometheus --role metrics'); its series then name no user",
)
_METRICS_USER_LABELS = typer.Option(
    False,
    "--metrics-user-labels",
    help="with --metrics-public: keep the user label of the jobs' GPU series",
)
_MAX_BODY_BYTES = typer.Option(
    1 << 20, help="refuse a request body over this many bytes (413) before parsing it"
)
_HEAD_TIMEOUT_S = typer.Option(
    30.0,
    help="close a connection whose request line and headers are not all sent this long (408); "
    "a body gets as long again, and 1 s more for every 64 KiB of it that came",
)
_MAX_ARRAY_SIZE = typer.Option(1001, help="the most tasks of one job array (Slurm's MaxArraySize)")
_FALLBACK_ACCOUNT = typer.Option(
    "",
    help="the Unix account a job runs as on a node that has no account of its user "
    "(default: none; such a job is refused, and its Reason says so)",
)
_ACCOUNT_LOOKUP_S = typer.Option(
    2.0,
    help="how long a user's first submission waits for the nodes to look the user's Unix "
    "account up, so that a user no node has is refused at once (0: accept at once; the job "
    "waits with its Reason)",
)
_PROBE_ACCOUNT = typer.Option(
    "gpufleet-probe",
    help="the Unix account `gpufleet validate`'s probe jobs run as; every node needs it "
    "(useradd --system gpufleet-probe)",
)
_GATEWAY = typer.Option(
    "",
    "--gateway",
    help="the services' endpoints: haproxy, nginx, builtin (a small proxy for a demo), "
    "remote (a `gpufleet gateway` process, which outlives a failover) or off (default: the "
    "first installed of haproxy, nginx, builtin)",
)
_GATEWAY_HOST = typer.Option(
    "127.0.0.1", "--gateway-host", help="where the service endpoints listen"
)
_REPLICA_PORTS = typer.Option(
    "20000-27499",
    "--replica-ports",
    help="the ports service replicas are given as $PORT, FIRST-LAST (each node's own; nodes "
    "that share a host get different ones while the range lasts)",
)
_JOB_PORTS = typer.Option(
    "",
    "--job-ports",
    help="a block of ports, FIRST-LAST (32 or more), for what a job's number decides: "
    "MASTER_PORT from its first half, srun's step daemons' from the second (default: the "
    "fixed ranges 27500-31499; give each controller that shares hosts a block of its own)",
)
_GATEWAY_PORTS = typer.Option(
    "31500-32499", "--gateway-ports", help="the endpoints' port range, FIRST-LAST"
)
_GATEWAY_DRAIN_S = typer.Option(
    2.0, "--gateway-drain-s", help="a replica out of the routes is stopped this much later"
)
_GATEWAY_STATS_S = typer.Option(
    5.0, "--gateway-stats-s", help="read the services' request rates this often"
)
_SECRETS_KEY_FILE = typer.Option(
    None,
    "--secrets-key-file",
    help="the key that seals job secrets: a 0600 file of 32 base64 bytes (default: env "
    "GPUFLEET_SECRETS_KEY, else secrets.key in the data dir, made on first start)",
)

_HA = typer.Option(
    False,
    "--ha",
    help="high availability: run beside other controllers on the same PostgreSQL (--db); "
    "one leads, the others stand by and take over when its lease lapses",
)
_HA_LEASE_S = typer.Option(
    3.0, "--ha-lease-s", help="with --ha: a leader not heard from this long is replaced"
)
_HA_AGENT_SILENCE_S = typer.Option(
    0.0,
    "--ha-agent-silence-s",
    help="with --ha: an agent counts as heard by the leader, or as cut off from it by a "
    "standby, this long after its last word; the leader steps down when a standby hears more "
    "agents cut off from it than it hears (0: the longest of 5 heartbeats, 3 agent leases "
    "and 10 s)",
)
_ADVERTISE = typer.Option(
    "",
    "--advertise",
    help="with --ha: the URL clients reach this controller at (default http://HOST:PORT), "
    "which standbys tell them while it leads",
)


_IDLE_HOOK = typer.Option(
    "",
    "--idle-hook",
    help="a shell command run at each idle-GPU warning and action of a queue's idle policy, "
    "with GPUFLEET_JOB_ID, GPUFLEET_JOB_USER, GPUFLEET_JOB_QUEUE, GPUFLEET_IDLE_STAGE and "
    "GPUFLEET_IDLE_WHY in its environment (to mail or chat the user)",
)


_CONFIG = typer.Option(
    None,
    "--config",
    help="a YAML file of these options, e.g. /etc/gpufleet/controller.yaml (data-dir: "
    "/var/lib/gpufleet, host: 0.0.0.0, ...); options typed after it win",
)

# the options that are ServerConfig's fields of the same name, passed on as given
_AS_GIVEN = (
    "data_dir",
    "host",
    "port",
    "order",
    "backfill",
    "defrag",
    "pack_encoders",
    "kill_invalid_depend",
    "heartbeat_s",
    "lease_s",
    "fence_grace_s",
    "node_grace_s",
    "outage_tolerance_s",
    "launch_timeout_s",
    "schedule_interval_s",
    "min_pass_gap_s",
    "retry_backoff_s",
    "retry_backoff_max_s",
    "max_body_bytes",
    "head_timeout_s",
    "max_array_size",
    "metrics_public",
    "metrics_user_labels",
    "fallback_account",
    "account_lookup_s",
    "probe_account",
    "replica_ports",
    "job_ports",
    "heal_policy",
    "heal",
    "secrets_key_file",
    "gateway",
    "gateway_host",
    "gateway_drain_s",
    "gateway_stats_s",
    "ha",
    "ha_lease_s",
    "ha_agent_silence_s",
    "advertise",
    "idle_hook",
)


def controller(
    config: Path = _CONFIG,
    data_dir: Path = _DATA_DIR,
    db: str = _DB,
    db_file: Path = _DB_FILE,
    tls_cert: Path = _TLS_CERT,
    tls_key: Path = _TLS_KEY,
    host: str = _HOST,
    port: int = _PORT,
    cluster: Path = _CLUSTER,
    queues: Path = _QUEUES,
    heal_policy: Path = _HEAL_POLICY,
    heal: bool = _HEAL,
    order: str = _ORDER,
    placement: str = _PLACEMENT,
    backfill: str = _BACKFILL,
    preempt: str = _PREEMPT,
    defrag: str = _DEFRAG,
    pack_encoders: bool = _PACK_ENCODERS,
    kill_invalid_depend: bool = _KILL_INVALID_DEPEND,
    heartbeat_s: float = _HEARTBEAT_S,
    node_grace_s: float = _NODE_GRACE_S,
    outage_tolerance_s: float = _OUTAGE_TOLERANCE_S,
    lease_s: float = _LEASE_S,
    fence_grace_s: float = _FENCE_GRACE_S,
    launch_timeout_s: float = _LAUNCH_TIMEOUT_S,
    schedule_interval_s: float = _SCHEDULE_INTERVAL_S,
    min_pass_gap_s: float = _MIN_PASS_GAP_S,
    retry_backoff_s: float = _RETRY_BACKOFF_S,
    retry_backoff_max_s: float = _RETRY_BACKOFF_MAX_S,
    prometheus: str = _PROMETHEUS,
    metrics_public: bool = _METRICS_PUBLIC,
    metrics_user_labels: bool = _METRICS_USER_LABELS,
    max_body_bytes: int = _MAX_BODY_BYTES,
    head_timeout_s: float = _HEAD_TIMEOUT_S,
    max_array_size: int = _MAX_ARRAY_SIZE,
    fallback_account: str = _FALLBACK_ACCOUNT,
    account_lookup_s: float = _ACCOUNT_LOOKUP_S,
    probe_account: str = _PROBE_ACCOUNT,
    gateway: str = _GATEWAY,
    gateway_host: str = _GATEWAY_HOST,
    gateway_ports: str = _GATEWAY_PORTS,
    replica_ports: str = _REPLICA_PORTS,
    job_ports: str = _JOB_PORTS,
    gateway_drain_s: float = _GATEWAY_DRAIN_S,
    gateway_stats_s: float = _GATEWAY_STATS_S,
    secrets_key_file: Path = _SECRETS_KEY_FILE,
    ha: bool = _HA,
    ha_lease_s: float = _HA_LEASE_S,
    ha_agent_silence_s: float = _HA_AGENT_SILENCE_S,
    advertise: str = _ADVERTISE,
    idle_hook: str = _IDLE_HOOK,
) -> None:
    """Run the controller: REST API under /api/v1, scheduling, the store, service endpoints."""
    given = dict(locals())  # config: read by ConfigCommand before these were parsed
    from gpufleet.server.config import ServerConfig
    from gpufleet.server.store.engine import resolve_db_url
    from gpufleet.server.tls import TlsFiles

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    _check_metrics(prometheus, metrics_public, metrics_user_labels)
    try:
        tls = TlsFiles.check(tls_cert, tls_key)
        port_base, port_span = port_range(gateway_ports, "--gateway-ports")
        cfg = ServerConfig(
            **{k: given[k] for k in _AS_GIVEN},
            db_url=resolve_db_url(db, db_file, os.environ),
            place=placement,
            preempt=tuple(p for p in preempt.split(",") if p),
            cluster_spec=cluster,
            queues_file=queues,
            prometheus_url=prometheus.rstrip("/"),
            gateway_port_base=port_base,
            gateway_port_span=port_span,
        )
        _read_heal_policy(heal_policy)  # now: a bad policy is refused before the start
    except (SpecError, ValueError) as e:
        _refuse(str(e))
    _serve(cfg, tls)


def _check_metrics(prometheus: str, public: bool, user_labels: bool) -> None:
    if prometheus and not prometheus.startswith(("http://", "https://")):
        _refuse(f"--prometheus {prometheus}: give a URL (http://host:9090)")
    if user_labels and not public:
        _refuse("--metrics-user-labels is for --metrics-public: " + _NAMES_USERS_ALREADY)


def _read_heal_policy(path: Path | None) -> None:
    if path is not None:
        from gpufleet.io.specs import load_heal_policy

        load_heal_policy(path)


_NAMES_USERS_ALREADY = "a /metrics behind its token names the users already"


def _refuse(why: str) -> NoReturn:
    """The controller does not start: why, and exit status 2."""
    typer.echo(f"error: {why}", err=True)
    raise typer.Exit(2)


def _serve(cfg: ServerConfig, tls: TlsFiles) -> None:
    """Build the app (a refused profile or spec: exit 2) and serve it until stopped."""
    import uvicorn

    from gpufleet.base.secretfile import private_umask
    from gpufleet.scheduler.framework import ProfileError
    from gpufleet.server.app import create_app
    from gpufleet.server.headlimit import head_limited
    from gpufleet.server.store.engine import safe_url

    try:
        private_umask()  # the store, logs, admin.token and their directories: ours alone
        app = create_app(cfg, on_deposed=_start_again if cfg.ha else None)
    except (SpecError, ProfileError, ValueError) as e:
        _refuse(str(e))
    # what the start built (the imports, the app, its routes and schemas) lives as long as the
    # process: frozen, the cyclic GC never walks it again (ADR 0069: 0.33 → 0.21 ms of CPU a
    # submission in bench/submit_cpu.py's process)
    gc.collect()
    gc.freeze()
    url = listen_url(cfg.host, cfg.port, tls.cert is not None)
    logging.getLogger("gpufleet.controller").info(
        "listening on %s (dashboard %s/, API %s/api/v1, docs %s/api/v1/docs); store %s",
        url,
        url,
        url,
        url,
        safe_url(cfg.database_url),
    )
    uvicorn.run(
        app,
        host=cfg.host,
        port=cfg.port,
        log_level="warning",
        access_log=False,
        # a request's headers bounded in size as they arrive (431), and in time (408)
        http=head_limited(cfg.head_timeout_s),
        **tls.uvicorn_kwargs(),
    )


def listen_url(host: str, port: int, https: bool) -> str:
    """The controller's URL as its log says it: the listen address, bracketed if IPv6; on all
    interfaces, this host's name (which clients on other hosts use)."""
    if host in ("0.0.0.0", "::", ""):
        import socket

        host = socket.getfqdn()
    elif ":" in host:
        host = f"[{host}]"
    return f"{'https' if https else 'http'}://{host}:{port}"


def _start_again() -> None:
    """A deposed leader (--ha) starts again as a standby: this process replaced by a fresh one
    with the same command line (same pid), so that nothing of its memory survives."""
    import sys

    logging.getLogger("gpufleet.controller").error(
        "deposed: another controller leads; starting again as a standby"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, sys.orig_argv)


def agent(ctx: typer.Context) -> None:
    """Run a node agent: --controller URL --token-file F --name N [--simulate 8xH100] [--ca F].

    Every option is the agent's own (see ``gpufleet agent --help-agent``)."""
    from gpufleet.agent.__main__ import main

    args = list(ctx.args)
    if "--help-agent" in args:
        args = ["--help"]
    raise typer.Exit(main(args))
