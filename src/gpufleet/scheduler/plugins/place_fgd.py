"""Fragmentation Gradient Descent (Weng et al., ATC'23): place where the expected
fragmentation of the cluster grows least, measured against the target workload.

The target workload is the distribution of job shapes (CPU, GPU share, GPU count, models) of the
jobs now pending and running, cut at 95% popularity as in the paper; with no jobs it is the
request being placed."""

from __future__ import annotations

from random import Random

from gpufleet.scheduler import openb_scores as osc
from gpufleet.scheduler.framework import Choice
from gpufleet.scheduler.plugins._scored_place import ScoredPlace, pod_of, workload_pods
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import Snapshot
from gpufleet.scheduler.workspace import Domain, Workspace

NAME = "place/fgd"


class Plugin(ScoredPlace):
    policy = "fgd"

    def __init__(self, popularity_pct: int = 95) -> None:
        super().__init__()
        if not 1 <= popularity_pct <= 100:
            raise ValueError("popularity_pct must be within 1..100")
        self.popularity_pct = popularity_pct

    def prepare(self, snap: Snapshot, ws: Workspace) -> None:
        pods = workload_pods(snap)
        self.workload = osc.target_workload(pods, self.popularity_pct) if pods else None

    def choose(self, req: WorkerRequest, ws: Workspace, domain: Domain, rng: Random) -> Choice:
        if self.workload is None:
            self.workload = osc.target_workload([pod_of(req)], self.popularity_pct)
        return super().choose(req, ws, domain, rng)
