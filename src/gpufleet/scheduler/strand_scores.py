"""FGD with stranding: gpufleet's own fractional placement, scored like FGD (ATC'23) but with two
costs FGD does not see.

FGD places where a node's fragmentation F_n (``openb_scores``, FGD_PROTOCOL.md §6) grows least.
F_n asks, class by class of the target workload, whether *one* pod of that class still fits; it
never asks whether the node's CPU can feed all of its idle GPU. On openb the G2 nodes (70 % of
the GPUs) have 12 cores per GPU while the GPU pods ask about 11 and the CPU-only pods take more:
FGD lets CPU-heavy pods and CPU-only pods drain G2 nodes' CPU and the GPUs left there starve.
This score adds to F_n

* **stranding**: ``strand_weight * max(0, gL - cpu_left / cpu_per_gpu)``, the GPU milli of the
  node that the CPU left cannot feed at ``cpu_per_gpu`` milli-CPU per GPU milli; and
* **look-ahead waste**: ``lookahead * Σ W(g)`` over the node's partly used devices, where W(g)
  is the GPU milli a device with g free is expected to keep once the workload's fractional
  classes, drawn by share among those that still fit, no longer fit (W(g) = g where none fits;
  classes too scarce to fill the slivers of the most common one are not drawn: ``filler_sizes``).
  FGD counts a sliver once, against the next pod; W looks further: a 190-milli sliver that a
  160-milli pod may still fill costs less than a 60-milli one nothing fills; and
* **typed pressure** (only for a GPU pod that accepts any model): ``typed_weight * pressure(m) *
  gpu_demand``, where pressure(m) is the share of the workload's GPU demand that can run only on
  a set of models including m, over m's share of the cluster's GPUs. It keeps pods that could go
  anywhere off the models that pods with a ``gpu_spec`` need (0 when no class has a spec).

The node score is ``int(100 * sigmoid(-(delta) / scale))`` as in FGD, with a finer ``scale`` than
FGD's 1000; ties go to the earlier node in the caller's order, as FGD's do. A fractional pod
takes the first device with the best integer score; whole GPUs the lowest-index free devices.

The defaults were tuned on openb ``default`` (seeds 42-44; the look-ahead's weight on seeds
42-51) and checked on the other pod lists, where the same weight is best or tied best: see
BENCHMARKS.md. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.scheduler.openb_scores import (
    MAX_SCORE,
    MILLI,
    Gpus,
    NodeState,
    PodRequest,
    TargetWorkload,
    place_scored,
    sigmoid,
)

WASTE_STEP = 10  # GPU milli: the look-ahead's grid
DEFAULT_CPU_PER_GPU = 12.0  # milli-CPU per GPU milli: 12 cores per whole GPU
DEFAULT_STRAND_WEIGHT = 2.0
DEFAULT_TYPED_WEIGHT = 1.0
DEFAULT_SCALE = 600.0  # GPU milli per unit of the sigmoid (FGD: 1000)
# weight of the look-ahead waste (openb default, 10 seeds: none 95.91, 0.75 95.96; with the
# scarce fillers left out, 0.75 / 1.0 / 1.25 / 1.5: 96.00 / 96.03 / 96.08 / 96.08)
DEFAULT_LOOKAHEAD = 1.25


@dataclass(frozen=True, slots=True)
class StrandParams:
    cpu_per_gpu: float = DEFAULT_CPU_PER_GPU
    strand_weight: float = DEFAULT_STRAND_WEIGHT
    typed_weight: float = DEFAULT_TYPED_WEIGHT
    scale: float = DEFAULT_SCALE
    lookahead: float = DEFAULT_LOOKAHEAD

    def __post_init__(self) -> None:
        if not self.cpu_per_gpu > 0 or not self.scale > 0:
            raise ValueError("cpu_per_gpu and scale must be positive")
        if self.strand_weight < 0 or self.typed_weight < 0 or self.lookahead < 0:
            raise ValueError("strand_weight, typed_weight and lookahead must be at least 0")


def model_pressure(wl: TargetWorkload, supply: Mapping[str, int]) -> dict[str, float]:
    """Per GPU model: the share of the workload's GPU demand that only some models can run and
    that falls on this one (split in proportion to supply), over this model's share of the
    cluster's GPUs. ``supply``: GPU milli (or devices) per model."""
    total_supply = sum(supply.values())
    demand = sum(c.p * c.gpu_milli * c.num_gpu for c in wl.classes)
    out = dict.fromkeys(supply, 0.0)
    if total_supply <= 0 or demand <= 0:
        return out
    typed: dict[str, float] = {}
    for c in wl.classes:
        if not c.num_gpu or not c.gpu_models:
            continue
        models = [m for m in dict.fromkeys(c.gpu_models) if supply.get(m, 0) > 0]
        reach = sum(supply[m] for m in models)
        for m in models:
            typed[m] = typed.get(m, 0.0) + c.p * c.gpu_milli * c.num_gpu * supply[m] / reach
    for m, s in supply.items():
        if s > 0:
            out[m] = (typed.get(m, 0.0) / demand) / (s / total_supply)
    return out


def filler_sizes(wl: TargetWorkload) -> dict[int, float]:
    """The fractional sizes (GPU milli → share) the look-ahead draws from. The most common
    fractional class leaves a sliver of ``1000 - m`` on each device it opens; where the pods small
    enough to go into that sliver are fewer than the pods that leave it, they are left out: most
    such slivers stay empty whatever fills a few, so a device's look-ahead should not count on
    them (openb ``default``: 810-milli pods, 13 % of the pods, leave 190-milli slivers that the
    1.2 % of 110- and 160-milli pods cannot fill; W(190) is then 190, not ~30)."""
    sizes: dict[int, float] = {}
    for c in wl.classes:
        if c.num_gpu == 1 and 0 < c.gpu_milli < MILLI:
            sizes[c.gpu_milli] = sizes.get(c.gpu_milli, 0.0) + c.p
    if sizes:
        top = max(sizes, key=lambda m: (sizes[m], m))
        sliver = MILLI - top
        if sum(q for m, q in sizes.items() if m <= sliver) < sizes[top]:
            sizes = {m: q for m, q in sizes.items() if m > sliver}
    return sizes


@dataclass(eq=False, slots=True)
class StrandScorer:
    """Scores (node, pod) for ``fgd-strand``; memoizes the node values it computes."""

    wl: TargetWorkload
    pressure: Mapping[str, float]
    params: StrandParams = StrandParams()
    _value: dict[tuple[int, Gpus, str], float] = field(default_factory=dict, repr=False)
    _waste: list[float] = field(default_factory=list, repr=False)  # W(g), per 10 milli
    _scores: dict[tuple[int, Gpus, str, object], tuple[int, tuple[int, ...]]] = field(
        default_factory=dict, repr=False
    )

    def value(self, cpu_left: int, gpus: Gpus, model: str) -> float:
        """F_n plus the stranded GPU milli, weighted (GPU milli)."""
        key = (cpu_left, gpus, model)
        v = self._value.get(key)
        if v is None:
            p = self.params
            stranded = max(0.0, sum(gpus) - cpu_left / p.cpu_per_gpu)
            v = self.wl.frag(cpu_left, gpus, model) + p.strand_weight * stranded
            if p.lookahead:
                w = self._waste or self._waste_table()
                v += p.lookahead * sum(w[g // WASTE_STEP] for g in gpus if 0 < g < MILLI)
            self._value[key] = v
        return v

    def _waste_table(self) -> list[float]:
        """W(g) for g = 0, 10, ..., 1000 GPU milli (``lookahead``); a size between steps counts
        as the step below it."""
        sizes = filler_sizes(self.wl)
        w = [0.0] * (MILLI // WASTE_STEP + 1)
        for k in range(len(w)):
            g = k * WASTE_STEP
            fit = [(m, q) for m, q in sizes.items() if m <= g]
            tot = sum(q for _, q in fit)
            w[k] = sum(q * w[(g - m) // WASTE_STEP] for m, q in fit) / tot if tot else float(g)
        self._waste = w
        return w

    def _score(self, delta: float) -> int:
        return int(sigmoid(-delta / self.params.scale) * MAX_SCORE)

    def score(self, node: NodeState, pod: PodRequest) -> tuple[int, tuple[int, ...]]:
        """The node's integer score for ``pod`` (known feasible) and the devices it takes."""
        key = (node.cpu_left, node.gpus, node.model, pod.shape)
        hit = self._scores.get(key)
        if hit is None:
            hit = self._scores[key] = self._score_of(node, pod)
        return hit

    def _score_of(self, node: NodeState, pod: PodRequest) -> tuple[int, tuple[int, ...]]:
        before = self.value(node.cpu_left, node.gpus, node.model)
        penalty = 0.0
        if pod.num_gpu and not pod.gpu_models:
            penalty = self.params.typed_weight * self.pressure.get(node.model, 0.0)
            penalty *= pod.gpu_demand

        def after(cpu: int, gpus: Gpus) -> int:
            return self._score(self.value(cpu, gpus, node.model) - before + penalty)

        return place_scored(node.cpu_left - pod.cpu_milli, node.gpus, pod, after)
