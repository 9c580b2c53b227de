"""/nodes/{name}/commands: an admin's command run on a node by its agent (output captured,
exit code kept, bounded in time, audited); the logic is server/service/nodecommands.py."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from gpufleet.api.bounds import Name
from gpufleet.api.nodecommands import NodeCommandCreate, NodeCommandOut
from gpufleet.server.auth import Principal, require
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService

router = APIRouter(tags=["nodes"])
ADMINS = require("admin")
# ?wait=S: answer once the command ended, or as it stands after S seconds (0: at once)
Wait = Annotated[
    float, Query(ge=0, le=600, allow_inf_nan=False, description="seconds to await its end")
]


@router.post(
    "/nodes/{name}/commands",
    response_model=NodeCommandOut,
    status_code=201,
    operation_id="runNodeCommand",
)
async def run(
    name: Name,
    body: NodeCommandCreate,
    who: Principal = ADMINS,
    svc: ControllerService = Depends(service),
    wait: Wait = 0.0,
) -> Any:
    c = await svc.start_node_command(
        name,
        "exec",
        body.command,
        timeout_s=body.timeout_s,
        why=body.why,
        actor=who.name,
        role=who.role,
    )
    return await svc.wait_node_command(c.id, wait) if wait > 0 else c


@router.get(
    "/nodes/{name}/commands", response_model=list[NodeCommandOut], operation_id="listNodeCommands"
)
async def listing(
    name: Name, _: Principal = ADMINS, svc: ControllerService = Depends(service)
) -> Any:
    return svc.node_commands(name)


@router.get("/node-commands/{cid}", response_model=NodeCommandOut, operation_id="showNodeCommand")
async def show(
    cid: Name,
    _: Principal = ADMINS,
    svc: ControllerService = Depends(service),
    wait: Wait = 0.0,
) -> Any:
    return await svc.wait_node_command(cid, wait)
