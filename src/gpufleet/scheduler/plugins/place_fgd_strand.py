"""FGD with stranding (gpufleet's own, ``scheduler/strand_scores.py``): FGD's fragmentation
gradient plus the GPU a node's CPU can no longer feed and, for pods that accept any GPU model,
the pressure of the pods that need that model. The same scorer runs ``gpufleet simulate fill
--placement fgd-strand``; the target workload is built as ``place/fgd`` builds it (the shapes of
the jobs pending and running, cut at 95 % popularity), the model supply from the snapshot's
nodes.

Speed: a node's score depends on its state alone, so a worker scores each distinct state once
(``scheduler/state_index.py``, kept in step with the workspace) and looks at nodes only in the
best-scoring states, lowest index first: the same choice as scoring every feasible node."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from random import Random

from gpufleet.scheduler import openb_scores as osc
from gpufleet.scheduler import strand_scores as ss
from gpufleet.scheduler.framework import NO_NODE, Choice, chosen
from gpufleet.scheduler.plugins._scored_place import ScoredPlace, node_state, pod_of, workload_pods
from gpufleet.scheduler.request import WorkerRequest
from gpufleet.scheduler.snapshot import Snapshot
from gpufleet.scheduler.state_index import StateIndex, StateKey, state_fits
from gpufleet.scheduler.strand_scores import StrandParams, StrandScorer, model_pressure
from gpufleet.scheduler.workspace import Domain, Workspace

NAME = "place/fgd-strand"

Scored = tuple[int, tuple[int, ...]]  # score and the devices it takes; -1: the state cannot


class Plugin(ScoredPlace):
    policy = "fgd-strand"

    def __init__(
        self,
        popularity_pct: int = 95,
        cpu_per_gpu: float = ss.DEFAULT_CPU_PER_GPU,
        strand_weight: float = ss.DEFAULT_STRAND_WEIGHT,
        typed_weight: float = ss.DEFAULT_TYPED_WEIGHT,
        scale: float = ss.DEFAULT_SCALE,
        lookahead: float = ss.DEFAULT_LOOKAHEAD,
    ) -> None:
        super().__init__()
        if not 1 <= popularity_pct <= 100:
            raise ValueError("popularity_pct must be within 1..100")
        self.popularity_pct = popularity_pct
        self.params = StrandParams(cpu_per_gpu, strand_weight, typed_weight, scale, lookahead)
        self.scorer: StrandScorer | None = None
        self._supply: dict[str, int] = {}
        self._indexes: weakref.WeakKeyDictionary[Workspace, StateIndex] = (
            weakref.WeakKeyDictionary()
        )
        # per request shape: the states scored so far, and the function that scores them
        self._memo: dict[object, tuple[dict[StateKey, Scored], Callable[[StateKey], int]]] = {}
        self._last: tuple[Workspace, StateIndex] | None = None  # the index asked for last
        self._replica_list: tuple[list[int], bool] | None = None  # _replicas's last answer

    def prepare(self, snap: Snapshot, ws: Workspace) -> None:
        pods = workload_pods(snap)
        self._supply = {}
        for v in snap.nodes:
            self._supply[v.gpu_model] = self._supply.get(v.gpu_model, 0) + len(v.gpu_free)
        self.scorer = self._scorer(pods) if pods else None
        self._forget()

    def _scorer(self, pods: list[osc.PodRequest]) -> StrandScorer:
        wl = osc.target_workload(pods, self.popularity_pct)
        return StrandScorer(wl, model_pressure(wl, self._supply), self.params)

    def _index(self, ws: Workspace) -> StateIndex:
        last = self._last
        idx = last[1] if last is not None and last[0] is ws else self._indexes.get(ws)
        if idx is not None and idx.fresh_for(ws):
            idx.sync(ws)
            return idx
        src = ws.copied_from
        parent = self._indexes.get(src[0]) if src is not None else None
        idx = parent.copied_for(ws) if parent is not None else None
        if idx is None:
            idx = StateIndex(ws)
        else:
            idx.sync(ws)
        self._indexes[ws] = idx
        self._last = (ws, idx)
        return idx

    def choose(self, req: WorkerRequest, ws: Workspace, domain: Domain, rng: Random) -> Choice:
        if self.scorer is None:
            self.scorer = self._scorer([pod_of(req)])
            self._forget()
        if req.gpus == 0 or domain.level == "node":
            return self._scan(req, ws, domain)
        idx = self._index(ws)
        shape = (req.cpu_milli, req.memory_mib, req.gpus, req.gpu_milli, req.models)
        hit = self._memo.get(shape)
        if hit is None:
            memo: dict[StateKey, Scored] = {}
            hit = self._memo[shape] = (memo, self._score_of(req, memo))
        memo, score_of = hit
        tiers = idx.tiers(shape, memo, score_of)
        if not tiers:
            return NO_NODE
        # a node offering replicas takes only some workers (ws.takes): not every node of a state
        plain = not ws.fence and req.select is None and not req.dataset and not self._replicas(ws)
        for score in (max(tiers),) if len(tiers) == 1 else sorted(tiers, reverse=True):
            keys = tiers[score]
            if plain and domain.level == "any":
                # no fence, filter or dataset: every node of a state that fits takes the worker
                low = idx.low
                i = low(next(iter(keys))) if len(keys) == 1 else min(map(low, keys))
            else:
                sets = [b for key in keys for b in idx.in_domain(key, ws, domain)]
                i = self._first(req, ws, sets, plain)
            if i >= 0:
                if req.select is not None and req.select.exclusive:
                    return chosen(i, ws.devices_for(i, req) or ())
                key = idx.key_of[i]
                assert key is not None
                return chosen(i, memo[key][1])
        return NO_NODE

    def _replicas(self, ws: Workspace) -> bool:
        """Whether any node of ``ws`` offers its GPUs as replicas (model/replicas.py): its
        state says nothing of it. Kept per replica list, which copies of a workspace share."""
        last = self._replica_list
        if last is None or last[0] is not ws.replicas:
            last = self._replica_list = (ws.replicas, any(ws.replicas))
        return last[1]

    def _forget(self) -> None:
        """Drop what was scored with an earlier scorer."""
        self._memo = {}
        self._indexes = weakref.WeakKeyDictionary()
        self._last = None

    def _score_of(
        self, req: WorkerRequest, memo: dict[StateKey, Scored]
    ) -> Callable[[StateKey], int]:
        """A state's score for a worker of ``req`` (-1 where it does not fit), memoized."""
        scorer = self.scorer
        assert scorer is not None
        pod = pod_of(req)
        cpu, mem, gpus, milli, models = (
            req.cpu_milli,
            req.memory_mib,
            req.gpus,
            req.gpu_milli,
            req.models,
        )

        def score_of(key: StateKey) -> int:
            hit = memo.get(key)
            if hit is None:
                hit = (-1, ())
                if state_fits(key, cpu, mem, gpus, milli, models):
                    hit = scorer.score(osc.NodeState(key[0], key[1], key[2], key[3]), pod)
                memo[key] = hit
            return hit[0]

        return score_of

    @staticmethod
    def _first(req: WorkerRequest, ws: Workspace, sets: list[dict[int, None]], plain: bool) -> int:
        """The node of ``sets`` a worker goes to: the lowest index that takes it, or, when
        ``req`` names a dataset, the lowest that takes it and holds the dataset if one does
        (-1: none takes it)."""
        if not sets:
            return -1
        if not req.dataset:
            i = min(sets[0]) if len(sets) == 1 else min(map(min, sets))
            if plain or ws.takes(i, req):
                return i
        first = -1
        for i in sorted(i for b in sets for i in b):
            if not ws.takes(i, req):
                continue
            if not req.dataset or req.dataset in ws.views[i].datasets:
                return i
            if first < 0:
                first = i
        return first

    def _scan(self, req: WorkerRequest, ws: Workspace, domain: Domain) -> Choice:
        """Score every feasible node (CPU-only workers, a one-node domain)."""
        feasible = list(ws.candidates(req, domain))
        if not feasible:
            return NO_NODE
        pod = pod_of(req)
        scorer = self.scorer
        assert scorer is not None
        exclusive = req.select is not None and req.select.exclusive
        best_key: tuple[int, bool, int] | None = None
        best: tuple[int, tuple[int, ...]] = (-1, ())
        for i in feasible:  # best score; among equals a node holding the dataset; then the first
            score, devices = scorer.score(node_state(ws, i), pod)
            if exclusive:
                devices = ws.devices_for(i, req) or ()
            rank = (score, bool(req.dataset) and req.dataset in ws.views[i].datasets, -i)
            if best_key is None or rank > best_key:
                best_key, best = rank, (i, devices)
        return chosen(*best)
