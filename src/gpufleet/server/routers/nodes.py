"""/nodes: list (like sinfo), drain, resume; /accounts/{user}: what the nodes say of a user's
Unix account."""

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
from gpufleet.server.views import node_out, powered_off_out

router = APIRouter(tags=["nodes"])


def _out(svc: ControllerService, name: str, n: NodeRuntime) -> s.NodeOut:
    link = svc.links.get(name)
    jobs = svc.node_jobs(name)
    if link is None:
        out = node_out(n, None, jobs)
    else:
        out = node_out(
            n,
            link.last_seen,
            jobs,
            address=link.address,
            driver_version=link.driver_version,
            cuda_version=link.cuda_version,
            gpu_info=link.gpu_info,
        )
    r = svc.active_reservation(name)
    if r is not None:
        out.reservation, out.maint = r.name, r.maint
    return out


@router.get("/nodes", response_model=list[s.NodeOut], operation_id="listNodes")
async def nodes(
    _: Principal = require("user", "admin"), svc: ControllerService = Depends(service)
) -> Any:
    up = [_out(svc, name, n) for name, n in svc.nodes_by_name()]
    off = [powered_off_out(*x) for x in svc.powered_off()]  # an elastic pool's, not up
    return sorted([*up, *off], key=lambda n: n.name) if off else up


async def _drain(
    name: str,
    drain: bool,
    why: str,
    who: Principal,
    svc: ControllerService,
    st: Any,
    force: bool = False,
    deadline_s: float | None = None,
) -> s.NodeOut:
    off = svc.powered_off_node(name)
    if svc.node(name) is None and (off is None or drain):
        raise HTTPException(404, f"no node {name} up (see 'gpufleet nodes')")
    detail: dict[str, Any] = {"reason": why}
    if force:
        detail["force"] = True
    if deadline_s is not None:
        detail["deadline_s"] = deadline_s
    action = "node.drain" if drain else "node.resume"
    # the audit entry commits with the drain: no answer for a half-done one
    audit = (who.name, who.role, action, name, detail)
    await svc.drain(name, drain, why, force=force, audit=audit, deadline_s=deadline_s)
    n = svc.node(name)
    if n is None:  # an elastic pool's node, powered off: an admin's resume of a failed one
        off = svc.powered_off_node(name)
        assert off is not None
        return powered_off_out(*off)
    return _out(svc, name, n)


@router.post("/nodes/{name}/drain", response_model=s.NodeOut, operation_id="drainNode")
async def drain(
    name: Name,
    body: s.DrainRequest,
    who: Principal = require("admin"),
    svc: ControllerService = Depends(service),
    st: Store = Depends(store),
) -> Any:
    return await _drain(name, True, body.reason, who, svc, st, deadline_s=body.deadline_s)


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


@router.get("/accounts/{user}", response_model=s.UserAccountsOut, operation_id="userAccounts")
async def user_accounts(
    user: Name, _: Principal = require("admin"), svc: ControllerService = Depends(service)
) -> Any:
    """The user's uid on each node that runs tasks as their owners (null: no account), the
    nodes that have not answered, and a UID that differs between nodes (ADR 0037)."""
    nodes, silent, mismatch = await svc.user_accounts(user)
    return s.UserAccountsOut(user=user, nodes=nodes, not_answered=silent, uid_mismatch=mismatch)
