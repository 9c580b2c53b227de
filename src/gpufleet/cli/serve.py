"""`gpufleet controller` and `gpufleet agent`: the two long-running processes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import typer

from gpufleet.model.errors import SpecError


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


def controller(
    data_dir: Path = typer.Option(
        Path("./gpufleet-data"), help="where the SQLite file, logs and the first admin token live"
    ),
    db: str = typer.Option(
        "",
        help="database URL without a password; default SQLite in the data dir "
        "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)",
    ),
    db_file: Path = typer.Option(
        None,
        "--db-file",
        help="file (mode 0600) holding a database URL with its password; or env GPUFLEET_DB",
    ),
    tls_cert: Path = typer.Option(
        None, "--tls-cert", help="serve HTTPS with this certificate (PEM; with --tls-key)"
    ),
    tls_key: Path = typer.Option(
        None, "--tls-key", help="the certificate's private key (PEM, mode 0600)"
    ),
    host: str = typer.Option("127.0.0.1", help="listen address"),
    port: int = typer.Option(8600, help="listen port"),
    cluster: Path = typer.Option(None, help="cluster spec YAML: its queues and quotas"),
    queues: Path = typer.Option(None, help="queues YAML (a list of name, weight, cohort, quota)"),
    order: str = typer.Option("fairshare", help="order plugin"),
    placement: str = typer.Option("topology", help="placement plugin"),
    backfill: str = typer.Option("easy", help="backfill plugin"),
    preempt: str = typer.Option("reclaim", help="preemption plugins, comma-separated"),
    heartbeat_s: float = typer.Option(
        5.0, help="agent heartbeat interval; agents sample their GPUs with each heartbeat"
    ),
    node_grace_s: float = typer.Option(
        10.0,
        help="missing heartbeats this long: node lost, its jobs restart elsewhere "
        "(at least lease + fence grace + 0.5 s)",
    ),
    lease_s: float = typer.Option(7.5, help="agents stop their tasks past this without us"),
    fence_grace_s: float = typer.Option(
        2.0, help="a fenced task gets SIGTERM, then SIGKILL this much later"
    ),
    launch_timeout_s: float = typer.Option(
        120.0, help="a job STARTING longer than this is requeued and its silent nodes suspect"
    ),
    schedule_interval_s: float = typer.Option(5.0, help="schedule at least this often"),
    min_pass_gap_s: float = typer.Option(
        0.1, help="after a scheduling pass, a change waits this long for the next one"
    ),
    retry_backoff_s: float = typer.Option(
        10.0, help="a failed job with retries left waits this · 2^(retry-1) s before it runs again"
    ),
    retry_backoff_max_s: float = typer.Option(600.0, help="the longest retry back-off"),
    prometheus: str = typer.Option(
        "",
        help="URL of the Prometheus that scrapes this controller (e.g. http://127.0.0.1:9090): "
        "the dashboard shows its firing and pending alerts",
    ),
    max_body_bytes: int = typer.Option(
        1 << 20, help="refuse a request body over this many bytes (413) before parsing it"
    ),
    max_array_size: int = typer.Option(
        1001, help="the most tasks of one job array (Slurm's MaxArraySize)"
    ),
    fallback_account: str = typer.Option(
        "",
        help="the Unix account a job runs as on a node that has no account of its user "
        "(default: none; such a job is refused, and its Reason says so)",
    ),
    gateway: str = typer.Option(
        "",
        "--gateway",
        help="the services' endpoints: haproxy, nginx, builtin (a small proxy for a demo) "
        "or off (default: the first installed of haproxy, nginx, builtin)",
    ),
    gateway_host: str = typer.Option(
        "127.0.0.1", "--gateway-host", help="where the service endpoints listen"
    ),
    gateway_ports: str = typer.Option(
        "31500-32499", "--gateway-ports", help="the endpoints' port range, FIRST-LAST"
    ),
    gateway_drain_s: float = typer.Option(
        2.0, "--gateway-drain-s", help="a replica out of the routes is stopped this much later"
    ),
    gateway_stats_s: float = typer.Option(
        5.0, "--gateway-stats-s", help="read the services' request rates this often"
    ),
    secrets_key_file: Path = typer.Option(
        None,
        "--secrets-key-file",
        help="the key that seals job secrets: a 0600 file of 32 base64 bytes (default: env "
        "GPUFLEET_SECRETS_KEY, else secrets.key in the data dir, made on first start)",
    ),
) -> None:
    """Run the controller: REST API under /api/v1, scheduling, the store, the services'
    endpoints."""
    import uvicorn

    from gpufleet.base.secretfile import private_umask
    from gpufleet.scheduler.framework import ProfileError
    from gpufleet.server.app import create_app
    from gpufleet.server.config import ServerConfig
    from gpufleet.server.store.engine import resolve_db_url, safe_url
    from gpufleet.server.tls import TlsFiles

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if prometheus and not prometheus.startswith(("http://", "https://")):
        typer.echo(f"error: --prometheus {prometheus}: give a URL (http://host:9090)", err=True)
        raise typer.Exit(2)
    try:
        tls = TlsFiles.check(tls_cert, tls_key)
        port_base, port_span = port_range(gateway_ports, "--gateway-ports")
        cfg = ServerConfig(
            data_dir=data_dir,
            db_url=resolve_db_url(db, db_file, os.environ),
            host=host,
            port=port,
            order=order,
            place=placement,
            backfill=backfill,
            preempt=tuple(p for p in preempt.split(",") if p),
            cluster_spec=cluster,
            queues_file=queues,
            heartbeat_s=heartbeat_s,
            lease_s=lease_s,
            fence_grace_s=fence_grace_s,
            node_grace_s=node_grace_s,
            launch_timeout_s=launch_timeout_s,
            schedule_interval_s=schedule_interval_s,
            min_pass_gap_s=min_pass_gap_s,
            retry_backoff_s=retry_backoff_s,
            retry_backoff_max_s=retry_backoff_max_s,
            prometheus_url=prometheus.rstrip("/"),
            max_body_bytes=max_body_bytes,
            max_array_size=max_array_size,
            fallback_account=fallback_account,
            secrets_key_file=secrets_key_file,
            gateway=gateway,
            gateway_host=gateway_host,
            gateway_port_base=port_base,
            gateway_port_span=port_span,
            gateway_drain_s=gateway_drain_s,
            gateway_stats_s=gateway_stats_s,
        )
        private_umask()  # the store, logs, admin.token and their directories: ours alone
        app = create_app(cfg)
    except (SpecError, ProfileError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    logging.getLogger("gpufleet.controller").info(
        "store %s; serving %s", safe_url(cfg.database_url), "https" if tls.cert else "http"
    )
    uvicorn.run(
        app, host=host, port=port, log_level="warning", access_log=False, **tls.uvicorn_kwargs()
    )


def agent(ctx: typer.Context) -> None:
    """Run a node agent: --controller URL --token-file F --name N [--simulate 8xH100] [--ca F].

    Every option is the agent's own (see ``gpufleet agent --help-agent``)."""
    from gpufleet.agent.__main__ import main

    args = list(ctx.args)
    if "--help-agent" in args:
        args = ["--help"]
    raise typer.Exit(main(args))
