"""``fgd-strand`` (scheduler/strand_scores.py): FGD plus the GPU a node's CPU can no longer feed
and the pressure of typed pods, on hand-made nodes; and the contract that ``simulate fill`` and
the live scheduler's ``place/fgd-strand`` choose the same node and device for the same pods."""

from __future__ import annotations

import math
import random

import pytest
from builders import cycle, job, node, start_of

from gpufleet.model.cluster import NodeSpec
from gpufleet.scheduler.openb_scores import (
    NodeState,
    PodRequest,
    TargetWorkload,
    WorkloadClass,
    fgd_score,
    target_workload,
)
from gpufleet.scheduler.strand_scores import StrandParams, StrandScorer, model_pressure
from gpufleet.sim.fill import _Cluster

GIB = 1024


def wl_of(*classes: tuple[int, int, int, tuple[str, ...], float]) -> TargetWorkload:
    return TargetWorkload(
        tuple(WorkloadClass(c, m, n, models, 1, p) for c, m, n, models, p in classes)
    )


# a workload of 1-GPU pods (4 cores, a whole GPU) and CPU-only pods (2 cores), half each
PLAIN = wl_of((4000, 1000, 1, (), 0.5), (2000, 0, 0, (), 0.5))


def best(scorer: StrandScorer, nodes: list[NodeState], pod: PodRequest) -> int:
    """The index FGD's rule picks: the highest score, the first of equals."""
    scores = [scorer.score(n, pod)[0] for n in nodes]
    return scores.index(max(scores))


def test_a_cpu_only_pod_goes_where_taking_cpu_strands_no_gpu() -> None:
    g2 = NodeState(96_000, 384 * GIB, (1000,) * 8, "G2")  # 12 cores per GPU: no CPU to spare
    t4 = NodeState(104_000, 512 * GIB, (1000,) * 2, "T4")  # 52 cores per GPU
    pod = PodRequest(8000, 8 * GIB)
    # FGD sees no fragmentation either way (every class still fits both) and takes the first
    assert fgd_score(PLAIN, g2, pod)[0] == fgd_score(PLAIN, t4, pod)[0]
    scorer = StrandScorer(PLAIN, {})
    assert best(scorer, [g2, t4], pod) == 1
    # 8 cores off the G2 node leave 88 for 8 GPUs at 12 per GPU: 666.7 GPU milli unfed, x2
    assert scorer.value(88_000, (1000,) * 8, "G2") == pytest.approx(0.5 * 8000 + 2 * 8000 / 12)
    # without the stranding weight the two are equal again
    flat = StrandScorer(PLAIN, {}, StrandParams(strand_weight=0.0))
    assert flat.score(g2, pod)[0] == flat.score(t4, pod)[0]


def test_a_cpu_heavy_gpu_pod_leaves_the_cpu_poor_node() -> None:
    g2 = NodeState(96_000, 384 * GIB, (1000,) * 8, "G2")
    rich = NodeState(96_000, 384 * GIB, (1000,) * 4, "V100M32")  # 24 cores per GPU
    pod = PodRequest(24_000, 8 * GIB, 1, 1000)
    scorer = StrandScorer(PLAIN, {})
    assert best(scorer, [g2, rich], pod) == 1
    light = PodRequest(4000, 8 * GIB, 1, 1000)  # asks less than 12 cores: strands nothing
    assert scorer.score(g2, light)[0] >= scorer.score(rich, light)[0]


def test_with_no_weights_and_fgds_scale_it_is_fgd() -> None:
    wl = wl_of((4000, 500, 1, (), 0.4), (8000, 1000, 1, (), 0.3), (1000, 0, 0, (), 0.3))
    params = StrandParams(strand_weight=0.0, typed_weight=0.0, scale=1000, lookahead=0.0)
    scorer = StrandScorer(wl, {}, params)
    rng = random.Random(7)
    for _ in range(300):
        gpus = tuple(rng.choice((0, 200, 500, 700, 1000)) for _ in range(rng.choice((2, 4, 8))))
        n = NodeState(rng.randrange(0, 64_000, 1000), 10**6, gpus, "G2")
        milli = rng.choice((100, 300, 500, 1000))
        pod = PodRequest(rng.randrange(0, 8000, 500), 1, 1, milli)
        if n.cpu_left < pod.cpu_milli or max(gpus) < milli:
            continue
        assert scorer.score(n, pod) == fgd_score(wl, n, pod)


def test_model_pressure_by_hand() -> None:
    # half the demand may go anywhere, half only to B; A and B have 4 GPUs each
    wl = wl_of((1000, 1000, 1, (), 0.5), (1000, 1000, 1, ("B",), 0.5))
    assert model_pressure(wl, {"A": 4, "B": 4}) == {"A": 0.0, "B": pytest.approx(1.0)}
    # a class that accepts A or B spreads its demand by supply: B has 3 of 4 GPUs
    wl2 = wl_of((1000, 1000, 1, (), 0.5), (1000, 1000, 1, ("A", "B"), 0.5))
    p = model_pressure(wl2, {"A": 1, "B": 3})
    assert p == {"A": pytest.approx(0.5), "B": pytest.approx(0.5)}
    assert model_pressure(PLAIN, {"A": 4}) == {"A": 0.0}  # no typed class, no pressure


def test_an_untyped_pod_stays_off_the_model_that_typed_pods_need() -> None:
    wl = wl_of((1000, 1000, 1, (), 0.5), (1000, 1000, 1, ("B",), 0.5))
    a = NodeState(64_000, 10**6, (1000,) * 4, "A")
    b = NodeState(64_000, 10**6, (1000,) * 4, "B")
    scorer = StrandScorer(wl, model_pressure(wl, {"A": 4, "B": 4}))
    assert best(scorer, [b, a], PodRequest(1000, 1, 1, 1000)) == 1
    # the toll lowers B's score (pressure 1: the pod's 1000 milli count as fragmentation) and
    # leaves A's (pressure 0) as it was
    untolled = StrandScorer(wl, {}, StrandParams(typed_weight=0.0))
    pod = PodRequest(1000, 1, 1, 1000)
    assert scorer.score(a, pod) == untolled.score(a, pod)
    assert scorer.score(b, pod)[0] < untolled.score(b, pod)[0]
    # a pod with a GPU spec pays no toll: it is one of those the pressure is for
    typed = PodRequest(1000, 1, 1, 1000, ("A", "B"))
    assert scorer.score(b, typed) == untolled.score(b, typed)


def test_a_fraction_takes_the_first_device_with_the_best_score() -> None:
    wl = wl_of((1000, 600, 1, (), 1.0))  # 500 free on a device is a sliver to this class
    n = NodeState(64_000, 10**6, (1000, 500, 1000, 500), "G2")
    flat = StrandScorer(wl, {}, StrandParams(lookahead=0.0))
    score, devices = flat.score(n, PodRequest(1000, 1, 1, 500))
    assert devices == (1,)  # filling a sliver removes 500 of fragmentation: first of the two
    assert score == int(100 / (1 + math.exp(-500 / 600)))
    # the look-ahead counts the sliver again, at what it will still waste: all of it here
    score, devices = StrandScorer(wl, {}).score(n, PodRequest(1000, 1, 1, 500))
    assert devices == (1,)
    assert score == int(100 / (1 + math.exp(-(500 + 1.25 * 500) / 600)))


def test_the_look_ahead_prices_a_sliver_by_what_can_still_fill_it() -> None:
    # 160-milli pods can fill a 190 sliver down to 30; nothing fills a 60 sliver
    wl = wl_of((4000, 810, 1, (), 0.5), (4000, 160, 1, (), 0.5))
    scorer = StrandScorer(wl, {})
    w = scorer._waste_table()
    assert w[19] == pytest.approx(30.0)  # 190 free: one 160 fits, 30 stay
    assert w[6] == pytest.approx(60.0)
    assert w[100] == pytest.approx(0.5 * 30 + 0.5 * w[84])  # 1000: an 810 or a 160 first
    # an 810 goes where a 160 already sits (30 left) rather than to the empty device
    n = NodeState(64_000, 10**6, (840, 1000), "G2")
    assert scorer.score(n, PodRequest(4000, 1, 1, 810))[1] == (0,)


def test_the_look_ahead_does_not_count_on_fillers_scarcer_than_the_slivers() -> None:
    # 810s leave 190 slivers nine times as often as a 160 comes: a 190 sliver is waste
    wl = wl_of((4000, 810, 1, (), 0.6), (4000, 160, 1, (), 0.1), (4000, 470, 1, (), 0.3))
    w = StrandScorer(wl, {})._waste_table()
    assert w[19] == pytest.approx(190.0)
    assert w[53] == pytest.approx(60.0)  # 530 free: a 470 fits, 60 stay
    # as many 160s as 810s: they count (the test above)
    even = wl_of((4000, 810, 1, (), 0.45), (4000, 160, 1, (), 0.45), (4000, 470, 1, (), 0.1))
    assert StrandScorer(even, {})._waste_table()[19] == pytest.approx(30.0)


@pytest.mark.parametrize(
    "kw",
    [
        {"cpu_per_gpu": 0.0},
        {"scale": -1.0},
        {"strand_weight": -0.5},
        {"typed_weight": -1.0},
        {"lookahead": -0.1},
    ],
)
def test_params_are_checked(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        StrandParams(**kw)


# ----- the simulator and the live scheduler use the same placement ----------------------------

MODELS = ("G2", "G2", "T4", "V100M32")
SHAPES = [  # (cores, GiB, GPUs, milli, models)
    (3, 8, 1, 810, ()),
    (8, 16, 1, 470, ()),
    (11, 32, 1, 1000, ()),
    (16, 32, 1, 1000, ()),
    (4, 8, 1, 320, ()),
    (6, 24, 2, 1000, ()),
    (8, 16, 1, 1000, ("T4",)),
]


def test_simulate_fill_and_the_live_plugin_place_alike() -> None:
    rng = random.Random(3)
    specs = [
        NodeSpec(
            f"n{i:02d}",
            MODELS[i % 4],
            (8, 8, 2, 4)[i % 4],
            (96, 96, 104, 96)[i % 4] * 1000,
            512 * GIB,
            "leaf-0",
            "pod-0",
        )
        for i in range(8)
    ]
    shapes = [rng.choice(SHAPES) for _ in range(40)]
    pods = [PodRequest(c * 1000, g * GIB, n, m, mo) for c, g, n, m, mo in shapes]
    # the simulator's engine, nodes in this order (ties go to the first, as in the live cycle)
    sim = _Cluster(specs, "fgd-strand", target_workload(pods), random.Random(0))
    placed: list[tuple[str, tuple[int, ...]] | None] = []
    for pod in pods:
        before = [s.gpus for s in sim.states]
        if not sim.place(pod):
            placed.append(None)
            continue
        i = sim.changed[-1]
        after = sim.states[i].gpus
        took = tuple(d for d, (a, b) in enumerate(zip(before[i], after, strict=True)) if a != b)
        placed.append((specs[i].name, took))
    # the live scheduler: every pod pending in one FIFO cycle, the target workload from them
    views = [
        node(s.name, s.gpus, model=s.gpu_model, cpus=s.cpu_milli / 1000, mem_gib=s.memory_mib / GIB)
        for s in specs
    ]
    jobs = [
        job(f"j{k:02d}", submit=float(k), cpus=c, mem_gib=g, gpus=n, milli=m, models=mo)
        for k, (c, g, n, m, mo) in enumerate(shapes)
    ]
    res = cycle(views, jobs, place="fgd-strand", backfill="none")
    live: list[tuple[str, tuple[int, ...]] | None] = []
    for k in range(len(jobs)):
        alloc = start_of(res, f"j{k:02d}")
        live.append(None if alloc is None else (alloc[0].node, alloc[0].gpus))
    assert sum(p is not None for p in placed) >= 20  # the case places many pods
    # FIFO stops at the first pod that does not fit; up to there the two agree pod by pod
    first_miss = placed.index(None) if None in placed else len(placed)
    assert first_miss >= 30
    assert live[:first_miss] == placed[:first_miss]


def test_simulate_fill_places_with_fgd_strand_unless_told() -> None:
    import inspect

    from gpufleet.cli.simulate.fill import fill

    # issue 24: fgd-strand beats FGD on every openb pod list (BENCHMARKS.md), so it is the default
    assert inspect.signature(fill).parameters["placement"].default == "fgd-strand"


def test_the_live_default_places_fractions_as_fgd_strand_does() -> None:
    # place/topology (the live controller's default) hands fractions to fgd-strand; whole GPUs
    # stay its own (tightest node). Fractions of mixed sizes, on nodes of two models.
    rng = random.Random(5)
    views = [
        node(f"n{i:02d}", (8, 4)[i % 2], model=MODELS[i % 2], cpus=(96, 64)[i % 2])
        for i in range(6)
    ]
    sizes = (810, 470, 320, 160, 650, 230)
    jobs = [
        job(f"j{k:02d}", submit=float(k), cpus=rng.choice((2, 4, 8)), milli=rng.choice(sizes))
        for k in range(60)
    ]
    topo = cycle(views, jobs, place="topology", backfill="none")
    strand = cycle(views, jobs, place="fgd-strand", backfill="none")
    for k in range(len(jobs)):
        assert start_of(topo, f"j{k:02d}") == start_of(strand, f"j{k:02d}")
    assert len(topo.starts) == 60
