"""/agent/…: what node agents call. An agent token reports only for its own node."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request

from gpufleet.api import schemas as s
from gpufleet.api.bounds import Name
from gpufleet.api.nodecommands import NodeCommandResult
from gpufleet.model import catalog
from gpufleet.model.cluster import NodeSpec, check_features
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.containers import LABEL
from gpufleet.server.auth import Principal, require, require_node
from gpufleet.server.routers.deps import service, service_any, store
from gpufleet.server.secrets import SecretService, refused_events
from gpufleet.server.service import ControllerService
from gpufleet.server.service.nodecommands import KINDS as NODE_COMMANDS

router = APIRouter(prefix="/agent", tags=["agent"])
log = logging.getLogger("gpufleet.controller")
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
AGENT = require("agent")


def node_spec(req: s.AgentRegister) -> NodeSpec:
    try:
        features = check_features(req.features)
    except ValueError as e:
        raise HTTPException(422, f"features: {e}") from None
    model = ""
    if req.gpus:
        m = catalog.find(req.gpu_model)
        if m is None:
            raise HTTPException(422, f"gpu_model: unknown GPU model {req.gpu_model!r}")
        model = m.name
    return NodeSpec(
        req.node,
        model,
        len(req.gpus),
        round(req.cpu_cores * MILLI),
        round(req.memory_gib * 1024),
        req.leaf,
        req.pod,
        "",
        0,
        tuple(sorted(runtime_labels(req).items())),
        features,
        req.gres_type.strip().lower() if req.gpus else "",
    )


def runtime_labels(req: s.AgentRegister) -> dict[str, str]:
    """The node's labels, and its container runtimes as the label the scheduler reads."""
    labels = dict(req.labels)
    if req.container_runtimes:
        labels[LABEL] = ",".join(req.container_runtimes)
    return labels


@router.post("/register", response_model=s.RegisterResult, operation_id="registerAgent")
async def register(
    body: s.AgentRegister,
    who: Principal = AGENT,
    svc: ControllerService = Depends(service),
    st: Any = Depends(store),
) -> Any:
    require_node(body.node, who)
    res = await svc.register(body, node_spec(body))
    svc.resend_node_commands(body.node)  # a restarted controller's outbox lost them
    st.audit(
        who.name,
        who.role,
        "node.register",
        body.node,
        {"gpus": len(body.gpus), "model": body.gpu_model},
        time=svc.clock.now(),
    )
    return res


@router.post("/{node}/heartbeat", response_model=s.HeartbeatResult, operation_id="sendHeartbeat")
async def heartbeat(
    node: Name,
    body: s.Heartbeat,
    who: Principal = AGENT,
    svc: ControllerService = Depends(service_any),
) -> Any:
    require_node(node, who)
    return svc.heartbeat(node, body)


@router.get("/{node}/commands", response_model=s.CommandBatch, operation_id="pollCommands")
async def commands(
    node: Name,
    request: Request,
    who: Principal = AGENT,
    svc: ControllerService = Depends(service_any),
    wait: float = Query(20.0, ge=0, le=60, allow_inf_nan=False),
    ack: int = Query(0, ge=0, le=2**63 - 1, description="the highest seq received so far"),
) -> Any:
    require_node(node, who)
    svc.commands_allowed(node)
    cmds = await _unless_gone(request, svc.outbox.take(node, wait, ack))
    svc.node_commands_taken(node, [c.job for c in cmds if c.kind in NODE_COMMANDS])
    ha = getattr(request.app.state, "ha", None)
    if cmds and ha is not None and not ha.ready():  # the lease ended while the poll waited
        raise HTTPException(503, "this controller no longer leads: ask the leader")
    if any(c.secrets for c in cmds):
        _plain_http(request, node)
        cmds = await _hand_over(request.app.state.secrets, svc, node, cmds)
    return s.CommandBatch(commands=cmds)


async def _unless_gone(
    request: Request, take: Coroutine[Any, Any, list[s.AgentCommand]]
) -> list[s.AgentCommand]:
    """What ``take`` brings; nothing once the agent's connection closes first (an agent that
    stopped or died while its poll waited): what is queued stays queued, since only the next
    poll acknowledges it. So no handler outlives its agent, and a controller's shutdown, which
    waits for the requests in flight, does not wait out their long-polls."""
    taking = asyncio.ensure_future(take)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({taking, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not taking.done():
            taking.cancel()
    return taking.result() if taking in done else []


async def _disconnected(request: Request) -> None:
    """Returns when the client has closed its connection (the ASGI server says so)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


_WARNED: set[str] = set()


def _plain_http(request: Request, node: str) -> None:
    """Say once per node when secrets leave for another machine without TLS."""
    host = request.client.host if request.client else ""
    if request.url.scheme == "http" and node not in _WARNED and host not in LOOPBACK:
        _WARNED.add(node)
        log.warning(
            "handing secrets to node %s (%s) over plain HTTP: serve the controller with "
            "--tls-cert/--tls-key so that they travel encrypted",
            node,
            host,
        )


async def _hand_over(
    secrets: SecretService, svc: ControllerService, node: str, cmds: list[s.AgentCommand]
) -> list[s.AgentCommand]:
    """Open the secrets of the launches in this answer (only here: the outbox keeps their
    references); a launch whose secret is gone fails with a Reason that says so."""
    users = {c.job: rec.job.spec.user for c in cmds if (rec := svc.job(c.job)) is not None}
    out, refused = secrets.hand_over(node, cmds, users)
    if refused:
        await svc.agent_events(node, refused_events(refused))
        svc.outbox.discard(node, {r.seq for r in refused})
    return out


@router.post("/{node}/events", status_code=204, operation_id="sendTaskEvents")
async def events(
    node: Name,
    body: s.AgentEvents,
    who: Principal = AGENT,
    svc: ControllerService = Depends(service),
) -> None:
    require_node(node, who)
    await svc.agent_events(node, body.events)


@router.post("/{node}/accounts", status_code=204, operation_id="sendAccountAnswers")
async def accounts(
    node: Name,
    body: s.AccountAnswers,
    who: Principal = AGENT,
    svc: ControllerService = Depends(service),
) -> None:
    """The node's answers to an "accounts" command: each user's uid there, or null."""
    require_node(node, who)
    await svc.accounts_answered(node, dict(body.answers))


@router.post("/{node}/logs", status_code=204, operation_id="sendTaskLogs")
async def logs(
    node: Name, body: s.LogChunk, who: Principal = AGENT, svc: ControllerService = Depends(service)
) -> None:
    require_node(node, who)
    # the node that ran that rank of that attempt, an older one too: its log's tail may come
    # after the job moved on (a lost node back, a requeue), and it is what explains the move
    if svc.ran_on(body.job, body.attempt, body.rank) != node:
        raise HTTPException(
            403,
            f"node {node} did not run rank {body.rank} of job {body.job} (attempt {body.attempt})",
        )
    try:
        svc.logs.append(
            body.job, body.attempt, body.rank, body.stream, body.offset, body.data, body.final
        )
    except ValueError as e:
        raise HTTPException(422, str(e)) from None
    except OSError as e:  # the controller's disk (full): the agent keeps the bytes and retries
        raise HTTPException(503, f"could not write the log: {e}") from None


@router.post("/{node}/command-results", status_code=204, operation_id="sendNodeCommandResult")
async def command_result(
    node: Name,
    body: NodeCommandResult,
    who: Principal = AGENT,
    svc: ControllerService = Depends(service),
) -> None:
    """An operator's command ended on the node (server/service/nodecommands.py)."""
    require_node(node, who)
    svc.node_command_result(node, body)
