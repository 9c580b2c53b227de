"""Slurm's allocation terms in the scheduler: distinct nodes (-N), -w, -x, -C, GPU type names,
--exclusive and --mem=0, each with the Reason a job that waits for it gets."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from builders import cluster, cycle, nodes_of, running, spec, start_of
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.job import JobSpec
from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.snapshot import NodeView, PendingJob

PLACERS = ["bestfit", "packing", "topology", "fgd", "fgd-strand", "random", "dotprod"]


def pjob(id: str, alloc: dict[str, Any] | None = None, **kw: Any) -> PendingJob:
    s: JobSpec = replace(spec(id, **kw), **(alloc or {}))
    return PendingJob(id, s, 0.0)


def featured(nodes: list[NodeView], **features: list[str]) -> list[NodeView]:
    return [replace(n, features=frozenset(features.get(n.name, ()))) for n in nodes]


def typed(nodes: list[NodeView], gres: str) -> list[NodeView]:
    return [replace(n, gres_type=gres) for n in nodes]


@pytest.mark.parametrize("place", PLACERS)
def test_two_distinct_node_workers_never_share_a_node(place: str) -> None:
    # both workers fit on one 8-GPU node; --nodes=2 puts them on two
    j = pjob("j", {"distinct_nodes": True}, gpus=2, workers=2)
    res = cycle(cluster(3, 8), [j], place=place)
    assert len(set(nodes_of(res, "j"))) == 2
    plain = cycle(cluster(3, 8), [pjob("p", gpus=2, workers=2)], place="bestfit")
    assert len(set(nodes_of(plain, "p"))) == 1  # without it, bestfit packs them (the test bites)


def test_distinct_nodes_under_a_required_leaf() -> None:
    nodes = cluster(4, 8, leaves=2)
    j = pjob("j", {"distinct_nodes": True}, gpus=1, workers=2, topology="leaf", required=True)
    res = cycle(nodes, [j], place="topology")
    used = nodes_of(res, "j")
    assert len(set(used)) == 2
    leaves = {n.leaf for n in nodes if n.name in used}
    assert len(leaves) == 1


def test_distinct_nodes_wait_with_the_count_that_fits() -> None:
    busy = [running("r", ("n00", range(8)))]
    j = pjob("j", {"distinct_nodes": True}, gpus=1, workers=2)
    res = cycle(cluster(2, 8), [j], busy)
    r = res.reasons["j"]
    assert r.code is ReasonCode.RESOURCES
    assert r.message == "needs 2 distinct nodes, 1 fit now"


def test_distinct_nodes_never_fit_on_too_few_nodes() -> None:
    j = pjob("j", {"distinct_nodes": True}, gpus=1, workers=3)
    res = cycle(cluster(2, 8), [j])
    r = res.reasons["j"]
    assert r.code is ReasonCode.NEVER
    assert r.message.startswith("needs 3 distinct nodes, 2 fit")
    assert r.data["filter"] == "filter/distinct"


def test_nodelist_pins_and_adds_nodes() -> None:
    j = pjob("j", {"nodelist": ("n02",), "distinct_nodes": True}, gpus=1, workers=2)
    res = cycle(cluster(4, 8), [j])
    used = nodes_of(res, "j")
    assert used[0] == "n02" and len(set(used)) == 2


def test_nodelist_naming_an_unknown_node_never_fits() -> None:
    res = cycle(cluster(2, 8), [pjob("j", {"nodelist": ("n09",)})])
    r = res.reasons["j"]
    assert r.code is ReasonCode.NEVER and "n09 (in -w)" in r.message
    assert r.data["filter"] == "filter/nodelist"


def test_exclude_keeps_workers_off_listed_nodes() -> None:
    res = cycle(cluster(3, 8), [pjob("j", {"exclude": ("n00", "n01")}, gpus=1)])
    assert nodes_of(res, "j") == ["n02"]
    res = cycle(cluster(2, 8), [pjob("k", {"exclude": ("n00", "n01")}, gpus=1)])
    r = res.reasons["k"]
    assert r.code is ReasonCode.NEVER and "excluded by -x" in r.message


def test_constraint_filters_by_feature() -> None:
    nodes = featured(cluster(3, 8), n01=["ib", "gmem80"], n02=["eth"])
    res = cycle(nodes, [pjob("j", {"constraint": "ib&gmem80"}, gpus=1)])
    assert nodes_of(res, "j") == ["n01"]
    res = cycle(nodes, [pjob("k", {"constraint": "gmem48"}, gpus=1)])
    r = res.reasons["k"]
    assert r.code is ReasonCode.NEVER and r.message == "no node has feature gmem48"


def test_matching_or_keeps_every_node_on_one_choice() -> None:
    nodes = featured(cluster(3, 8), n00=["ib"], n01=["eth"], n02=["eth"])
    j = pjob("j", {"constraint": "[ib|eth]", "distinct_nodes": True}, gpus=1, workers=2)
    res = cycle(nodes, [j])
    assert sorted(nodes_of(res, "j")) == ["n01", "n02"]  # not ib + eth


def test_gres_type_matches_the_site_name_not_the_catalog() -> None:
    nodes = typed(cluster(1, 8), "a100") + typed(cluster(1, 8, start=1), "gmem48")
    res = cycle(nodes, [pjob("j", {"gres_type": "gmem48"}, gpus=1)])
    assert nodes_of(res, "j") == ["n01"]
    res = cycle(nodes, [pjob("k", {"gres_type": "h100"}, gpus=1)])
    r = res.reasons["k"]
    assert r.code is ReasonCode.NEVER
    assert r.message == "no node has GPU type 'h100' (the cluster's types: a100, gmem48)"


def test_exclusive_takes_a_whole_idle_node() -> None:
    busy = [running("r", ("n00", [0]))]
    res = cycle(cluster(2, 8), [pjob("j", {"exclusive": True}, gpus=1)], busy)
    (p,) = start_of(res, "j") or ()
    assert p.node == "n01" and len(p.gpus) == 8 and p.cpu_milli == 112_000
    res = cycle(cluster(1, 8), [pjob("k", {"exclusive": True}, gpus=1)], busy)
    r = res.reasons["k"]
    assert r.code is ReasonCode.RESOURCES and "idle whole nodes" in r.message


def test_whole_node_memory_takes_all_of_it() -> None:
    res = cycle(cluster(1, 8), [pjob("j", {"whole_node_memory": True}, gpus=1, mem_gib=1)])
    (p,) = start_of(res, "j") or ()
    assert p.memory_mib == 1024 * 1024


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    workers=st.integers(2, 5),
    gpus=st.integers(1, 4),
    leaves=st.integers(1, 2),
    place=st.sampled_from(PLACERS),
)
def test_distinct_gangs_never_share_a_node_property(
    sizes: list[int], workers: int, gpus: int, leaves: int, place: str
) -> None:
    nodes = [
        replace(n, name=f"n{i:02d}", leaf=f"leaf-{i % leaves}")
        for i, g in enumerate(sizes)
        for n in cluster(1, g)
    ]
    j = pjob("j", {"distinct_nodes": True}, gpus=gpus, workers=workers, cpus=0, mem_gib=0)
    res = cycle(nodes, [j], place=place)
    fits = sum(1 for g in sizes if g >= gpus)
    alloc = start_of(res, "j")
    if alloc is not None:
        used = [p.node for p in alloc]
        assert len(used) == workers and len(set(used)) == workers
    else:
        assert fits < workers
