"""Pure scoring rules of the FGD paper's simulator (ATC'23), for the openb experiment and plugins.

Everything here is a pure function of a node's remaining resources and a pod's request; the
rules, integer truncations and tie rules follow ``shared/reference/FGD_PROTOCOL.md`` (§3 the
feasibility test and the GPU choice, §5 the per-policy scores, §6 the target workload and node
fragmentation). Node choice (the tie-break by a seeded node rank, BestFit's min-max over the
feasible nodes) is the caller's; :func:`normalize_minmax` is provided for it.

Units: CPU in milli-cores, memory in MiB, GPU in milli-GPU (1000 = one whole device).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

MILLI = 1000  # one whole GPU, in milli-GPU
MAX_SPEC_CPU = 128_000  # MaxSpecCpu: the normaliser of CPU in DotProd and BestFit
MAX_SPEC_GPU = 8_000  # MaxSpecGpu: the normaliser of GPU milli
MAX_SCORE = 100
SHARE_GPU_TAG = "share-gpu"  # affinity tag of a fractional pod; whole-GPU pods are "<n>-gpu"

Gpus = tuple[int, ...]  # free milli-GPU per device, in device order


@dataclass(frozen=True, slots=True)
class PodRequest:
    """One pod's request. A CPU-only pod has ``num_gpu == 0`` and ``gpu_milli == 0``."""

    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0  # per GPU, in (0, 1000]; a multi-GPU pod asks for whole GPUs (1000)
    gpu_models: tuple[str, ...] = ()  # allowed GPU models; empty = any
    name: str = ""

    @property
    def gpu_demand(self) -> int:
        """Total GPU milli asked for: ``num_gpu * gpu_milli``."""
        return self.num_gpu * self.gpu_milli

    @property
    def is_fractional(self) -> bool:
        """A GPU-sharing pod: one device, less than all of it."""
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def tag(self) -> str:
        """GpuClustering's affinity tag: "" (CPU-only), "share-gpu" or "<n>-gpu"."""
        if self.num_gpu == 0:
            return ""
        return SHARE_GPU_TAG if self.gpu_milli < MILLI else f"{self.num_gpu}-gpu"

    @property
    def shape(self) -> tuple[int, int, int, tuple[str, ...]]:
        """What a score depends on: (cpu, num_gpu, gpu_milli, models); memory only filters."""
        return (self.cpu_milli, self.num_gpu, self.gpu_milli, self.gpu_models)


@dataclass(frozen=True, slots=True)
class NodeState:
    """What is left on one node. ``tags``: the affinity tags of the GPU pods it hosts."""

    cpu_left: int
    mem_left: int
    gpus: Gpus
    model: str
    tags: frozenset[str] = frozenset()

    @property
    def gpu_left(self) -> int:
        return sum(self.gpus)

    @property
    def full_gpus(self) -> int:
        """Devices that are fully free."""
        return sum(1 for g in self.gpus if g >= MILLI)

    @staticmethod
    def empty(cpu_milli: int, memory_mib: int, gpus: int, model: str) -> NodeState:
        return NodeState(cpu_milli, memory_mib, (MILLI,) * gpus, model)


# ---------------------------------------------------------------------------------------------
# §3 feasibility, GPU choice, binding


def model_allowed(models: tuple[str, ...], node_model: str) -> bool:
    """The GPU-type check: an empty list fits any model; else the node's model is one listed."""
    if not models:
        return True
    return bool(node_model) and node_model in models


def feasible(node: NodeState, pod: PodRequest) -> bool:
    """Can ``pod`` be placed on ``node`` (CPU, memory, GPU type, free devices)?"""
    if node.cpu_left < pod.cpu_milli or node.mem_left < pod.memory_mib:
        return False
    if pod.num_gpu == 0:
        return True
    if not node.gpus or not model_allowed(pod.gpu_models, node.model):
        return False
    if pod.num_gpu == 1:
        milli = pod.gpu_milli
        return any(g >= milli for g in node.gpus)
    return sum(1 for g in node.gpus if g >= MILLI) >= pod.num_gpu


def whole_gpus(gpus: Gpus, count: int) -> tuple[int, ...]:
    """The ``count`` lowest-index fully-free devices (all whole-GPU pods take these)."""
    out = tuple(i for i, g in enumerate(gpus) if g >= MILLI)[:count]
    if len(out) < count:
        raise ValueError(f"{count} fully-free GPUs asked for, {len(out)} free in {gpus}")
    return out


def bestfit_gpu(gpus: Gpus, milli: int) -> int:
    """The device with the smallest free milli that still fits ``milli``; lowest index on ties."""
    best = -1
    for i, g in enumerate(gpus):
        if g >= milli and (best < 0 or g < gpus[best]):
            best = i
    if best < 0:
        raise ValueError(f"no GPU with {milli} milli free in {gpus}")
    return best


def random_gpu(gpus: Gpus, milli: int, rng: random.Random) -> int:
    """A device drawn uniformly among those with at least ``milli`` free."""
    fits = [i for i, g in enumerate(gpus) if g >= milli]
    if not fits:
        raise ValueError(f"no GPU with {milli} milli free in {gpus}")
    return fits[rng.randrange(len(fits))]


def bind(node: NodeState, pod: PodRequest, devices: Sequence[int]) -> NodeState:
    """The node after placing ``pod`` on ``devices`` (each loses the pod's per-GPU milli)."""
    gpus = list(node.gpus)
    for i in devices:
        if gpus[i] < pod.gpu_milli:
            raise ValueError(f"GPU {i} has {gpus[i]} milli free, the pod needs {pod.gpu_milli}")
        gpus[i] -= pod.gpu_milli
    tags = node.tags | {pod.tag} if pod.num_gpu else node.tags
    return NodeState(
        node.cpu_left - pod.cpu_milli, node.mem_left - pod.memory_mib, tuple(gpus), node.model, tags
    )


# ---------------------------------------------------------------------------------------------
# §6 target workload and node fragmentation


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    """One class of the target workload: (cpu, per-GPU milli, count, models) and its share p."""

    cpu_milli: int
    gpu_milli: int  # 0 for CPU-only
    num_gpu: int
    gpu_models: tuple[str, ...]
    count: int
    p: float


def class_key(pod: PodRequest) -> tuple[int, int, int, str]:
    """The grouping tuple (cpu_milli, per-GPU milli, num_gpu, gpu_spec) of §6."""
    if pod.num_gpu == 0:
        return (pod.cpu_milli, 0, 0, "")
    return (pod.cpu_milli, pod.gpu_milli, pod.num_gpu, "|".join(pod.gpu_models))


def frag_amount(cls: WorkloadClass, cpu_left: int, gpus: Gpus, model: str) -> int:
    """f_n(m): the GPU milli of the node that class ``m`` cannot use (§6)."""
    if cls.num_gpu == 0 or not model_allowed(cls.gpu_models, model):
        return sum(gpus)  # XL/XR: all idle GPU counts for a CPU pod; NoAccess
    milli = cls.gpu_milli
    fits = 0
    sliver = 0
    for g in gpus:
        if g >= milli:
            fits += 1
        else:
            sliver += g
    if fits >= cls.num_gpu and cpu_left >= cls.cpu_milli:
        return sliver  # Q3: only the slivers too small for m are fragments
    return sum(gpus)  # Q1, Q2, Q4


@dataclass(eq=False, slots=True)
class TargetWorkload:
    """The typical pods M with their shares p_m; memoizes node fragmentation F_n."""

    classes: tuple[WorkloadClass, ...]
    total_classes: int = 0  # how many classes the trace had before the cut
    covered: float = 1.0  # share of the trace's pods in the kept classes
    _cache: dict[tuple[int, Gpus, str], float] = field(default_factory=dict, repr=False)

    def frag(self, cpu_left: int, gpus: Gpus, model: str) -> float:
        """F_n = Σ_m p_m f_n(m), in GPU milli. A pure function of (cpu_left, multiset, model)."""
        key = (cpu_left, gpus, model)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        ordered = tuple(sorted(gpus))
        hit = self._cache.get((cpu_left, ordered, model))
        if hit is None:
            hit = self._frag(cpu_left, ordered, model)
            self._cache[(cpu_left, ordered, model)] = hit
        self._cache[key] = hit
        return hit

    def node_frag(self, node: NodeState) -> float:
        return self.frag(node.cpu_left, node.gpus, node.model)

    def _frag(self, cpu_left: int, gpus: Gpus, model: str) -> float:
        gl = sum(gpus)
        total = 0.0
        for cls in self.classes:
            if cls.num_gpu == 0 or (cls.gpu_models and model not in cls.gpu_models):
                total += cls.p * gl
                continue
            milli = cls.gpu_milli
            fits = 0
            sliver = 0
            for g in gpus:
                if g >= milli:
                    fits += 1
                else:
                    sliver += g
            if fits >= cls.num_gpu and cpu_left >= cls.cpu_milli:
                total += cls.p * sliver
            else:
                total += cls.p * gl
        return total


def target_workload(pods: Iterable[PodRequest], threshold_pct: int = 95) -> TargetWorkload:
    """The target workload of §6: the most popular classes covering ``threshold_pct`` % of pods.

    Classes by (cpu, per-GPU milli, num_gpu, spec), counted over the *original* trace; sorted by
    count descending, ties by the tuple descending; taken until the cumulative count reaches the
    threshold (the class that crosses it is kept), then renormalised to sum to 1.
    """
    counts: dict[tuple[int, int, int, str], int] = {}
    for pod in pods:
        k = class_key(pod)
        counts[k] = counts.get(k, 0) + 1
    total = sum(counts.values())
    if total == 0:
        raise ValueError("the target workload needs at least one pod")
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    expected = threshold_pct * total / 100.0
    kept: list[tuple[tuple[int, int, int, str], int]] = []
    cum = 0
    for k, n in ranked:
        if cum >= expected:
            break
        kept.append((k, n))
        cum += n
    share = cum / total
    classes = tuple(
        WorkloadClass(cpu, milli, num, tuple(spec.split("|")) if spec else (), n, n / total / share)
        for (cpu, milli, num, spec), n in kept
    )
    return TargetWorkload(classes, len(counts), share)


# ---------------------------------------------------------------------------------------------
# §5 per-policy node scores (higher is better) and GPU choices


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def dotprod_score(node: NodeState, pod: PodRequest) -> int:
    """DotProd (Tetris): int(100 * (1 - (cL/Cmax·cR/Cmax + gL/Gmax·gR/Gmax)/2)), pre-placement."""
    dot = (node.cpu_left / MAX_SPEC_CPU) * (pod.cpu_milli / MAX_SPEC_CPU) + (
        node.gpu_left / MAX_SPEC_GPU
    ) * (pod.gpu_demand / MAX_SPEC_GPU)
    return int(MAX_SCORE * (1 - dot / 2))


def gpuclustering_score(node: NodeState, pod: PodRequest) -> int:
    """GpuClustering: b + 25·(8000 - gL)//8000, b from the tags the node already hosts."""
    tag = pod.tag
    if not tag:
        return 0
    fill = MAX_SCORE // 4 * (MAX_SPEC_GPU - node.gpu_left) // MAX_SPEC_GPU
    if tag in node.tags:
        return (75 if len(node.tags) == 1 else 50) + fill
    return (0 if node.tags else 25) + fill


def gpupacking_score(node: NodeState, pod: PodRequest) -> int:
    """GpuPacking: shared GPUs first, then free GPUs of used nodes, then idle nodes."""
    if pod.gpu_milli <= 0:
        return 0
    gpus = node.gpus
    full = sum(1 for g in gpus if g >= MILLI)
    if full == len(gpus):
        return max(MAX_SCORE // 3 - full, full)
    need = pod.num_gpu
    taken: list[int] = []
    for i in sorted(range(len(gpus)), key=gpus.__getitem__):  # stable, least free first
        if need == 0:
            break
        if gpus[i] >= pod.gpu_milli:
            taken.append(i)
            need -= 1
    if need:
        return 0  # not feasible; the filter keeps such nodes out
    k = sum(1 for i in taken if gpus[i] >= MILLI)
    if k:
        return max(MAX_SCORE // 2 - k, MAX_SCORE // 3)
    ratio = sum(gpus[i] * 100 // MILLI for i in taken)
    return max(MAX_SCORE - ratio // 10, MAX_SCORE // 2)


def bestfit_raw(node: NodeState, pod: PodRequest) -> int:
    """BestFit before normalisation: int(100·(1 - [0.5(cL-cR)/Cmax + 0.5(gL-gR)/Gmax]))."""
    score = (node.cpu_left - pod.cpu_milli) / MAX_SPEC_CPU * 0.5
    score += (node.gpu_left - pod.gpu_demand) / MAX_SPEC_GPU * 0.5
    return int((1.0 - score) * MAX_SCORE)


def normalize_minmax(raw: Sequence[int]) -> list[int]:
    """k8s NormalizeScore over the feasible nodes: (s - lo)·100 // (hi - lo); all 0 if hi = lo."""
    if not raw:
        return []
    lo, hi = min(raw), max(raw)
    if hi == lo:
        return [0] * len(raw)
    return [(s - lo) * MAX_SCORE // (hi - lo) for s in raw]


def fgd_score(wl: TargetWorkload, node: NodeState, pod: PodRequest) -> tuple[int, tuple[int, ...]]:
    """FGD: int(100·sigmoid((F_n - F_n')/1000)) and the devices the pod would take.

    A fractional pod tries every device that fits and keeps the first with the highest *integer*
    score; a whole-GPU pod takes the lowest-index free devices; a CPU-only pod takes none.
    """
    before = wl.frag(node.cpu_left, node.gpus, node.model)

    def after(cpu: int, gpus: Gpus) -> int:
        return int(sigmoid((before - wl.frag(cpu, gpus, node.model)) / 1000) * MAX_SCORE)

    return place_scored(node.cpu_left - pod.cpu_milli, node.gpus, pod, after)


def place_scored(
    cpu: int, gpus: Gpus, pod: PodRequest, score: Callable[[int, Gpus], int]
) -> tuple[int, tuple[int, ...]]:
    """The devices ``pod`` takes on a node with ``gpus`` free, and ``score`` of the node after
    (``cpu``: its milli-CPU left after the pod): FGD's device rule, shared by ``fgd_score`` and
    ``strand_scores``. A fractional pod tries every device that fits and keeps the first with the
    highest score (0 and none if no device fits); a whole-GPU pod takes the lowest-index free
    devices; a CPU-only pod takes none."""
    if pod.is_fractional:
        milli = pod.gpu_milli
        best, chosen = 0, -1
        for i, g in enumerate(gpus):
            if g >= milli:
                s = score(cpu, (*gpus[:i], g - milli, *gpus[i + 1 :]))
                if chosen < 0 or s > best:
                    best, chosen = s, i
        return best, ((chosen,) if chosen >= 0 else ())
    devices: tuple[int, ...] = ()
    if pod.num_gpu:
        devices = whole_gpus(gpus, pod.num_gpu)
        left = list(gpus)
        for i in devices:
            left[i] -= pod.gpu_milli
        gpus = tuple(left)
    return score(cpu, gpus), devices


SCORED_POLICIES = ("dotprod", "gpuclustering", "gpupacking", "bestfit", "fgd")


def node_score(policy: str, node: NodeState, pod: PodRequest, wl: TargetWorkload | None) -> int:
    """The node's score under ``policy`` (BestFit: the raw score, normalise over the feasible)."""
    if policy == "fgd":
        if wl is None:
            raise ValueError("fgd needs a target workload")
        return fgd_score(wl, node, pod)[0]
    if policy == "dotprod":
        return dotprod_score(node, pod)
    if policy == "bestfit":
        return bestfit_raw(node, pod)
    if policy == "gpupacking":
        return gpupacking_score(node, pod)
    if policy == "gpuclustering":
        return gpuclustering_score(node, pod)
    if policy == "random":
        return 0
    raise ValueError(f"unknown policy {policy!r}")


def choose_gpus(
    policy: str,
    node: NodeState,
    pod: PodRequest,
    wl: TargetWorkload | None = None,
    rng: random.Random | None = None,
) -> tuple[int, ...]:
    """The devices ``pod`` takes on ``node`` (already known feasible) under ``policy``."""
    if pod.num_gpu == 0:
        return ()
    if not pod.is_fractional:
        return whole_gpus(node.gpus, pod.num_gpu)
    if policy == "fgd":
        if wl is None:
            raise ValueError("fgd needs a target workload")
        return fgd_score(wl, node, pod)[1]
    if policy == "random":
        if rng is None:
            raise ValueError("random needs an rng")
        return (random_gpu(node.gpus, pod.gpu_milli, rng),)
    if policy in SCORED_POLICIES:
        return (bestfit_gpu(node.gpus, pod.gpu_milli),)
    raise ValueError(f"unknown policy {policy!r}")
