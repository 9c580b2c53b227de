"""Step 3, placement: bestfit, topology, the scored plugins (packing, dotprod, random, fgd);
gangs all or nothing, required topology, GPU models, data locality, fractional GPUs."""

from __future__ import annotations

from collections import Counter

import pytest
from builders import cluster, cycle, job, node, nodes_of, running, start_of

from gpufleet.model.reason import ReasonCode

ALL_PLACE = ["bestfit", "topology", "packing", "dotprod", "random", "fgd", "fgd-strand"]


def devices(res, job_id: str) -> list[tuple[str, tuple[int, ...]]]:
    alloc = start_of(res, job_id)
    assert alloc is not None, res.reasons.get(job_id)
    return [(p.node, p.gpus) for p in alloc]


# ----- bestfit -------------------------------------------------------------------------------


def test_bestfit_picks_the_node_left_with_the_fewest_free_gpus() -> None:
    nodes = cluster(3, 8)
    busy = [running("r0", ("n00", range(6))), running("r2", ("n02", range(3)))]
    res = cycle(nodes, [job("j", gpus=2)], busy, place="bestfit")
    assert devices(res, "j") == [("n00", (6, 7))]
    # a 3-GPU job no longer fits n00 (2 free): the next tightest is n02 (5 free), not n01 (8)
    res = cycle(nodes, [job("j", gpus=3)], busy, place="bestfit")
    assert devices(res, "j") == [("n02", (3, 4, 5))]


def test_bestfit_skips_nodes_without_the_cpu_or_memory() -> None:
    nodes = [node("n00", cpus=4, mem_gib=512), node("n01", cpus=64, mem_gib=16), node("n02")]
    busy = [running("r", ("n00", range(7)), cpus=1, mem_gib=1)]  # n00 is tightest by GPUs
    res = cycle(nodes, [job("j", cpus=8, mem_gib=32)], busy, place="bestfit")
    assert nodes_of(res, "j") == ["n02"]


def test_no_plugin_places_on_an_unschedulable_node() -> None:
    nodes = [node("n00", schedulable=False), node("n01")]
    for place in ALL_PLACE:
        res = cycle(nodes, [job("a", gpus=8), job("b", gpus=1, submit=1)], place=place)
        assert nodes_of(res, "a") == ["n01"], place
        assert start_of(res, "b") is None, place


@pytest.mark.parametrize("place", ALL_PLACE)
def test_every_plugin_places_whole_gpus_on_free_devices_only(place: str) -> None:
    nodes = cluster(2, 8)
    busy = [running("r", ("n00", [0, 2, 4, 6]))]
    res = cycle(nodes, [job("j", gpus=4, workers=3)], busy, place=place)
    taken = Counter()
    for n, gpus in devices(res, "j"):
        for d in gpus:
            taken[(n, d)] += 1
            assert not (n == "n00" and d in (0, 2, 4, 6))
    assert max(taken.values()) == 1 and len(taken) == 12


def test_packing_dotprod_and_fgd_prefer_the_partly_used_node() -> None:
    nodes = cluster(3, 8)
    busy = [running("r0", ("n00", range(6))), running("r2", ("n02", range(3)))]
    for place in ("packing", "dotprod", "fgd"):
        res = cycle(nodes, [job("j", gpus=2)], busy, place=place)
        assert nodes_of(res, "j") == ["n00"], place


def test_random_placement_is_seeded_and_spreads() -> None:
    nodes = cluster(8, 8)
    seen = set()
    for seed in range(12):
        a = cycle(nodes, [job("j", gpus=1)], place="random", seed=seed)
        b = cycle(nodes, [job("j", gpus=1)], place="random", seed=seed)
        assert devices(a, "j") == devices(b, "j")
        seen.add(nodes_of(a, "j")[0])
    assert len(seen) > 2


def test_fgd_option_is_validated() -> None:
    from gpufleet.scheduler.framework import make

    with pytest.raises(ValueError):
        make("place", "fgd", {"popularity_pct": 0})


# ----- topology ------------------------------------------------------------------------------


def test_topology_keeps_a_gang_on_one_node_when_it_can() -> None:
    nodes = cluster(8, 8, leaves=4, pods=2)
    busy = [running("r0", ("n00", range(4))), running("r1", ("n01", range(4)))]
    res = cycle(nodes, [job("g", gpus=4, workers=2)], busy, place="topology")
    assert set(nodes_of(res, "g")) == {"n02"}
    # bestfit, which ignores the tree, spreads it over the two half-free nodes
    res = cycle(nodes, [job("g", gpus=4, workers=2)], busy, place="bestfit")
    assert nodes_of(res, "g") == ["n00", "n01"]


def test_topology_then_one_leaf_the_tightest_that_fits() -> None:
    # leaf-0: n00 n01 n02 free; leaf-1: n03 n04 free (n05 busy). A 2 × 8 gang fits both;
    # the tighter leaf-1 takes it so that leaf-0 keeps its 3-node block.
    nodes = cluster(6, 8, leaves=2)
    busy = [running("r", ("n05", range(8)))]
    res = cycle(nodes, [job("g", gpus=8, workers=2)], busy, place="topology")
    assert sorted(nodes_of(res, "g")) == ["n03", "n04"]


def test_topology_then_one_pod() -> None:
    # pods of 2 leaves × 2 nodes; one free node per leaf in pod-0 (leaf-0, leaf-1); in pod-1
    # only leaf-2 has a free node. No leaf holds 2 × 8: pod-0 does.
    nodes = cluster(8, 8, leaves=4, pods=2)
    busy = [
        running(f"r{i}", (f"n{i:02d}", range(8))) for i in (1, 3, 5, 6, 7)
    ]  # free: n00 (leaf-0), n02 (leaf-1), n04 (leaf-2)
    res = cycle(nodes, [job("g", gpus=8, workers=2)], busy, place="topology")
    assert sorted(nodes_of(res, "g")) == ["n00", "n02"]
    pods = {v.name: v.pod for v in nodes}
    assert {pods[n] for n in nodes_of(res, "g")} == {"pod-0"}


def test_topology_spreads_anywhere_as_a_last_resort_when_not_required() -> None:
    nodes = cluster(4, 8, leaves=2, pods=2)
    busy = [running("r1", ("n01", range(8))), running("r3", ("n03", range(8)))]
    res = cycle(nodes, [job("g", gpus=8, workers=2)], busy, place="topology")
    assert sorted(nodes_of(res, "g")) == ["n00", "n02"]


@pytest.mark.parametrize("place", ALL_PLACE)
@pytest.mark.parametrize("level", ["node", "leaf", "pod"])
def test_a_required_topology_is_never_violated(place: str, level: str) -> None:
    """Two leaves in two pods, one free node in each: a required 2 × 8 under one leaf or pod,
    or 2 × 4 under one node, must not start, whatever the plugin."""
    nodes = cluster(4, 8, leaves=2, pods=2)
    busy = [running("r1", ("n01", range(8))), running("r3", ("n03", range(8)))]
    gpus = 4 if level == "node" else 8
    busy += [running("h0", ("n00", range(4))), running("h2", ("n02", range(4)))] * (level == "node")
    g = job("g", gpus=gpus, workers=2, topology=level, required=True)
    res = cycle(nodes, [g], busy, place=place)
    assert start_of(res, "g") is None
    assert res.reasons["g"].code in (ReasonCode.TOPOLOGY, ReasonCode.RESOURCES)
    # and the same job preferred (not required) does start, spread out
    res = cycle(nodes, [job("g", gpus=gpus, workers=2, topology=level)], busy, place=place)
    assert start_of(res, "g") is not None


@pytest.mark.parametrize("place", ALL_PLACE)
def test_a_required_leaf_gang_lands_under_one_leaf(place: str) -> None:
    nodes = cluster(6, 8, leaves=3)
    busy = [running("r0", ("n00", range(8))), running("r3", ("n03", range(8)))]
    res = cycle(
        nodes, [job("g", gpus=8, workers=2, topology="leaf", required=True)], busy, place=place
    )
    leaves = {v.name: v.leaf for v in nodes}
    assert {leaves[n] for n in nodes_of(res, "g")} == {"leaf-2"}


# ----- GPU models, locality ------------------------------------------------------------------


@pytest.mark.parametrize("place", ALL_PLACE)
def test_gpu_model_constraint(place: str) -> None:
    nodes = cluster(2, 8, model="H100-SXM") + cluster(2, 8, model="A100-80GB", start=2)
    res = cycle(
        nodes,
        [job("a100", gpus=4, workers=3, models=["A100-80GB"]), job("any", gpus=8, submit=1)],
        place=place,
    )
    assert set(nodes_of(res, "a100")) <= {"n02", "n03"}
    assert start_of(res, "any") is not None
    # a model the cluster lacks: the job never starts
    res = cycle(nodes, [job("b200", models=["B200"])], place=place)
    assert start_of(res, "b200") is None
    assert res.reasons["b200"].code is ReasonCode.NEVER


@pytest.mark.parametrize("place", ["bestfit", "topology"])
def test_data_locality_prefers_a_node_holding_the_dataset(place: str) -> None:
    nodes = [node("n00"), node("n01"), node("n02", datasets={"imagenet"})]
    res = cycle(nodes, [job("j", dataset="imagenet")], place=place)
    assert nodes_of(res, "j") == ["n02"]
    # even over a tighter node
    busy = [running("r", ("n00", range(6)))]
    res = cycle(nodes, [job("j", dataset="imagenet")], busy, place=place)
    assert nodes_of(res, "j") == ["n02"]
    # a job without a dataset keeps best fit
    res = cycle(nodes, [job("j")], busy, place=place)
    assert nodes_of(res, "j") == ["n00"]


def test_data_locality_never_overrides_feasibility() -> None:
    nodes = [node("n00"), node("n01", datasets={"imagenet"})]
    busy = [running("r", ("n01", range(8)))]
    res = cycle(nodes, [job("j", dataset="imagenet")], busy)
    assert nodes_of(res, "j") == ["n00"]


# ----- fractional GPUs -----------------------------------------------------------------------


@pytest.mark.parametrize("place", ALL_PLACE)
def test_fractional_gpus_share_a_device_up_to_1000_milli(place: str) -> None:
    nodes = [node("n00", gpus=2)]
    pending = [job(f"f{i}", milli=300, submit=i) for i in range(7)]
    res = cycle(nodes, pending, place=place)
    per_device = Counter()
    for s in res.starts:
        (p,) = s.allocation
        assert len(p.gpus) == 1 and p.gpu_milli == 300
        per_device[p.gpus[0]] += p.gpu_milli
    assert all(v <= 1000 for v in per_device.values())
    assert len(res.starts) == 6  # 3 per device; the 7th would take a device to 1200
    assert start_of(res, "f6") is None


def test_bestfit_fractional_goes_to_the_tightest_partly_used_device() -> None:
    nodes = [node("n00", gpus=2), node("n01", gpus=2)]
    busy = [
        running("half", ("n00", [0]), milli=500),
        running("most", ("n01", [1]), milli=700),
    ]
    res = cycle(nodes, [job("f", milli=300)], busy, place="bestfit")
    res2 = cycle(nodes, [job("f", milli=400)], busy, place="bestfit")
    assert devices(res2, "f") == [("n00", (0,))]  # 500 free: the tightest device that fits
    assert devices(res, "f") == [("n01", (1,))]  # 300 free there: a perfect fit


def test_whole_gpu_jobs_do_not_take_a_partly_used_device() -> None:
    nodes = [node("n00", gpus=2)]
    busy = [running("frac", ("n00", [0]), milli=100)]
    res = cycle(nodes, [job("a", gpus=1), job("b", gpus=1, submit=1)])
    assert len(res.starts) == 2  # sanity: both fit when nothing is running
    res = cycle(nodes, [job("a", gpus=1), job("b", gpus=1, submit=1)], busy)
    assert devices(res, "a") == [("n00", (1,))]
    assert start_of(res, "b") is None


def test_gang_of_fractional_workers_is_all_or_nothing() -> None:
    nodes = [node("n00", gpus=1)]
    res = cycle(nodes, [job("g", milli=400, workers=3)])
    assert start_of(res, "g") is None  # 1200 milli on one device: none of it starts
    res = cycle(nodes, [job("g", milli=300, workers=3)])
    assert len(start_of(res, "g")) == 3
