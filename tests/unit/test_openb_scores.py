"""The FGD protocol's formulas (FGD_PROTOCOL.md §3, §5, §6), each against a hand-worked example."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from gpufleet.scheduler.openb_scores import (
    NodeState,
    PodRequest,
    TargetWorkload,
    WorkloadClass,
    bestfit_gpu,
    bestfit_raw,
    bind,
    choose_gpus,
    dotprod_score,
    feasible,
    fgd_score,
    frag_amount,
    gpuclustering_score,
    gpupacking_score,
    normalize_minmax,
    random_gpu,
    target_workload,
    whole_gpus,
)

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "alibaba-openb"


def node(
    cpu: int,
    gpus: tuple[int, ...],
    model: str = "G2",
    mem: int = 100_000,
    tags: frozenset[str] = frozenset(),
) -> NodeState:
    return NodeState(cpu, mem, gpus, model, tags)


def frac(cpu: int, milli: int, models: tuple[str, ...] = ()) -> PodRequest:
    return PodRequest(cpu, 1024, 1, milli, models)


def whole(cpu: int, num: int) -> PodRequest:
    return PodRequest(cpu, 1024, num, 1000)


CPU_POD = PodRequest(4000, 1024)


# ----------------------------------------------------------------------------- §3 feasibility


def test_feasible_cpu_memory_and_gpu_rules() -> None:
    n = node(8000, (1000, 1000, 600, 0))
    assert feasible(n, frac(8000, 600))
    assert not feasible(n, frac(8001, 100))  # CPU
    assert not feasible(node(8000, (1000,), mem=1000), frac(1000, 100))  # memory
    assert feasible(n, whole(1000, 2))  # two fully free
    assert not feasible(n, whole(1000, 3))  # only two fully free
    assert not feasible(node(8000, (900, 900)), frac(1000, 901))
    assert feasible(n, CPU_POD)
    assert feasible(node(8000, ()), CPU_POD)
    assert not feasible(node(8000, (), model=""), frac(100, 100))  # no GPUs at all


def test_gpu_type_check() -> None:
    n = node(8000, (1000,), model="V100M16")
    assert feasible(n, frac(100, 500, ("V100M16", "V100M32")))
    assert not feasible(n, frac(100, 500, ("V100M32",)))
    assert not feasible(node(8000, (1000,), model=""), frac(100, 500, ("T4",)))


def test_gpu_choices() -> None:
    g = (1000, 300, 1000, 300, 700)
    assert whole_gpus(g, 2) == (0, 2)
    assert bestfit_gpu(g, 300) == 1  # tightest fit, lowest index among the two 300s
    assert bestfit_gpu(g, 400) == 4
    rng = random.Random(1)
    seen = {random_gpu(g, 700, rng) for _ in range(200)}
    assert seen == {0, 2, 4}
    with pytest.raises(ValueError):
        whole_gpus(g, 3)


def test_bind_subtracts_and_tags() -> None:
    n = node(8000, (1000, 1000, 600, 0))
    after = bind(n, frac(2000, 500), (2,))
    assert after.gpus == (1000, 1000, 100, 0)
    assert after.cpu_left == 6000 and after.mem_left == 100_000 - 1024
    assert after.tags == {"share-gpu"}
    assert bind(after, whole(1000, 2), (0, 1)).tags == {"share-gpu", "2-gpu"}
    assert bind(n, CPU_POD, ()).tags == frozenset()


# ----------------------------------------------------------------------------- §6 fragmentation


def cls(cpu: int, milli: int, num: int, p: float, models: tuple[str, ...] = ()) -> WorkloadClass:
    return WorkloadClass(cpu, milli, num, models, 1, p)


def test_frag_amount_cases() -> None:
    g = (1000, 1000, 600, 0)  # gL = 2600
    # Q3: two devices fit 700 milli and CPU suffices: only the 600 sliver (and the 0) count
    assert frag_amount(cls(4000, 700, 1, 1.0), 8000, g, "G2") == 600
    # Q3 for 500 milli: every non-zero device fits, so the fragment is 0
    assert frag_amount(cls(4000, 500, 1, 1.0), 8000, g, "G2") == 0
    # Q4 (lacks CPU) → all idle GPU
    assert frag_amount(cls(9000, 700, 1, 1.0), 8000, g, "G2") == 2600
    # Q2 (lacks GPU): three whole GPUs asked, two free
    assert frag_amount(cls(1000, 1000, 3, 1.0), 8000, g, "G2") == 2600
    # Q3 for two whole GPUs: 600 is a sliver
    assert frag_amount(cls(1000, 1000, 2, 1.0), 8000, g, "G2") == 600
    # CPU-only class: all idle GPU is fragment; NoAccess likewise
    assert frag_amount(cls(1000, 0, 0, 1.0), 8000, g, "G2") == 2600
    assert frag_amount(cls(1000, 500, 1, 1.0, ("T4",)), 8000, g, "G2") == 2600


def test_node_fragmentation_is_the_weighted_sum() -> None:
    wl = TargetWorkload((cls(1000, 0, 0, 0.2), cls(4000, 700, 1, 0.5), cls(9000, 200, 1, 0.3)))
    # 0.2·2600 + 0.5·600 + 0.3·2600 = 520 + 300 + 780
    assert wl.frag(8000, (1000, 1000, 600, 0), "G2") == pytest.approx(1600.0)
    # order of the devices does not matter, and the memo returns the same value
    assert wl.frag(8000, (0, 600, 1000, 1000), "G2") == pytest.approx(1600.0)


def test_target_workload_cut_and_renormalisation() -> None:
    pods = [frac(1000, 500)] * 6 + [CPU_POD] * 3 + [whole(2000, 2)]
    wl = target_workload(pods, threshold_pct=80)
    # 6 (60%) then 3 (90% ≥ 80%): the crossing class is kept, the rest dropped
    assert [(c.cpu_milli, c.gpu_milli, c.num_gpu, c.count) for c in wl.classes] == [
        (1000, 500, 1, 6),
        (4000, 0, 0, 3),
    ]
    assert [c.p for c in wl.classes] == pytest.approx([6 / 9, 3 / 9])
    assert wl.covered == pytest.approx(0.9)


def test_target_workload_ties_by_tuple_descending() -> None:
    wl = target_workload([frac(1000, 500), frac(2000, 500)], threshold_pct=50)
    assert [c.cpu_milli for c in wl.classes] == [2000]


@pytest.mark.skipif(not TRACES.exists(), reason=f"openb traces not found at {TRACES}")
def test_default_trace_target_workload_and_empty_cluster_fragmentation() -> None:
    from gpufleet.sim.openb import load_nodes, load_pods

    pods = load_pods(TRACES / "openb_pod_list_default.csv")
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    wl = target_workload(pods)
    assert (len(wl.classes), wl.total_classes) == (35, 91)
    assert wl.covered == pytest.approx(0.953, abs=5e-4)
    top = wl.classes[0]
    assert (top.cpu_milli, top.gpu_milli, top.num_gpu) == (3152, 810, 1)
    assert top.p == pytest.approx(0.135, abs=5e-4)
    assert sum(c.p for c in wl.classes if c.num_gpu == 0) == pytest.approx(0.136, abs=5e-4)
    frag = sum(wl.frag(n.cpu_milli, (1000,) * n.gpus, n.gpu_model) for n in nodes)
    idle = 1000 * sum(n.gpus for n in nodes)
    assert 100 * frag / idle == pytest.approx(13.94, abs=0.005)


# ----------------------------------------------------------------------------- §5 scores


def test_dotprod_score() -> None:
    n = node(64_000, (1000, 1000, 600, 0))  # cL/Cmax = 0.5, gL/Gmax = 0.325
    # pod 32000 cpu, 500 milli: (0.5·0.25 + 0.325·0.0625)/2 = 0.0726..., 100·(1-…) = 92.7 → 92
    assert dotprod_score(n, frac(32_000, 500)) == 92
    # CPU-only: (0.5·(4000/128000))/2 = 0.0078125 → 99.2 → 99
    assert dotprod_score(n, CPU_POD) == 99


def test_bestfit_raw_and_normalisation() -> None:
    n = node(64_000, (1000, 1000, 600, 0))
    # 0.5·(64000-32000)/128000 + 0.5·(2600-500)/8000 = 0.125 + 0.13125 → 74.375 → 74
    assert bestfit_raw(n, frac(32_000, 500)) == 74
    assert normalize_minmax([74, 50, 62]) == [100, 0, 50]
    assert normalize_minmax([10, 10]) == [0, 0]
    assert normalize_minmax([0, 1, 3]) == [0, 33, 100]
    assert normalize_minmax([]) == []


def test_gpupacking_score_cases() -> None:
    idle8 = node(96_000, (1000,) * 8)
    assert gpupacking_score(idle8, frac(1000, 500)) == 25  # max(33-8, 8)
    assert gpupacking_score(node(96_000, (1000, 1000)), frac(1000, 500)) == 31  # max(33-2, 2)
    used = node(96_000, (1000, 1000, 600, 0))
    assert gpupacking_score(used, frac(1000, 500)) == 94  # 100 - 600//100
    assert gpupacking_score(used, frac(1000, 700)) == 49  # one free GPU taken: max(50-1, 33)
    assert gpupacking_score(used, whole(1000, 2)) == 48  # max(50-2, 33)
    assert gpupacking_score(node(1, (450, 300, 1000)), frac(1000, 250)) == 97  # 300 fits tightest
    assert gpupacking_score(used, CPU_POD) == 0


def test_gpuclustering_score_cases() -> None:
    g = (1000, 1000, 600, 0)  # gL 2600: 25·5400//8000 = 16
    assert gpuclustering_score(node(1, g, tags=frozenset({"share-gpu"})), frac(1, 100)) == 91
    mixed = frozenset({"share-gpu", "2-gpu"})
    assert gpuclustering_score(node(1, g, tags=mixed), frac(1, 100)) == 66
    assert gpuclustering_score(node(1, (1000,) * 8), frac(1, 100)) == 25
    assert gpuclustering_score(node(1, g, tags=frozenset({"2-gpu"})), frac(1, 100)) == 16
    assert gpuclustering_score(node(1, g, tags=frozenset({"share-gpu"})), CPU_POD) == 0


def test_fgd_score_fractional_and_whole() -> None:
    # One class: 1 GPU of 700 milli, 1000 cpu. Node (1000, 1000, 600, 0) → F = 600.
    wl = TargetWorkload((cls(1000, 700, 1, 1.0),))
    n = node(8000, (1000, 1000, 600, 0))
    # 500 milli on GPU 0 → (500, 1000, 600, 0): F = 1100, Δ = -500 → int(100·σ(-0.5)) = 37
    # on GPU 1: the same, 37; on GPU 2 → (1000, 1000, 100, 0): F = 100, Δ = +500 → 62
    score, gpus = fgd_score(wl, n, frac(1000, 500))
    assert score == int(100 / (1 + math.exp(-0.5))) == 62
    assert gpus == (2,)
    # Ties in the integer score go to the first index.
    score, gpus = fgd_score(wl, node(8000, (1000, 1000)), frac(1000, 500))
    assert gpus == (0,)
    assert score == int(100 / (1 + math.exp(0.5))) == 37  # F 0 → 500
    # Whole GPU: lowest-index free devices; F 600 → (0, 0, 600, 0): F = 600 (no 700 fits → gL)
    score, gpus = fgd_score(wl, n, whole(1000, 2))
    assert gpus == (0, 1)
    assert score == 50
    # CPU-only taking the last CPU: F 600 → Q4 for every device: F = gL = 2600, Δ = -2000
    score, gpus = fgd_score(wl, node(1000, (1000, 1000, 600, 0)), PodRequest(1000, 1))
    assert gpus == ()
    assert score == int(100 / (1 + math.exp(2.0))) == 11


def test_choose_gpus_by_policy() -> None:
    wl = TargetWorkload((cls(1000, 700, 1, 1.0),))
    n = node(8000, (1000, 400, 600, 0))
    assert choose_gpus("bestfit", n, frac(1, 300)) == (1,)
    assert choose_gpus("dotprod", n, frac(1, 500)) == (2,)
    assert choose_gpus("fgd", n, frac(1, 300), wl) == (1,)
    assert choose_gpus("random", n, whole(1, 1), rng=random.Random(0)) == (0,)
    assert choose_gpus("gpupacking", n, CPU_POD) == ()
