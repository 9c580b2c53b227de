"""/queues: quota, usage and fair share; admins change weights, cohorts and quotas."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Depends

from gpufleet.api import schemas as s
from gpufleet.api.bounds import QueueName
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI, UNLIMITED, Resources
from gpufleet.server.auth import Principal, require
from gpufleet.server.routers.deps import service
from gpufleet.server.service import ControllerService

router = APIRouter(tags=["queues"])


def queue_out(svc: ControllerService, q: QueueSpec) -> s.QueueOut:
    load = svc.queue_load(q.name)
    used = load.used
    return s.QueueOut(
        name=q.name,
        cohort=q.cohort,
        weight=q.weight,
        quota_gpus=None if not q.limited else q.quota.gpu_milli / MILLI,
        used_gpus=used.gpu_milli / MILLI,
        borrowing=q.limited and not used.fits_in(q.quota),
        pending=load.pending,
        running=load.running,
        dominant_share=load.dominant_share,
        fair_share_usage=load.fair_share_usage,
        preempt_grace_max_s=q.preempt_grace_max_s,
        priority_max=q.priority_max,
        idle=None
        if q.idle is None
        else s.IdlePolicyOut(
            threshold_pct=q.idle.threshold_pct,
            warn_after_s=list(q.idle.warn_after_s),
            act_after_s=q.idle.act_after_s,
            action=q.idle.action,
            window_s=q.idle.window_s,
            exempt=q.idle.exempt,
            exempt_max_s=q.idle.exempt_max_s,
            charge_idle=q.idle.charge_idle,
        ),
        defrag=None if q.defrag is None else q.defrag.to_dict(),
        pack_encoders=q.pack_encoders,
        gpu_sharing=list(q.gpu_sharing),
        nodes=dict(q.nodes),
    )


@router.get("/queues", response_model=list[s.QueueOut], operation_id="listQueues")
async def queues(
    _: Principal = require("user", "admin"), svc: ControllerService = Depends(service)
) -> Any:
    await svc.until_held()  # a job answered just now is counted (held after its step)
    return [queue_out(svc, svc.queue(n)) for n in svc.queue_names()]


@router.put("/queues/{name}", response_model=s.QueueOut, operation_id="updateQueue")
async def update(
    name: QueueName,
    body: s.QueueUpdate,
    who: Principal = require("admin"),
    svc: ControllerService = Depends(service),
) -> Any:
    q = svc.queue(name)
    if body.weight is not None:
        q = replace(q, weight=body.weight)
    if body.cohort is not None:
        q = replace(q, cohort=body.cohort)
    if body.preempt_grace_max_s is not None:
        q = replace(q, preempt_grace_max_s=body.preempt_grace_max_s)
    if body.priority_max is not None:
        q = replace(q, priority_max=body.priority_max)
    if body.pack_encoders is not None:
        pack = body.pack_encoders  # "default": the queue's own setting taken away
        q = replace(q, pack_encoders=pack if isinstance(pack, bool) else None)
    if body.gpu_sharing is not None:
        q = replace(q, gpu_sharing=tuple(dict.fromkeys(body.gpu_sharing)))
    if body.nodes is not None:
        q = replace(q, nodes=tuple(sorted(body.nodes.items())))
    if body.quota_gpus is not None:
        base = q.quota if q.limited else UNLIMITED
        q = replace(
            q, quota=Resources(round(body.quota_gpus * MILLI), base.cpu_milli, base.memory_mib)
        )
    audit = (who.name, who.role, "queue.update", name, body.model_dump(exclude_none=True))
    await svc.update_queue(q, audit)
    return queue_out(svc, q)
