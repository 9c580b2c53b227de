"""FGD with stranding (gpufleet's own, ``scheduler/strand_scores.py``): FGD's fragmentation
gradient plus the GPU a node's CPU can no longer feed and, for pods that accept any GPU model,
the pressure of the pods that need that model. The same scorer runs ``gpufleet simulate fill
--placement fgd-strand``; the target workload is built as ``place/fgd`` builds it (the shapes of
the jobs pending and running, cut at 95 % popularity), the model supply from the snapshot's
nodes."""

from __future__ import annotations

from random import Random

from gpufleet.scheduler import openb_scores as osc
from gpufleet.scheduler import strand_scores as ss
from gpufleet.scheduler.framework import NO_NODE, Choice, chosen
from gpufleet.scheduler.plugins._scored_place import ScoredPlace, node_state, pod_of, workload_pods
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import Snapshot
from gpufleet.scheduler.strand_scores import StrandParams, StrandScorer, model_pressure
from gpufleet.scheduler.workspace import Domain, Workspace

NAME = "place/fgd-strand"


class Plugin(ScoredPlace):
    policy = "fgd-strand"

    def __init__(
        self,
        popularity_pct: int = 95,
        cpu_per_gpu: float = ss.DEFAULT_CPU_PER_GPU,
        strand_weight: float = ss.DEFAULT_STRAND_WEIGHT,
        typed_weight: float = ss.DEFAULT_TYPED_WEIGHT,
        scale: float = ss.DEFAULT_SCALE,
    ) -> None:
        super().__init__()
        if not 1 <= popularity_pct <= 100:
            raise ValueError("popularity_pct must be within 1..100")
        self.popularity_pct = popularity_pct
        self.params = StrandParams(cpu_per_gpu, strand_weight, typed_weight, scale)
        self.scorer: StrandScorer | None = None
        self._supply: dict[str, int] = {}

    def prepare(self, snap: Snapshot, ws: Workspace) -> None:
        pods = workload_pods(snap)
        self._supply = {}
        for v in snap.nodes:
            self._supply[v.gpu_model] = self._supply.get(v.gpu_model, 0) + len(v.gpu_free)
        self.scorer = self._scorer(pods) if pods else None

    def _scorer(self, pods: list[osc.PodRequest]) -> StrandScorer:
        wl = osc.target_workload(pods, self.popularity_pct)
        return StrandScorer(wl, model_pressure(wl, self._supply), self.params)

    def choose(self, req: WorkerRequest, ws: Workspace, domain: Domain, rng: Random) -> Choice:
        feasible = list(ws.candidates(req, domain))
        if not feasible:
            return NO_NODE
        pod = pod_of(req)
        if self.scorer is None:
            self.scorer = self._scorer([pod])
        scorer = self.scorer
        exclusive = req.select is not None and req.select.exclusive
        best_key: tuple[int, bool, int] | None = None
        best: tuple[int, tuple[int, ...]] = (-1, ())
        memo: dict[tuple[int, tuple[int, ...], str], tuple[int, tuple[int, ...]]] = {}
        cpu, gfree, model = ws.cpu, ws.gfree, ws.model
        for i in feasible:  # best score; among equals a node holding the dataset; then the first
            state = (cpu[i], tuple(gfree[i]), model[i])
            hit = memo.get(state)
            if hit is None:
                hit = memo[state] = scorer.score(node_state(ws, i), pod)
            score, devices = hit
            if exclusive:
                devices = ws.devices_for(i, req) or ()
            rank = (score, bool(req.dataset) and req.dataset in ws.views[i].datasets, -i)
            if best_key is None or rank > best_key:
                best_key, best = rank, (i, devices)
        return chosen(*best)
