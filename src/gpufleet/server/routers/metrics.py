"""/metrics in the Prometheus text format, behind a token by default: one of role ``metrics``
(``gpufleet token create prometheus --role metrics``: it may read /metrics and nothing else),
an admin token, or the one secret configured as ``extra.metrics_token`` or
``GPUFLEET_METRICS_TOKEN``. The series name nodes, queues, jobs and users; nothing in them is
a secret (no tokens, commands, environments or node labels), but who runs what is not for
anyone who can reach the port. ``--metrics-public`` (``ServerConfig.metrics_public``) serves
it to anyone, as Prometheus's exporters do, and then names no user (the ``user`` label of the
GPU series is left out) unless ``--metrics-user-labels`` asks for them."""

from __future__ import annotations

import hmac
import os
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.security.utils import get_authorization_scheme_param

from gpufleet.server.auth import Principal, principal
from gpufleet.server.config import ServerConfig
from gpufleet.server.metrics import CONTENT_TYPE, DEFAULT_IDLE_UTIL_PCT, FleetCollector
from gpufleet.server.service import ControllerService

READERS = ("metrics", "admin")  # the roles whose tokens read a closed /metrics
HOW = (
    "create a metrics token ('gpufleet token create prometheus --role metrics --out FILE') "
    "and give Prometheus its file: 'authorization: {credentials_file: FILE}' in the scrape "
    "config (or start the controller with --metrics-public)"
)


async def _check(request: Request) -> None:
    """Pass a caller that may read /metrics; 401 or 403 (saying how to get a token) if not."""
    configured: str = request.app.state.metrics_token
    scheme, secret = get_authorization_scheme_param(request.headers.get("authorization"))
    bearer = scheme.lower() == "bearer" and bool(secret.strip())
    if configured and bearer and hmac.compare_digest(secret.strip(), configured):
        return
    if not bearer:
        raise HTTPException(
            401, f"/metrics needs a metrics token: {HOW}", headers={"WWW-Authenticate": "Bearer"}
        )
    who: Principal = await principal(
        request, HTTPAuthorizationCredentials(scheme=scheme, credentials=secret)
    )
    if who.role not in READERS:
        a = "an" if who.role == "agent" else "a"
        raise HTTPException(
            403, f"{a} {who.role} token may not read /metrics (needs: metrics, admin): {HOW}"
        )


def install(app: FastAPI, service: ControllerService, config: ServerConfig) -> FleetCollector:
    """Serve /metrics for ``service``; the collector also counts what each turn commits."""
    idle = float(config.extra.get("metrics_idle_util_pct", DEFAULT_IDLE_UTIL_PCT))
    public = config.metrics_public
    users = config.metrics_user_labels or not public
    collector = FleetCollector(service, idle_util_pct=idle, user_labels=users)
    service.on_commit = collector.on_commit
    app.state.metrics = collector
    app.state.metrics_token = config.extra.get("metrics_token") or os.environ.get(
        "GPUFLEET_METRICS_TOKEN", ""
    )

    async def metrics(request: Request, node: str | None = None, gpus: bool = True) -> Response:
        """Rendered on the controller's loop, so it reads one consistent state. ``node``: only
        that node's GPU series (a scrape target per node); ``gpus=false``: all but GPU
        series."""
        if not public:
            await _check(request)
        ha = getattr(request.app.state, "ha", None)
        if ha is not None and not ha.ready():  # a standby holds no cluster: its role only
            return Response(ha.metrics_text(), media_type=CONTENT_TYPE)
        try:
            body = collector.render(node, gpus)
        except KeyError:
            raise HTTPException(404, f"no node {node!r} in this cluster") from None
        if ha is not None:
            body += ha.metrics_text()
        return Response(body, media_type=CONTENT_TYPE)

    security: list[dict[str, Any]] = [{}] if public else [{"metricsToken": []}]
    app.add_api_route(
        "/metrics",
        metrics,
        methods=["GET"],
        tags=["meta"],
        response_class=Response,
        operation_id="getMetrics",
        openapi_extra={"security": security},
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    return collector
