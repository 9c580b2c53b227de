"""Placing a whole job: every worker or none, inside one topology domain when asked.

The placement plugin chooses a node per worker; this module decides which domains to try
(one node, then one leaf, then one pod, then anywhere, as the job and plugin ask), assigns the
workers tentatively and rolls back when the gang does not fit whole.

A job with node filters (``WorkerRequest.select``: Slurm's -N distinct nodes, -w, -x, -C,
--exclusive) goes through the same steps: the workspace only offers nodes that pass the filters;
the nodes of ``-w`` take one worker each first; a distinct-node gang bars each node it takes
for the rest of its workers (at every topology level, so no two workers share a node); a
matching OR ``[a|b]`` is tried one choice at a time."""

from __future__ import annotations

from dataclasses import replace
from random import Random

from gpufleet.model.allocation import Allocation, Placement
from gpufleet.model.job import JobSpec, TopologyLevel
from gpufleet.scheduler.framework import Code, PlacePlugin
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.workspace import ANYWHERE, Domain, Workspace

LEVELS = ("node", "leaf", "pod", "any")
MAX_DOMAINS_TRIED = 4  # per level: the best few by fit; more rarely helps and costs a lot


def levels_for(spec: JobSpec, prefers_topology: bool) -> tuple[str, ...]:
    """Domain levels to try, tightest first."""
    if spec.workers == 1:
        return ("any",)
    if spec.distinct_nodes or spec.exclusive:  # one worker per node: never a one-node gang
        return tuple(x for x in _levels_for(spec, prefers_topology) if x != "node")
    return _levels_for(spec, prefers_topology)


def _levels_for(spec: JobSpec, prefers_topology: bool) -> tuple[str, ...]:
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
                select=req.select,
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
    bar = req.select is not None and req.select.one_per_node
    for _ in range(workers):
        status, node, devices = plugin.choose(req, ws, domain, rng)
        if status.code is not Code.SUCCESS:
            for i, p in reversed(placed):
                ws.release(i, p)
                if bar:
                    ws.barred.discard(i)
            return None
        placed.append((node, ws.assign(node, devices, req)))
        if bar:
            ws.barred.add(node)
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
    if not levels:  # one worker per node, yet all under one node
        return None, "node"
    if req.select is not None:
        return _place_selected(spec, req, levels, ws, plugin, rng)
    for level in levels:
        for domain in domains(level, req, workers, ws):
            alloc = place_in(domain, req, workers, ws, plugin, rng)
            if alloc is not None:
                return alloc, level
    return None, levels[0]


def _place_selected(
    spec: JobSpec,
    req: WorkerRequest,
    levels: tuple[str, ...],
    ws: Workspace,
    plugin: PlacePlugin,
    rng: Random,
) -> tuple[Allocation | None, str]:
    """``place_gang`` for a job with node filters, one choice of its matching OR at a time."""
    assert req.select is not None
    try:
        for sel in req.select.choices():
            alloc, level = _place_filtered(spec, replace(req, select=sel), levels, ws, plugin, rng)
            if alloc is not None:
                return alloc, level
        return None, levels[0]
    finally:
        ws.barred.clear()


def _place_filtered(
    spec: JobSpec,
    req: WorkerRequest,
    levels: tuple[str, ...],
    ws: Workspace,
    plugin: PlacePlugin,
    rng: Random,
) -> tuple[Allocation | None, str]:
    sel = req.select
    assert sel is not None
    bar = sel.one_per_node
    pinned: list[tuple[int, Placement]] = []

    def undo() -> None:
        for i, p in reversed(pinned):
            ws.release(i, p)
        ws.barred.clear()

    for name in sel.nodelist:  # -w: one worker on each listed node, first
        i = ws.by_name.get(name)
        devices = None if i is None else ws.devices_for(i, req)
        if i is None or devices is None:
            undo()
            return None, levels[0]
        pinned.append((i, ws.assign(i, devices, req)))
        if bar:
            ws.barred.add(i)
    rest = spec.workers - len(pinned)
    if rest == 0:
        return tuple(p for _, p in pinned), "any"
    for level in levels:
        for domain in domains(level, req, rest, ws):
            alloc = place_in(domain, req, rest, ws, plugin, rng)
            if alloc is not None:
                return tuple(p for _, p in pinned) + alloc, level
    undo()
    return None, levels[0]
