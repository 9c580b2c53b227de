"""`gpufleet controller` and `gpufleet agent`: the two long-running processes."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from gpufleet.model.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.server.config import ServerConfig
    from gpufleet.server.tls import TlsFiles


def port_range(text: str, option: str) -> tuple[int, int]:
    """``FIRST-LAST`` (or one port) as (first, how many); ValueError naming ``option``."""
    first, sep, last = text.strip().partition("-")
    try:
        lo = int(first)
        hi = int(last) if sep else lo
    except ValueError:
        raise ValueError(f"{option} {text!r}: expected FIRST-LAST, like 31500-32499") from None
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"{option} {text!r}: need 1 <= FIRST <= LAST <= 65535")
    return lo, hi - lo + 1


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
_ORDER = typer.Option("fairshare", help="order plugin")
_PLACEMENT = typer.Option("topology", help="placement plugin")
_BACKFILL = typer.Option("easy", help="backfill plugin")
_PREEMPT = typer.Option("reclaim", help="preemption plugins, comma-separated")
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
_MAX_BODY_BYTES = typer.Option(
    1 << 20, help="refuse a request body over this many bytes (413) before parsing it"
)
_MAX_ARRAY_SIZE = typer.Option(1001, help="the most tasks of one job array (Slurm's MaxArraySize)")
_FALLBACK_ACCOUNT = typer.Option(
    "",
    help="the Unix account a job runs as on a node that has no account of its user "
    "(default: none; such a job is refused, and its Reason says so)",
)
_GATEWAY = typer.Option(
    "",
    "--gateway",
    help="the services' endpoints: haproxy, nginx, builtin (a small proxy for a demo) "
    "or off (default: the first installed of haproxy, nginx, builtin)",
)
_GATEWAY_HOST = typer.Option(
    "127.0.0.1", "--gateway-host", help="where the service endpoints listen"
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


# the options that are ServerConfig's fields of the same name, passed on as given
_AS_GIVEN = (
    "data_dir",
    "host",
    "port",
    "order",
    "backfill",
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
    "max_array_size",
    "fallback_account",
    "secrets_key_file",
    "gateway",
    "gateway_host",
    "gateway_drain_s",
    "gateway_stats_s",
)


def controller(
    data_dir: Path = _DATA_DIR,
    db: str = _DB,
    db_file: Path = _DB_FILE,
    tls_cert: Path = _TLS_CERT,
    tls_key: Path = _TLS_KEY,
    host: str = _HOST,
    port: int = _PORT,
    cluster: Path = _CLUSTER,
    queues: Path = _QUEUES,
    order: str = _ORDER,
    placement: str = _PLACEMENT,
    backfill: str = _BACKFILL,
    preempt: str = _PREEMPT,
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
    max_body_bytes: int = _MAX_BODY_BYTES,
    max_array_size: int = _MAX_ARRAY_SIZE,
    fallback_account: str = _FALLBACK_ACCOUNT,
    gateway: str = _GATEWAY,
    gateway_host: str = _GATEWAY_HOST,
    gateway_ports: str = _GATEWAY_PORTS,
    gateway_drain_s: float = _GATEWAY_DRAIN_S,
    gateway_stats_s: float = _GATEWAY_STATS_S,
    secrets_key_file: Path = _SECRETS_KEY_FILE,
) -> None:
    """Run the controller: REST API under /api/v1, scheduling, the store, service endpoints."""
    given = dict(locals())
    from gpufleet.server.config import ServerConfig
    from gpufleet.server.store.engine import resolve_db_url
    from gpufleet.server.tls import TlsFiles

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if prometheus and not prometheus.startswith(("http://", "https://")):
        _refuse(f"--prometheus {prometheus}: give a URL (http://host:9090)")
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
    except (SpecError, ValueError) as e:
        _refuse(str(e))
    _serve(cfg, tls)


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
    from gpufleet.server.store.engine import safe_url

    try:
        private_umask()  # the store, logs, admin.token and their directories: ours alone
        app = create_app(cfg)
    except (SpecError, ProfileError, ValueError) as e:
        _refuse(str(e))
    logging.getLogger("gpufleet.controller").info(
        "store %s; serving %s", safe_url(cfg.database_url), "https" if tls.cert else "http"
    )
    uvicorn.run(
        app,
        host=cfg.host,
        port=cfg.port,
        log_level="warning",
        access_log=False,
        **tls.uvicorn_kwargs(),
    )


def agent(ctx: typer.Context) -> None:
    """Run a node agent: --controller URL --token-file F --name N [--simulate 8xH100] [--ca F].

    Every option is the agent's own (see ``gpufleet agent --help-agent``)."""
    from gpufleet.agent.__main__ import main

    args = list(ctx.args)
    if "--help-agent" in args:
        args = ["--help"]
    raise typer.Exit(main(args))
