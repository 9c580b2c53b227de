"""Placement through the workspace indexes: the tightest node first (best fit by free GPUs),
preferring a node that already holds the job's dataset among the first few candidates."""

from __future__ import annotations

from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.workspace import Domain, Workspace

LOCALITY_LOOKAHEAD = 32  # candidates examined for data locality before settling for the tightest


def tightest(
    req: WorkerRequest, ws: Workspace, domain: Domain
) -> tuple[int, tuple[int, ...]] | None:
    first = -1
    for seen, i in enumerate(ws.candidates(req, domain)):
        if first < 0:
            first = i
            if not req.dataset:
                break
        if req.dataset in ws.views[i].datasets:
            first = i
            break
        if seen + 1 >= LOCALITY_LOOKAHEAD:
            break
    if first < 0:
        return None
    devices = ws.devices_for(first, req)
    return None if devices is None else (first, devices)
