"""The FastAPI application: routers under /api/v1, errors as 4xx that say what to fix."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI

from gpufleet import __version__
from gpufleet.api.dashboard import HealthOut
from gpufleet.base.clock import Clock
from gpufleet.base.secretfile import private_dir, write_secret
from gpufleet.gateway import make_gateway
from gpufleet.io.specs import load_cluster, load_heal_policy, load_queues
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.defrag import parse_options
from gpufleet.model.heal import HealPolicy
from gpufleet.model.queue import QueueSpec
from gpufleet.scheduler.framework import Profile
from gpufleet.server import errors
from gpufleet.server.auth import TokenCache
from gpufleet.server.bodylimit import BodyLimit
from gpufleet.server.config import ServerConfig
from gpufleet.server.elastic.providers import PowerProvider, ProviderContext, providers
from gpufleet.server.endpoints import EndpointBook, StoredEndpointBook
from gpufleet.server.gateway_executor import ServiceGateway
from gpufleet.server.ha import stale
from gpufleet.server.ha.controller import HighAvailability
from gpufleet.server.ha.gate import StandbyGate
from gpufleet.server.listing import Listings
from gpufleet.server.logs import LogStore
from gpufleet.server.remote_gateway import RemoteGateway
from gpufleet.server.routers import (
    admin,
    agent,
    apidocs,
    dashboard,
    gateway,
    jobs,
    maintenance,
    metrics,
    nodecommands,
    nodes,
    queues,
    reservations,
    sbatch,
    secrets,
    services,
    squeue,
)
from gpufleet.server.secrets import SecretService
from gpufleet.server.secrets_box import load_box
from gpufleet.server.service import ControllerService
from gpufleet.server.stepenv import JobPorts, load_secret
from gpufleet.server.store import Store
from gpufleet.server.strict_query import known_query
from gpufleet.server.strictjson import StrictJson
from gpufleet.server.submit_fast import SubmitFastPath

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


def service_gateway(config: ServerConfig, store: Store) -> ServiceGateway | None:
    """The services' data path as configured (None: ``gateway = "off"``); no proxy runs
    before the first service."""
    if config.gateway == "off":
        return None
    proxy = (
        RemoteGateway(config.gateway_host)
        if config.gateway == "remote"
        else make_gateway(
            config.gateway or None,
            config.gateway_host,
            pidfile=config.data_dir / "gateway" / "proxy.pid",
        )
    )
    # in high availability every controller hands out the same ports and tokens: the store's
    book = (
        StoredEndpointBook(store, config.gateway_port_base, config.gateway_port_span)
        if config.ha
        else EndpointBook(
            config.data_dir / "gateway" / "endpoints.json",
            config.gateway_port_base,
            config.gateway_port_span,
        )
    )
    return ServiceGateway(
        proxy,
        book,
        {},  # the controller's links, set by ControllerService
        drain_s=config.gateway_drain_s,
        stats_s=config.gateway_stats_s,
    )


def profile_of(config: ServerConfig) -> Profile:
    """The scheduler's profile the settings name, with the defrag plugin's policy."""
    return Profile.build(
        order=config.order,
        place=config.place,
        backfill=config.backfill,
        preempt=config.preempt,
        options={"preempt/defrag": parse_options(config.defrag)} if config.defrag else None,
        pack_encoders=config.pack_encoders,
        kill_invalid_depend=config.kill_invalid_depend,
    )


def open_service(config: ServerConfig, store: Store, clock: Clock) -> ControllerService:
    """The controller service on ``store``, with the queues the cluster spec and the queues
    file declare (stored first) and those an admin set before."""
    cluster = load_cluster(config.cluster_spec) if config.cluster_spec else None
    profile = profile_of(config)
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
        # the same on every controller that shares the secrets key (HA: ADR 0032)
        desktop_secret=load_box(config.secrets_key_file, config.data_dir, os.environ).derive(
            "desktop keys"
        ),
        gateway=service_gateway(config, store),
        queues_declared=bool(_initial_queues(config, cluster)),
        heal=heal_policy(config, cluster),
        power=elastic_providers(config, store, cluster),
        replica_ports=config.replica_port_range(),
        job_ports=JobPorts.parse(config.job_ports) if config.job_ports else None,
    )
    service.idle_hook = config.idle_hook
    service.identity.first_wait_s = config.account_lookup_s
    return service


def heal_policy(config: ServerConfig, cluster: ClusterSpec | None) -> HealPolicy | None:
    """The heal loop's policy (ADR 0042): ``--heal-policy``'s file, else the cluster spec's
    ``heal:``, else the defaults, on by default; None where it is turned off."""
    if config.heal_policy is not None:
        policy = load_heal_policy(config.heal_policy)
    elif cluster is not None and cluster.heal is not None:
        policy = cluster.heal
    else:
        policy = HealPolicy()
    return policy if config.heal and policy.enabled else None


def elastic_providers(
    config: ServerConfig, store: Store, cluster: ClusterSpec | None
) -> dict[str, PowerProvider]:
    """Each elastic pool's provider (server/elastic/); one that cannot run live fails now."""
    if cluster is None or not cluster.elastic:
        return {}
    host = "127.0.0.1" if config.host in ("0.0.0.0", "::", "") else config.host

    def agent_token(node: str) -> str:
        name = f"elastic-agent-{node}-{time.time_ns()}"
        return store.create_token(name, "agent", node=node)[1]

    ctx = ProviderContext(
        # behind TLS, --advertise names the https URL (the agents verify it with GPUFLEET_CA)
        url=config.advertise or f"http://{host}:{config.port}",
        data_dir=config.data_dir,
        heartbeat_s=config.heartbeat_s,
        agent_token=agent_token,
    )
    return providers(cluster, ctx)


def _initial_queues(config: ServerConfig, cluster: ClusterSpec | None) -> list[QueueSpec]:
    """The queues the cluster spec and the queues file declare."""
    initial = list(cluster.queues) if cluster is not None else []
    if config.queues_file is not None:
        initial += load_queues(config.queues_file)
    return initial


async def lead(config: ServerConfig, store: Store, service: ControllerService, now: float) -> None:
    """What a controller does when it starts to lead (at its start; with ``--ha``, when it
    takes the lease): the declared queues stored, the first admin token, the service's start
    (which reads the store back)."""
    cluster = load_cluster(config.cluster_spec) if config.cluster_spec else None
    for q in _initial_queues(config, cluster):
        store.put_queue(q)
    for q in store.queues():
        service.ctrl.queues[q.name] = q
    token_path = bootstrap_admin(store, config.data_dir, now)
    if token_path is not None:
        log.warning("created the first admin token in %s", token_path)
    await service.start()


def high_availability(
    config: ServerConfig,
    store: Store,
    service: ControllerService,
    wall: Clock,
    on_deposed: Callable[[], None] | None,
) -> HighAvailability:
    """A standby until the elector gives it the lead (server/ha/); ``on_deposed``: what a
    deposed leader does then (the CLI starts the process again, as a standby)."""
    address = config.advertise or f"http://{config.host}:{config.port}"
    return HighAvailability(
        store,
        service,
        address=address,
        lease_s=config.ha_lease_s,
        lead=lambda: lead(config, store, service, wall.now()),
        on_deposed=on_deposed,
        agent_silence_s=config.ha_agent_silence_s
        or max(5 * config.heartbeat_s, 3 * config.lease_s, 10.0),
    )


def create_app(
    config: ServerConfig,
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    on_deposed: Callable[[], None] | None = None,
) -> FastAPI:
    wall: Clock = clock or WallClock()
    private_dir(config.data_dir)
    # before the store: a key others may read stops the start (SecretKeyError, a ValueError)
    box = load_box(config.secrets_key_file, config.data_dir, os.environ)
    if store is None:
        store = Store.open(config.database_url)
    db: Store = store
    service = open_service(config, db, wall)

    ha = high_availability(config, db, service, wall, on_deposed) if config.ha else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if ha is not None:  # stand by until the lease is ours
            ha.start()
            yield
            await ha.stop()
            return
        await lead(config, db, service, wall.now())
        yield
        await service.stop()

    app = FastAPI(
        title="gpufleet",
        version=__version__,
        lifespan=lifespan,
        openapi_url=f"{API}/openapi.json",
        docs_url=None,  # served from the package's own Swagger UI files (routers/apidocs.py)
        redoc_url=None,  # FastAPI's ReDoc page loads its script from a CDN
        dependencies=[Depends(known_query)],  # an unknown query parameter is refused, not ignored
        **_NO_OTEL,
    )
    app.state.service = service
    app.state.store = db
    app.state.tokens = TokenCache(db, wall.now)
    app.state.listings = Listings()
    app.state.config = config
    app.state.secrets = SecretService(db, box, wall)
    # the agents' routes first: a request is matched against the routes in this order, and
    # their heartbeats, polls and reports are most of a controller's requests
    for r in (
        agent,
        jobs,
        sbatch,
        squeue,
        nodes,
        nodecommands,
        maintenance,
        queues,
        reservations,
        admin,
        secrets,
        services,
        gateway,
    ):
        app.include_router(r.router, prefix=API)
    app.include_router(stale.router, prefix=API)  # a standby's reads from the store (--ha)
    metrics.install(app, service, config)  # /metrics, outside the API's prefix
    dashboard.install(app, service, API)  # / and its files; its JSON under the API's prefix
    apidocs.install(app, API)  # Swagger UI at {API}/docs, its files served from here
    errors.install(app)  # one error shape for every 4xx and 5xx; refusals by their type
    install_bodies(app, config)
    if ha is not None:  # a standby answers where the leader is, and nothing else
        app.add_middleware(
            StandbyGate, ready=ha.ready, leader=ha.leader, contact=ha.contact, told=ha.told
        )
    app.state.ha = ha
    install_health(app, service, wall)
    errors.document(app, API, CONFLICTS, EXTRA_ERRORS, METRICS_SCHEME)
    return app


def install_bodies(app: FastAPI, config: ServerConfig) -> None:
    """The layers a request's body goes through before the application reads it."""
    # innermost: a plain submission skips FastAPI's routing (submit_fast.py)
    app.add_middleware(SubmitFastPath, api=app, path=f"{API}/jobs")
    # a JSON body that gives a key twice is refused (422) before anything reads it
    app.add_middleware(StrictJson)
    # outermost: a body over the limit is refused before anything reads it
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)


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
            # high availability: this controller's role, its epoch, where the leader is
            "ha": None if app.state.ha is None else app.state.ha.health(),
        }


# /metrics: behind a metrics token unless the controller runs with --metrics-public
# (routers/metrics.py)
METRICS_SCHEME = {
    "metricsToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "a token of role metrics ('gpufleet token create prometheus --role "
        "metrics'; it reads /metrics and nothing else), an admin token, or the controller's "
        "configured metrics token (extra.metrics_token); none when the controller runs with "
        "--metrics-public",
    }
}
# the operations that answer 409 (documented in the OpenAPI schema with the other errors)
# (a submission whose idempotency key was used for a different one; cancelling an ended job;
# a token name taken)
CONFLICTS = {
    ("POST", f"{API}/jobs"),
    ("POST", f"{API}/jobs/{{job_id}}/cancel"),
    ("POST", f"{API}/jobs/{{job_id}}/hold"),  # holding or releasing an ended job
    ("POST", f"{API}/jobs/{{job_id}}/requeue"),  # a pending, ended or --no-requeue job
    ("POST", f"{API}/jobs/{{job_id}}/signal"),  # a job not started, or ended
    ("PATCH", f"{API}/jobs/{{job_id}}"),  # an ended job, or a pending job's field of a started one
    ("POST", f"{API}/tokens"),
    ("POST", f"{API}/secrets"),
    # a service of that name exists; a change to a service that is being deleted
    ("POST", f"{API}/services"),
    ("PUT", f"{API}/services/{{name}}"),
    ("PATCH", f"{API}/services/{{name}}"),
    ("POST", f"{API}/services/{{name}}/scale"),
    # a rollout that awaits no confirmation, or has ended
    ("POST", f"{API}/maintenance/{{mid}}/confirm"),
    ("POST", f"{API}/maintenance/{{mid}}/cancel"),
    # a controller that runs its own proxy has no remote gateway to sync
    ("POST", f"{API}/gateway/sync"),
}
# errors only some operations answer, in the same one shape
EXTRA_ERRORS = {
    ("GET", "/metrics"): {401, 403, 404, 429},  # a token of another role: 403
    # sbatch refuses its command line (400); send the script, or read it where typed (428)
    ("POST", f"{API}/sbatch"): {400, 428},
    # sbatch --test-only: the same, nothing stored (routers/sbatch.py)
    ("POST", f"{API}/sbatch/test"): {400, 428},
    # squeue refuses its command line (400); a format of times of day is printed where typed
    # (428); a user token lists only its own jobs (403)
    ("POST", f"{API}/squeue"): {400, 403, 428},
    # gpufleet jobs' table: printed where the command runs (428); another user's (403)
    ("POST", f"{API}/jobs/table"): {403, 428},
}
