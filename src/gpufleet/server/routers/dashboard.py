"""The web dashboard: ``/`` and its static files, and the read-only JSON its pages need that the
rest of the API lacks: who the token is, the nodes × GPUs grid, a node's GPU metrics over
time (a ring per node, fed from heartbeats), and the alerts of the Prometheus that watches the
controller (``--prometheus URL``). Nothing here changes any state."""

from __future__ import annotations

from datetime import datetime
from importlib.resources import files
from typing import Any

import httpx
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response

from gpufleet.api import dashboard as views
from gpufleet.api.bounds import Finite, Name
from gpufleet.model.resources import MILLI
from gpufleet.server.auth import Principal, require
from gpufleet.server.dashboard.history import MetricsHistory
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService

STATIC = files("gpufleet.server.dashboard")
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
# the page runs only its own script and style and talks only to this controller
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
GPU_VALUES = {
    "util": "DCGM_FI_DEV_GPU_UTIL",
    "temp": "DCGM_FI_DEV_GPU_TEMP",
    "power": "DCGM_FI_DEV_POWER_USAGE",
    "fb_used": "DCGM_FI_DEV_FB_USED",
    "fb_free": "DCGM_FI_DEV_FB_FREE",
    "xid": "DCGM_FI_DEV_XID_ERRORS",
}

PROMETHEUS_TIMEOUT_S = 2.0  # the page polls every few seconds: a slow Prometheus is "no answer"
MAX_ALERTS = 200
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}

pages = APIRouter(include_in_schema=False)
api = APIRouter(tags=["dashboard"])
USERS = require("user", "admin")


def _asset(name: str) -> Response:
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if name == "index.html":
        headers["Content-Security-Policy"] = CSP
    body = (STATIC / name).read_bytes()
    return Response(body, media_type=ASSETS[name], headers=headers)


@pages.get("/")
async def index() -> Response:
    return _asset("index.html")


@pages.get("/dashboard/{name}")
async def asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(404, f"no dashboard file {name}")
    return _asset(name)


# the views leave out what they do not know rather than send null (see api/dashboard.py):
# ``response_model_exclude_unset=True`` on each of them


@api.get("/dashboard/me", response_model=views.DashboardMe, operation_id="getDashboardMe")
async def me(who: Principal = USERS, svc: ControllerService = Depends(service)) -> dict[str, Any]:
    """The token's identity, and the controller's clock (the page reckons ages against it)."""
    return {"name": who.name, "role": who.role, "user": who.user, "time": svc.clock.now()}


def _gpu_values(metrics: Any) -> dict[int, dict[str, float]]:
    gpus = metrics.get("gpus") if isinstance(metrics, dict) else None
    out: dict[int, dict[str, float]] = {}
    for g in gpus if isinstance(gpus, list) else []:
        labels = g.get("labels") if isinstance(g, dict) else None
        values = g.get("values") if isinstance(g, dict) else None
        idx = str(labels.get("gpu", "")) if isinstance(labels, dict) else ""
        if not (idx.isascii() and idx.isdigit()) or not isinstance(values, dict):
            continue
        out[int(idx)] = {
            k: values[m] for k, m in GPU_VALUES.items() if type(values.get(m)) in (int, float)
        }
    return out


def cluster_view(svc: ControllerService, who: Principal) -> dict[str, Any]:
    """Each node with its state and, per GPU, the last heartbeat's values, the share allocated
    and the jobs holding it (a user's token sees only their own jobs' ids)."""
    running = svc.running_jobs()
    holders: dict[tuple[str, int], list[str]] = {}
    for jid, r in running.items():
        if who.role == "user" and r.spec.user != who.user:
            continue
        for p in r.allocation:
            for d in p.gpus:
                holders.setdefault((p.node, d), []).append(jid)
    nodes = []
    states: dict[str, int] = {}
    gpus_total = gpus_alloc = 0.0
    for name, n in svc.nodes_by_name():
        link = svc.links.get(name)
        values = {} if n.lost or link is None else _gpu_values(link.metrics)
        gpus = []
        for i in range(max(n.spec.gpus, max(values, default=-1) + 1)):
            free = n.gpu_free[i] if i < len(n.gpu_free) else MILLI
            bad = (not n.healthy) and (not n.bad_gpus or i in n.bad_gpus)
            gpus.append(
                {
                    "index": i,
                    **values.get(i, {}),
                    "alloc": (MILLI - free) / MILLI,
                    "jobs": holders.get((name, i), []),
                    "healthy": not bad,
                    "reporting": i in values,
                }
            )
        states[n.state] = states.get(n.state, 0) + 1
        gpus_total += n.spec.gpus
        gpus_alloc += sum(MILLI - f for f in n.gpu_free) / MILLI
        nodes.append(
            {
                "name": name,
                "state": n.state,
                "why": n.why,
                "gpu_model": n.spec.gpu_model,
                "leaf": n.spec.leaf,
                "pod": n.spec.pod,
                "last_heartbeat": link.last_seen if link is not None else None,
                "driver_version": link.driver_version if link is not None else "",
                "cuda_version": link.cuda_version if link is not None else "",
                "cpu_cores": n.spec.cpu_milli / MILLI,
                "cpu_free": n.cpu_free / MILLI,
                "memory_gib": n.spec.memory_mib / 1024,
                "memory_free_gib": n.mem_free / 1024,
                "gpus": gpus,
            }
        )
    return {
        "time": svc.clock.now(),
        "nodes": nodes,
        "states": states,
        "gpus_total": gpus_total,
        "gpus_allocated": gpus_alloc,
        "running_jobs": len(running),
        "pending_jobs": svc.pending_count,
    }


@api.get(
    "/dashboard/cluster",
    response_model=views.ClusterView,
    operation_id="getDashboardCluster",
    response_model_exclude_unset=True,
)
async def cluster(
    who: Principal = USERS, svc: ControllerService = Depends(service)
) -> dict[str, Any]:
    return cluster_view(svc, who)


def _epoch(stamp: Any) -> float | None:
    """Prometheus's RFC 3339 ``activeAt`` (nanoseconds, ``Z``) as seconds since the epoch."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def _strings(d: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in d.items()} if isinstance(d, dict) else {}


def alerts_view(payload: Any, who: Principal) -> list[dict[str, Any]]:
    """The firing and pending alerts of a Prometheus ``/api/v1/alerts`` answer, firing and
    critical first. A user's token does not see alerts about another user's jobs."""
    data = payload.get("data") if isinstance(payload, dict) else None
    raw = data.get("alerts") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise ValueError("the answer holds no list of alerts")
    out = []
    for a in raw:
        if not isinstance(a, dict) or a.get("state") not in ("firing", "pending"):
            continue
        labels, notes = _strings(a.get("labels")), _strings(a.get("annotations"))
        if who.role == "user" and labels.get("user", who.user) != who.user:
            continue
        out.append(
            {
                "name": labels.get("alertname", ""),
                "state": a["state"],
                "severity": labels.get("severity", ""),
                "node": labels.get("Hostname") or labels.get("node") or "",
                "gpu": labels.get("gpu", ""),
                "summary": notes.get("summary", ""),
                "description": notes.get("description", ""),
                "labels": labels,
                # a string or nothing (a Prometheus that sends something else is answered as
                # if it sent nothing, not with a 500 from the response's check)
                "active_at": a["activeAt"] if isinstance(a.get("activeAt"), str) else "",
                "since": _epoch(a.get("activeAt")),
            }
        )
    out.sort(
        key=lambda x: (
            x["state"] != "firing",
            SEVERITY_ORDER.get(x["severity"], 3),
            x["name"],
            x["node"],
            int(x["gpu"]) if (x["gpu"].isascii() and x["gpu"].isdigit()) else -1,
        )
    )
    return out


async def fetch_alerts(url: str, who: Principal, timeout_s: float) -> dict[str, Any]:
    """``{"configured", "alerts", "error"}``: never raises, whatever Prometheus does."""
    if not url:
        return {"configured": False, "alerts": [], "error": None}
    out: dict[str, Any] = {"configured": True, "alerts": [], "error": None}
    if who.role == "admin":
        out["url"] = url
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            r = await client.get(url.rstrip("/") + "/api/v1/alerts")
        if r.status_code != 200:
            out["error"] = f"Prometheus answered {r.status_code}: {r.text[:200]}"
            return out
        alerts = alerts_view(r.json(), who)
    except httpx.TimeoutException:
        out["error"] = f"Prometheus did not answer within {timeout_s:g} s"
    except httpx.HTTPError as e:
        out["error"] = f"Prometheus did not answer: {type(e).__name__}: {e}"
    except ValueError as e:  # not JSON, or not an alerts answer
        out["error"] = f"Prometheus's answer is not its alerts API's: {e}"
    else:
        out["alerts"] = alerts[:MAX_ALERTS]
        out["more"] = max(0, len(alerts) - MAX_ALERTS)
    return out


@api.get(
    "/dashboard/alerts",
    response_model=views.AlertsOut,
    operation_id="getDashboardAlerts",
    response_model_exclude_unset=True,
)
async def alerts(request: Request, who: Principal = USERS) -> dict[str, Any]:
    """The firing and pending alerts of the Prometheus given with ``--prometheus`` (name,
    state, severity, node, GPU, summary, since); ``configured: false`` without one, and an
    ``error`` saying why when it does not answer."""
    url = request.app.state.config.prometheus_url
    return await fetch_alerts(url, who, PROMETHEUS_TIMEOUT_S)


@api.get(
    "/nodes/{name}/history", response_model=views.NodeHistoryOut, operation_id="getNodeHistory"
)
async def history(
    name: Name,
    request: Request,
    _: Principal = USERS,
    svc: ControllerService = Depends(service),
    since: Finite | None = Query(None, description="only samples after this time"),
    events: int = Query(50, ge=0, le=1000, description="the node's newest events"),
) -> dict[str, Any]:
    """The node's GPU metrics over time (from its heartbeats, oldest first) and its newest
    events (lost, drained, resumed, unhealthy, healthy)."""
    n = svc.node(name)
    if n is None:
        raise HTTPException(404, f"no node {name} (see 'gpufleet nodes')")
    hist: MetricsHistory = request.app.state.history
    evs = svc.node_events(name, events) if events else []
    return {
        "node": name,
        "state": n.state,
        "why": n.why,
        "gpu_model": n.spec.gpu_model,
        "gpus": n.spec.gpus,
        "time": svc.clock.now(),
        **hist.series(name, since),
        "events": [{"time": e.time, "what": e.what, "why": e.why} for e in evs],
    }


def install(app: FastAPI, svc: ControllerService, prefix: str) -> MetricsHistory:
    """Serve the dashboard and keep each node's GPU metrics history from its heartbeats."""
    hist = MetricsHistory(min_interval_s=0.9 * svc.heartbeat_s)
    app.state.history = hist
    svc.on_heartbeat = hist.record
    app.include_router(pages)
    app.include_router(api, prefix=prefix)
    return hist
