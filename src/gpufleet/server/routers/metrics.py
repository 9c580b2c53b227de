"""/metrics in the Prometheus text format: open by default (Prometheus's convention; nothing in
it is secret: no tokens, commands, environments or node labels), or behind one bearer token
when the controller is configured with ``extra.metrics_token`` or ``GPUFLEET_METRICS_TOKEN``."""

from __future__ import annotations

import hmac
import os

from fastapi import APIRouter, FastAPI, HTTPException, Request, Response

from gpufleet.server.config import ServerConfig
from gpufleet.server.metrics import CONTENT_TYPE, DEFAULT_IDLE_UTIL_PCT, FleetCollector
from gpufleet.server.service import ControllerService

router = APIRouter(tags=["meta"])


@router.get(
    "/metrics",
    response_class=Response,
    operation_id="getMetrics",
    # open, or the metrics token when the controller has one
    openapi_extra={"security": [{}, {"metricsToken": []}]},
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request, node: str | None = None, gpus: bool = True) -> Response:
    """Rendered on the controller's loop, so it reads one consistent state. ``node``: only
    that node's GPU series (a scrape target per node); ``gpus=false``: all but GPU series."""
    token: str = request.app.state.metrics_token
    if token:
        scheme, _, secret = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(secret.strip(), token):
            raise HTTPException(
                401,
                "this controller's /metrics needs its metrics token: in Prometheus, "
                "'authorization: {credentials: <token>}' in the scrape config",
                headers={"WWW-Authenticate": "Bearer"},
            )
    collector: FleetCollector = request.app.state.metrics
    try:
        body = collector.render(node, gpus)
    except KeyError:
        raise HTTPException(404, f"no node {node!r} in this cluster") from None
    return Response(body, media_type=CONTENT_TYPE)


def install(app: FastAPI, service: ControllerService, config: ServerConfig) -> FleetCollector:
    """Serve /metrics for ``service``; the collector also counts what each turn commits."""
    idle = float(config.extra.get("metrics_idle_util_pct", DEFAULT_IDLE_UTIL_PCT))
    collector = FleetCollector(service, idle_util_pct=idle)
    service.on_commit = collector.on_commit
    app.state.metrics = collector
    app.state.metrics_token = config.extra.get("metrics_token") or os.environ.get(
        "GPUFLEET_METRICS_TOKEN", ""
    )
    app.include_router(router)
    return collector
