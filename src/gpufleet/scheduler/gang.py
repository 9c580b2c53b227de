"""Placing a whole job: every worker or none, inside one topology domain when asked.

The placement plugin chooses a node per worker; this module decides which domains to try
(one node, then one leaf, then one pod, then anywhere, as the job and plugin ask), assigns the
workers tentatively and rolls back when the gang does not fit whole."""

from __future__ import annotations

from random import Random

from gpufleet.model.allocation import Allocation, Placement
from gpufleet.model.job import JobSpec, TopologyLevel
from gpufleet.scheduler.framework import PlacePlugin
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.workspace import ANYWHERE, Domain, Workspace

LEVELS = ("node", "leaf", "pod", "any")
MAX_DOMAINS_TRIED = 4  # per level: the best few by fit; more rarely helps and costs a lot


def levels_for(spec: JobSpec, prefers_topology: bool) -> tuple[str, ...]:
    """Domain levels to try, tightest first."""
    if spec.workers == 1:
        return ("any",)
    t = spec.topology
    if t.level is TopologyLevel.ANY:
        return LEVELS if prefers_topology else ("any",)
    start = LEVELS.index(t.level.value)
    if t.required:
        return LEVELS[: start + 1] if prefers_topology else (t.level.value,)
    return LEVELS if prefers_topology else LEVELS[start:]


def domains(level: str, req: WorkerRequest, workers: int, ws: Workspace) -> list[Domain]:
    """The most promising domains of ``level`` that could hold ``workers`` workers."""
    if level == "any":
        return [ANYWHERE]
    if level == "node":
        if req.whole and req.gpus:
            big = WorkerRequest(
                req.gpus * workers,
                req.gpu_milli,
                req.cpu_milli * workers,
                req.memory_mib * workers,
                req.models,
            )
            out: list[Domain] = []
            for i in ws.candidates(big):
                out.append(Domain("node", i))
                if len(out) >= MAX_DOMAINS_TRIED:
                    break
            return out
        return [Domain("node", i) for i in range(ws.n) if ws.workers_fit(i, req) >= workers][
            :MAX_DOMAINS_TRIED
        ]
    bounds = [
        (ws.capacity_bound(req, leaf) if req.whole and req.gpus else workers, leaf)
        for leaf in range(len(ws.leaf_names))
    ]
    if level == "leaf":
        fits = sorted((b, leaf) for b, leaf in bounds if b >= workers)
        return [Domain("leaf", leaf) for _, leaf in fits[:MAX_DOMAINS_TRIED]]
    per_pod = [0] * len(ws.pod_names)
    for b, leaf in bounds:
        per_pod[ws.leaf_pod[leaf]] += b
    fits = sorted((b, pod) for pod, b in enumerate(per_pod) if b >= workers)
    return [Domain("pod", pod) for _, pod in fits[:MAX_DOMAINS_TRIED]]


def place_in(
    domain: Domain,
    req: WorkerRequest,
    workers: int,
    ws: Workspace,
    plugin: PlacePlugin,
    rng: Random,
) -> Allocation | None:
    placed: list[tuple[int, Placement]] = []
    for _ in range(workers):
        choice = plugin.choose(req, ws, domain, rng)
        if choice is None:
            for i, p in reversed(placed):
                ws.release(i, p)
            return None
        i, devices = choice
        placed.append((i, ws.assign(i, devices, req)))
    return tuple(p for _, p in placed)


def place_gang(
    spec: JobSpec, ws: Workspace, plugin: PlacePlugin, rng: Random
) -> tuple[Allocation | None, str]:
    """An allocation for every worker of ``spec`` (assigned in ``ws``), and the level it used;
    or None and the tightest level that was tried."""
    req = WorkerRequest.of(spec)
    workers = spec.workers
    if req.whole and req.gpus and ws.free_gpus(req) < req.gpus * workers:
        return None, "any"
    levels = levels_for(spec, plugin.prefers_topology)
    for level in levels:
        for domain in domains(level, req, workers, ws):
            alloc = place_in(domain, req, workers, ws, plugin, rng)
            if alloc is not None:
                return alloc, level
    return None, levels[0]
