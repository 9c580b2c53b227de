"""Placement through the workspace indexes: the tightest node first (best fit by free GPUs),
preferring a node that already holds the job's dataset among the first few candidates."""

from __future__ import annotations

from gpufleet.model.resources import MILLI
from gpufleet.scheduler.framework import NO_NODE, Choice, chosen
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.workspace import Domain, Workspace

LOCALITY_LOOKAHEAD = 32  # candidates examined for data locality before settling for the tightest


def tightest(req: WorkerRequest, ws: Workspace, domain: Domain) -> Choice:
    if not req.whole and req.gpus:
        return _tightest_device(req, ws, domain)
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
        return NO_NODE
    devices = ws.devices_for(first, req)
    return NO_NODE if devices is None else chosen(first, devices)


def _tightest_device(req: WorkerRequest, ws: Workspace, domain: Domain) -> Choice:
    """A fraction goes to the device it fills most tightly, over every partly used node (the
    candidates list those first), then to a whole free device; a dataset breaks ties."""
    best: tuple[int, tuple[int, ...]] | None = None
    best_key = (MILLI + 1, True)
    for i in ws.candidates(req, domain):
        devices = ws.devices_for(i, req)
        if devices is None:
            continue
        free = ws.gfree[i][devices[0]]
        key = (free, req.dataset not in ws.views[i].datasets if req.dataset else False)
        if key < best_key:
            best, best_key = (i, devices), key
            if free == req.gpu_milli and not key[1]:
                break  # a perfect fit
        if free >= MILLI and best_key[0] < MILLI:
            break  # past the partly used nodes, with one of them in hand
    return NO_NODE if best is None else chosen(*best)
