"""The FastAPI application: routers under /api/v1, errors as 4xx that say what to fix."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from gpufleet import __version__
from gpufleet.api.dashboard import HealthOut
from gpufleet.base.clock import Clock
from gpufleet.base.secretfile import private_dir, write_secret
from gpufleet.gateway import make_gateway
from gpufleet.io.specs import load_cluster, load_queues
from gpufleet.scheduler.framework import Profile
from gpufleet.server import errors
from gpufleet.server.auth import TokenCache
from gpufleet.server.bodylimit import BodyLimit
from gpufleet.server.config import ServerConfig
from gpufleet.server.endpoints import EndpointBook
from gpufleet.server.gateway_executor import ServiceGateway
from gpufleet.server.listing import Listings
from gpufleet.server.logs import LogStore
from gpufleet.server.routers import (
    admin,
    agent,
    dashboard,
    jobs,
    metrics,
    nodes,
    queues,
    sbatch,
    secrets,
    services,
)
from gpufleet.server.secrets import SecretService
from gpufleet.server.secrets_box import load_box
from gpufleet.server.service import ControllerService
from gpufleet.server.stepenv import load_secret
from gpufleet.server.store import Store

log = logging.getLogger("gpufleet.controller")
API = "/api/v1"


class WallClock:
    def now(self) -> float:
        return time.time()


def bootstrap_admin(store: Store, data_dir: Path, now: float) -> Path | None:
    """On first start (or with every admin token revoked), create an admin token and leave it
    readable only by the owner. Its name is ``admin``, or ``admin-N`` when a revoked token
    keeps that name, so a start never fails on it."""
    if store.has_admin_token():
        return None
    _, secret = store.create_admin_token("admin", now)
    # created 0600 and renamed into place: never a moment in which others may read it
    return write_secret(data_dir / "admin.token", secret, replace=True)


# Newer FastAPI instruments every request for OpenTelemetry, looking up the global providers
# each time (a few % of a submission's CPU). The controller exports its own Prometheus metrics
# (/metrics) and configures no OpenTelemetry, so it turns that off where FastAPI has it.
_NO_OTEL: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def service_gateway(config: ServerConfig) -> ServiceGateway | None:
    """The services' data path as configured (None: ``gateway = "off"``); no proxy runs
    before the first service."""
    if config.gateway == "off":
        return None
    return ServiceGateway(
        make_gateway(
            config.gateway or None,
            config.gateway_host,
            pidfile=config.data_dir / "gateway" / "proxy.pid",
        ),
        EndpointBook(
            config.data_dir / "gateway" / "endpoints.json",
            config.gateway_port_base,
            config.gateway_port_span,
        ),
        {},  # the controller's links, set by ControllerService
        drain_s=config.gateway_drain_s,
        stats_s=config.gateway_stats_s,
    )


def open_service(config: ServerConfig, store: Store, clock: Clock) -> ControllerService:
    """The controller service on ``store``, with the queues the cluster spec and the queues
    file declare (stored first) and those an admin set before."""
    cluster = load_cluster(config.cluster_spec) if config.cluster_spec else None
    initial_queues = list(cluster.queues) if cluster is not None else []
    if config.queues_file is not None:
        initial_queues += load_queues(config.queues_file)
    for q in initial_queues:
        store.put_queue(q)
    profile = Profile.build(
        order=config.order, place=config.place, backfill=config.backfill, preempt=config.preempt
    )
    service = ControllerService(
        store,
        profile,
        clock,
        cluster=cluster,
        logs=LogStore(config.data_dir / "logs"),
        heartbeat_s=config.heartbeat_s,
        lease_s=config.lease_s,
        fence_grace_s=config.fence_grace_s,
        node_grace_s=config.node_grace_s,
        outage_tolerance_s=config.outage_tolerance_s,
        launch_timeout_s=config.launch_timeout_s,
        schedule_interval_s=config.schedule_interval_s,
        min_pass_gap_s=config.min_pass_gap_s,
        grace_kill_s=config.grace_kill_s,
        batch_max=config.batch_max,
        retry_backoff_s=config.retry_backoff_s,
        retry_backoff_max_s=config.retry_backoff_max_s,
        fallback_account=config.fallback_account,
        step_secret=load_secret(config.data_dir),
        gateway=service_gateway(config),
        queues_declared=bool(initial_queues),
    )
    for q in store.queues():
        service.ctrl.queues[q.name] = q
    return service


def create_app(
    config: ServerConfig, *, store: Store | None = None, clock: Clock | None = None
) -> FastAPI:
    wall: Clock = clock or WallClock()
    private_dir(config.data_dir)
    # before the store: a key others may read stops the start (SecretKeyError, a ValueError)
    box = load_box(config.secrets_key_file, config.data_dir, os.environ)
    if store is None:
        store = Store.open(config.database_url)
    db: Store = store
    service = open_service(config, db, wall)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        token_path = bootstrap_admin(db, config.data_dir, wall.now())
        if token_path is not None:
            log.warning("created the first admin token in %s", token_path)
        await service.start()
        yield
        await service.stop()

    app = FastAPI(
        title="gpufleet",
        version=__version__,
        lifespan=lifespan,
        openapi_url=f"{API}/openapi.json",
        docs_url=f"{API}/docs",
        **_NO_OTEL,
    )
    app.state.service = service
    app.state.store = db
    app.state.tokens = TokenCache(db, wall.now)
    app.state.listings = Listings()
    app.state.config = config
    app.state.secrets = SecretService(db, box, wall)
    for r in (jobs, sbatch, nodes, queues, admin, agent, secrets, services):
        app.include_router(r.router, prefix=API)
    metrics.install(app, service, config)  # /metrics, outside the API's prefix
    dashboard.install(app, service, API)  # / and its files; its JSON under the API's prefix
    errors.install(app)  # one error shape for every 4xx and 5xx; refusals by their type
    # outermost: a body over the limit is refused before anything reads it
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    install_health(app, service, wall)
    errors.document(app, API, CONFLICTS, EXTRA_ERRORS, METRICS_SCHEME)
    return app


def install_health(app: FastAPI, service: ControllerService, clock: Clock) -> None:
    @app.get("/healthz", tags=["meta"], response_model=HealthOut, operation_id="getHealth")
    async def healthz() -> dict[str, Any]:
        return {
            "ok": True,
            "version": __version__,
            "time": clock.now(),  # the controller's clock (``gpufleet validate`` checks skew)
            "nodes": len(service.ctrl.nodes),
            "jobs": len(service.ctrl.jobs),
            "pending": service.ctrl.pending_count,
            "turns": service.turns,
            # the store: whether it answers, failed turns and rebuilds since the start
            "store": {
                "ok": not service.down,
                "why": service.down.why,
                "failed_turns": service.down.falls,
                "rebuilds": service.down.rebuilds,
                "last_recovery_s": service.down.last_recovery_s,
            },
        }


# /metrics: open, or behind the controller's metrics token when it has one (routers/metrics.py)
METRICS_SCHEME = {
    "metricsToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "the controller's metrics token (extra.metrics_token), when it has one",
    }
}
# the operations that answer 409 (documented in the OpenAPI schema with the other errors)
# (a submission whose idempotency key was used for a different one; cancelling an ended job;
# a token name taken)
CONFLICTS = {
    ("POST", f"{API}/jobs"),
    ("POST", f"{API}/jobs/{{job_id}}/cancel"),
    ("POST", f"{API}/tokens"),
    ("POST", f"{API}/secrets"),
    # a service of that name exists; a change to a service that is being deleted
    ("POST", f"{API}/services"),
    ("PUT", f"{API}/services/{{name}}"),
    ("PATCH", f"{API}/services/{{name}}"),
    ("POST", f"{API}/services/{{name}}/scale"),
}
# errors only some operations answer, in the same one shape
EXTRA_ERRORS = {
    ("GET", "/metrics"): {401, 404},
    # sbatch refuses its command line (400); send the script, or read it where typed (428)
    ("POST", f"{API}/sbatch"): {400, 428},
}
