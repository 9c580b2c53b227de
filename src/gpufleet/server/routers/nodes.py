"""/nodes: list (like sinfo), drain, resume."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query

from gpufleet.api import schemas as s
from gpufleet.api.bounds import Name
from gpufleet.core.state import NodeRuntime
from gpufleet.server.auth import Principal, require
from gpufleet.server.routers.deps import service, store
from gpufleet.server.service import ControllerService
from gpufleet.server.store import Store
from gpufleet.server.views import node_out

router = APIRouter(tags=["nodes"])


def _out(svc: ControllerService, name: str, n: NodeRuntime) -> s.NodeOut:
    link = svc.links.get(name)
    jobs = svc.node_jobs(name)
    if link is None:
        return node_out(n, None, jobs)
    return node_out(
        n,
        link.last_seen,
        jobs,
        address=link.address,
        driver_version=link.driver_version,
        cuda_version=link.cuda_version,
        gpu_info=link.gpu_info,
    )


@router.get("/nodes", response_model=list[s.NodeOut], operation_id="listNodes")
async def nodes(
    _: Principal = require("user", "admin"), svc: ControllerService = Depends(service)
) -> Any:
    return [_out(svc, name, n) for name, n in svc.nodes_by_name()]


async def _drain(
    name: str,
    drain: bool,
    why: str,
    who: Principal,
    svc: ControllerService,
    st: Any,
    force: bool = False,
) -> s.NodeOut:
    if svc.node(name) is None:
        raise HTTPException(404, f"no node {name} (see 'gpufleet nodes')")
    detail: dict[str, Any] = {"reason": why}
    if force:
        detail["force"] = True
    action = "node.drain" if drain else "node.resume"
    # the audit entry commits with the drain: no answer for a half-done one
    await svc.drain(name, drain, why, force=force, audit=(who.name, who.role, action, name, detail))
    n = svc.node(name)
    assert n is not None  # nodes are never forgotten, only lost
    return _out(svc, name, n)


@router.post("/nodes/{name}/drain", response_model=s.NodeOut, operation_id="drainNode")
async def drain(
    name: Name,
    body: s.DrainRequest,
    who: Principal = require("admin"),
    svc: ControllerService = Depends(service),
    st: Store = Depends(store),
) -> Any:
    return await _drain(name, True, body.reason, who, svc, st)


@router.post("/nodes/{name}/resume", response_model=s.NodeOut, operation_id="resumeNode")
async def resume(
    name: Name,
    who: Principal = require("admin"),
    svc: ControllerService = Depends(service),
    st: Store = Depends(store),
    force: bool = Query(
        False, description="also back into service while its health checks still fail"
    ),
) -> Any:
    """Clears any drain, an admin's or the controller's own after a failed check; a node
    whose checks still fail stays out of service unless ``force``."""
    why = "resumed by admin" + (" (forced)" if force else "")
    return await _drain(name, False, why, who, svc, st, force)
