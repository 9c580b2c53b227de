"""Placement by scoring every feasible node (the Kubernetes Filter → Score shape).

The scores are the FGD paper's (``openb_scores``), so the live scheduler and the FGD experiment
rank nodes by the same arithmetic. Ties go to the earlier node in cluster order. Each worker
costs one pass over the feasible nodes of its domain: fine for hundreds of nodes; on thousands,
``topology`` or ``bestfit`` (index-driven) are the cheaper choice.
"""

from __future__ import annotations

from random import Random

from gpufleet.scheduler import openb_scores as osc
from gpufleet.scheduler.framework import NO_NODE, Choice, chosen
from gpufleet.scheduler.plugins.base import PlaceBase
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import Snapshot
from gpufleet.scheduler.workspace import Domain, Workspace


def pod_of(req: WorkerRequest) -> osc.PodRequest:
    return osc.PodRequest(
        req.cpu_milli, req.memory_mib, req.gpus, req.gpu_milli if req.gpus else 0, req.models
    )


def workload_pods(snap: Snapshot) -> list[osc.PodRequest]:
    """One pod per worker of the jobs pending and running: what FGD's target workload is built
    from (``place/fgd``, ``place/fgd-strand``). Jobs of one shape share one pod."""
    made: dict[tuple[int, int, int, int, tuple[str, ...]], osc.PodRequest] = {}
    out: list[osc.PodRequest] = []
    for jobs in (snap.pending, snap.running):
        for j in jobs:
            s = j.spec
            key = (s.cpu_milli, s.memory_mib, s.gpus_per_worker, s.gpu_milli, s.gpu_models)
            pod = made.get(key)
            if pod is None:
                pod = made[key] = pod_of(WorkerRequest.of(s))
            out.extend([pod] * s.workers)
    return out


def node_state(ws: Workspace, i: int) -> osc.NodeState:
    return osc.NodeState(ws.cpu[i], ws.mem[i], tuple(ws.gfree[i]), ws.model[i])


class ScoredPlace(PlaceBase):
    """Base for the score-every-node plugins; subclasses set ``policy``."""

    policy = ""

    def __init__(self) -> None:
        self.workload: osc.TargetWorkload | None = None

    def choose(self, req: WorkerRequest, ws: Workspace, domain: Domain, rng: Random) -> Choice:
        feasible = list(ws.candidates(req, domain))
        if not feasible:
            return NO_NODE
        pod = pod_of(req)
        if self.policy == "random":
            i = feasible[rng.randrange(len(feasible))]
            return chosen(i, osc.choose_gpus("random", node_state(ws, i), pod, rng=rng))
        states = [node_state(ws, i) for i in feasible]
        scores = [osc.node_score(self.policy, s, pod, self.workload) for s in states]
        if self.policy == "bestfit":
            scores = osc.normalize_minmax(scores)
        local = (
            [req.dataset in ws.views[i].datasets for i in feasible]
            if req.dataset
            else [False] * len(feasible)
        )
        # best score; among equals a node holding the dataset; then cluster order
        best = max(range(len(feasible)), key=lambda k: (scores[k], local[k], -feasible[k]))
        i = feasible[best]
        devices = osc.choose_gpus(self.policy, states[best], pod, self.workload, rng)
        return chosen(i, devices)
