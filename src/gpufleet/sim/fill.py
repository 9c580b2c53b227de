"""The FGD paper's fill experiment: GPU allocation ratio vs. arrived workload (openb traces).

One run = (pods, nodes, policy, seed, tune ratio), as ``shared/reference/FGD_PROTOCOL.md`` §2-§7
describes: the pods are shuffled, tuned up (or down) to ``tune`` x the cluster's GPU capacity,
and submitted one at a time to an empty cluster; nothing departs, a pod that fits nowhere fails
and is never retried. After every pod the arrived demand, the allocated GPU milli and the
cluster's fragmentation are recorded, then discretised into columns x = 0..130 (percent of GPU
capacity arrived) the way the paper's merge scripts do.

Only the statistics are meant to match the paper (mean ± sd over seeds 42-51): the random
streams are Python's ``random.Random(seed)``, not Go's ``math/rand``.

Speed: a pod's score on a node depends only on the node's state and the pod's shape, so the
engine keeps, per pod shape, an array of scores over all nodes and recomputes only the nodes that
changed since that shape was last scored; feasibility is one vectorised mask per pod, and nodes
are indexed by their seeded rank so that the first best index is the tie-break winner.
"""

from __future__ import annotations

import csv
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.scheduler import openb_scores as sc
from gpufleet.scheduler.openb_scores import MILLI, NodeState, PodRequest, TargetWorkload
from gpufleet.scheduler.strand_scores import StrandScorer, model_pressure

POLICIES: tuple[str, ...] = (
    "random",
    "dotprod",
    "gpuclustering",
    "gpupacking",
    "bestfit",
    "fgd",
    "fgd-strand",
)
SC_POLICY: dict[str, str] = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "gpuclustering": "03-GpuClustering",
    "gpupacking": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
    "fgd-strand": "07-FGD-Strand",  # gpufleet's own (scheduler/strand_scores.py), not the paper's
}
DEFAULT_TUNE = 1.3
X_MAX = 130  # the last column of the published curves
SEEDS = tuple(range(42, 52))

Shape = tuple[int, int, int, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class FillResult:
    """One run's curves (column x → value) and counts."""

    workload: str
    policy: str
    seed: int
    tune: float
    total_gpus: int
    alloc: dict[int, float]  # allocated GPU milli, % of capacity (the published "allocation")
    frag_ratio: dict[int, float]  # fragmented GPU, % of the *idle* GPU (the published "frag")
    frag_capacity: dict[int, float]  # fragmented GPU, % of the cluster's capacity
    pods_submitted: int
    pods_placed: int
    pods_failed: int
    wall_s: float = field(compare=False)

    @property
    def sc_policy(self) -> str:
        return SC_POLICY[self.policy]


# ---------------------------------------------------------------------------------------------
# §2 workload generation


def tune_pods(
    pods: Sequence[PodRequest], capacity_milli: int, tune: float, rng: random.Random
) -> list[PodRequest]:
    """Tune the (already shuffled) list to ``tune`` x capacity of total GPU demand.

    Tune-up draws pods with replacement and appends them at the end, stopping at the first draw
    whose *per-GPU* milli would pass the target (that draw is dropped); tune-down removes random
    pods until the demand is at most the target.
    """
    target = tune * capacity_milli
    out = list(pods)
    total = sum(p.gpu_demand for p in out)
    if not out:
        return out
    if total < target:
        n = len(pods)
        while True:
            pick = pods[rng.randrange(n)]
            if total + pick.gpu_milli > target:
                break
            out.append(pick)
            total += pick.gpu_demand
    elif total > target:
        while total > target and out:
            total -= out.pop(rng.randrange(len(out))).gpu_demand
    return out


# ---------------------------------------------------------------------------------------------
# §3-§5 the cluster and its placement engine


class _Cluster:
    """The nodes, indexed by tie-break rank, with vectorised views for the feasibility mask."""

    def __init__(
        self, nodes: Sequence[NodeSpec], policy: str, wl: TargetWorkload, rng: random.Random
    ) -> None:
        self.policy = policy
        self.wl = wl
        self.rng = rng
        self.states = [
            NodeState.empty(n.cpu_milli, n.memory_mib, n.gpus, n.gpu_model) for n in nodes
        ]
        st = self.states
        self.cpu = np.array([s.cpu_left for s in st], dtype=np.int64)
        self.mem = np.array([s.mem_left for s in st], dtype=np.int64)
        self.maxg = np.array([max(s.gpus, default=0) for s in st], dtype=np.int64)
        self.nfull = np.array([len(s.gpus) for s in st], dtype=np.int64)
        self.models = [s.model for s in st]
        self._access: dict[tuple[str, ...], np.ndarray] = {}
        self.frag = [wl.node_frag(s) for s in st]
        self.frag_total = sum(self.frag)
        self.idle = sum(s.gpu_left for s in st)
        self.changed: list[int] = []  # the node of every bind, in order
        self._scores: dict[Shape, tuple[np.ndarray, list[int]]] = {}
        self._fgd_memo: dict[tuple[int, tuple[int, ...], str, Shape], int] = {}
        supply: dict[str, int] = {}
        for s in st:
            supply[s.model] = supply.get(s.model, 0) + len(s.gpus)
        self.strand = StrandScorer(wl, model_pressure(wl, supply))

    def access(self, models: tuple[str, ...]) -> np.ndarray:
        mask = self._access.get(models)
        if mask is None:
            mask = np.array(
                [bool(s.gpus) and sc.model_allowed(models, s.model) for s in self.states],
                dtype=bool,
            )
            self._access[models] = mask
        return mask

    def feasible_mask(self, pod: PodRequest) -> np.ndarray:
        mask = (self.cpu >= pod.cpu_milli) & (self.mem >= pod.memory_mib)
        if pod.num_gpu:
            mask &= self.access(pod.gpu_models)
            if pod.num_gpu == 1:
                mask &= self.maxg >= pod.gpu_milli
            else:
                mask &= self.nfull >= pod.num_gpu
        return mask

    # -- scores

    def _score(self, i: int, pod: PodRequest) -> int:
        """Node i's (raw) score for ``pod``; -1 where the node cannot take it (memory aside)."""
        s = self.states[i]
        if s.cpu_left < pod.cpu_milli:
            return -1
        if pod.num_gpu:
            if pod.num_gpu == 1:
                if self.maxg[i] < pod.gpu_milli:
                    return -1
            elif self.nfull[i] < pod.num_gpu:
                return -1
            if not self._access_ok(i, pod):
                return -1
        policy = self.policy
        if policy in ("fgd", "fgd-strand"):
            key = (s.cpu_left, s.gpus, s.model, pod.shape)
            v = self._fgd_memo.get(key)
            if v is None:
                v = self._fgd(s, pod)[0]
                self._fgd_memo[key] = v
            return v
        return sc.node_score(policy, s, pod, None)

    def _fgd(self, s: NodeState, pod: PodRequest) -> tuple[int, tuple[int, ...]]:
        if self.policy == "fgd":
            return sc.fgd_score(self.wl, s, pod)
        return self.strand.score(s, pod)

    def _access_ok(self, i: int, pod: PodRequest) -> bool:
        return bool(self.access(pod.gpu_models)[i])

    def scores(self, pod: PodRequest) -> np.ndarray:
        """Raw scores of every node for ``pod``'s shape, brought up to date."""
        shape = pod.shape
        entry = self._scores.get(shape)
        if entry is None:
            arr = np.fromiter(
                (self._score(i, pod) for i in range(len(self.states))),
                dtype=np.int64,
                count=len(self.states),
            )
            self._scores[shape] = (arr, [len(self.changed)])
            return arr
        arr, pos = entry
        if pos[0] < len(self.changed):
            for i in set(self.changed[pos[0] :]):
                arr[i] = self._score(i, pod)
            pos[0] = len(self.changed)
        return arr

    # -- one pod

    def place(self, pod: PodRequest) -> bool:
        cand = np.flatnonzero(self.feasible_mask(pod))
        if cand.size == 0:
            return False
        if cand.size == 1:
            best = int(cand[0])
        elif self.policy == "random":
            best = int(cand[self.rng.randrange(cand.size)])
        else:
            raw = self.scores(pod)[cand]
            if self.policy == "bestfit":
                lo, hi = int(raw.min()), int(raw.max())
                raw = (raw - lo) * sc.MAX_SCORE // (hi - lo) if hi > lo else np.zeros_like(raw)
            best = int(cand[int(np.argmax(raw))])  # first max = smallest rank
        self._bind(best, pod)
        return True

    def _bind(self, i: int, pod: PodRequest) -> None:
        old = self.states[i]
        if self.policy == "fgd-strand":
            devices = self.strand.score(old, pod)[1] if pod.num_gpu else ()
        else:
            devices = sc.choose_gpus(self.policy, old, pod, self.wl, self.rng)
        new = sc.bind(old, pod, devices)
        self.states[i] = new
        self.cpu[i] = new.cpu_left
        self.mem[i] = new.mem_left
        if devices:
            self.maxg[i] = max(new.gpus)
            self.nfull[i] = new.full_gpus
        f = self.wl.node_frag(new)
        self.frag_total += f - self.frag[i]
        self.frag[i] = f
        self.idle -= pod.gpu_demand
        self.changed.append(i)


# ---------------------------------------------------------------------------------------------
# §7 metrics


def discretize(xs: Sequence[int], values: Sequence[float], x_max: int = X_MAX) -> dict[int, float]:
    """Mean of ``values`` per column x = 0..x_max over the events with that x; a column with no
    event takes the events with x-1 <= x_k <= x+1; a column with none of those is left out."""
    groups: dict[int, list[float]] = {}
    for x, v in zip(xs, values, strict=True):
        groups.setdefault(x, []).append(v)
    out: dict[int, float] = {}
    for x in range(x_max + 1):
        vals = groups.get(x)
        if not vals:
            vals = groups.get(x - 1, []) + groups.get(x, []) + groups.get(x + 1, [])
        if vals:
            out[x] = sum(vals) / len(vals)
    return out


def run_fill(
    pods: Sequence[PodRequest],
    nodes: Sequence[NodeSpec] | ClusterSpec,
    policy: str,
    seed: int,
    tune: float = DEFAULT_TUNE,
    *,
    workload: str = "",
    target: TargetWorkload | None = None,
) -> FillResult:
    """One run of the fill experiment. ``target`` defaults to the target workload of ``pods``."""
    start = time.perf_counter()
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    node_list = list(nodes.nodes if isinstance(nodes, ClusterSpec) else nodes)
    if not node_list:
        raise ValueError("the cluster has no nodes")
    total_gpus = sum(n.gpus for n in node_list)
    if total_gpus == 0:
        raise ValueError("the cluster has no GPUs")
    wl = target if target is not None else sc.target_workload(pods)

    rng = random.Random(seed)
    order = sorted(pods, key=lambda p: p.name)
    rng.shuffle(order)
    submitted = tune_pods(order, total_gpus * MILLI, tune, rng)
    ranked = sorted(node_list, key=lambda n: n.name)
    rng.shuffle(ranked)  # position = tie-break rank

    cluster = _Cluster(ranked, policy, wl, rng)
    capacity = total_gpus * MILLI
    scale = 10 * total_gpus  # milli → % of capacity
    xs: list[int] = []
    alloc: list[float] = []
    ratio: list[float] = []
    frag: list[float] = []
    arrived = 0
    placed = 0
    for pod in submitted:
        if cluster.place(pod):
            placed += 1
        arrived += pod.gpu_demand
        xs.append(round(arrived / scale))
        alloc.append(round((capacity - cluster.idle) / scale, 2))
        frag.append(cluster.frag_total)
        ratio.append(100 * cluster.frag_total / cluster.idle if cluster.idle else 0.0)

    alloc_curve = {x: round(v, 2) for x, v in discretize(xs, alloc).items()}
    frag_cap = {x: round(100 * v / capacity, 2) for x, v in discretize(xs, frag).items()}
    return FillResult(
        workload=workload,
        policy=policy,
        seed=seed,
        tune=tune,
        total_gpus=total_gpus,
        alloc=alloc_curve,
        frag_ratio=discretize(xs, ratio),
        frag_capacity=frag_cap,
        pods_submitted=len(submitted),
        pods_placed=placed,
        pods_failed=len(submitted) - placed,
        wall_s=time.perf_counter() - start,
    )


# ---------------------------------------------------------------------------------------------
# the published CSV layout


def _cells(curve: dict[int, float], x_max: int) -> list[str]:
    return [repr(curve[x]) if x in curve else "" for x in range(x_max + 1)]


def csv_rows(results: Iterable[FillResult], kind: str, x_max: int = X_MAX) -> list[list[str]]:
    """Rows (header first) in the layout of ``fgd_allocation_ratio.csv`` (``kind="alloc"``) or
    ``fgd_fragmentation_ratio.csv`` (``kind="frag"``, which has no total_gpus column)."""
    if kind not in ("alloc", "frag"):
        raise ValueError(f"kind must be 'alloc' or 'frag', got {kind!r}")
    head = ["workload", "sc_policy", "tune", "seed"] + (["total_gpus"] if kind == "alloc" else [])
    rows = [head + [str(x) for x in range(x_max + 1)]]
    for r in results:
        row = [r.workload, r.sc_policy, repr(r.tune), str(r.seed)]
        if kind == "alloc":
            rows.append([*row, str(r.total_gpus), *_cells(r.alloc, x_max)])
        else:
            rows.append(row + _cells(r.frag_ratio, x_max))
    return rows


def write_csv(results: Iterable[FillResult], path: str | Path, kind: str) -> None:
    """Write ``csv_rows(results, kind)`` to ``path``."""
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(csv_rows(results, kind))
