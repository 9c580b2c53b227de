"""A queue's node set (ADR 0066): its ``nodes`` are labels its nodes all carry (Slurm's
partition ``Nodes=``, Kueue's flavors' nodeLabels); every job of the queue runs only there,
kept so as the per-cycle node exclusions of ADR 0064 (placement, backfill, preemption and the
Reasons see them); a job no node of its set could ever hold is refused at submit in sbatch's
words; the cluster spec, the store and the simulator carry it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster, cycle, profile, running, spec, start_of
from test_scheduler_alloc import pjob

from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reason import ReasonCode
from gpufleet.server.admission import node_set_problems
from gpufleet.server.store.codec import queue_from_dict, queue_to_dict

DESKTOPS = QueueSpec("desktops", nodes=(("pool", "l40s"),))
SAID = "queue desktops runs its jobs only on nodes labelled pool=l40s (its nodes)"


def pools() -> list:
    """n00 and n01 are the L40S pool's, n02 and n03 the H100 pool's (2 GPUs each)."""
    nodes = cluster(4, 2, model="L40S")
    return [
        replace(n, labels=(("pool", "l40s" if i < 2 else "h100"),)) for i, n in enumerate(nodes)
    ]


def desk(name: str, gpus: int = 1, **kw: object) -> object:
    return pjob(name, {"queue": "desktops", **kw}, gpus=gpus)


def test_a_queues_jobs_run_only_on_its_nodes_whatever_placement_prefers() -> None:
    half = running("half", ("n02", [0]))  # bestfit's tightest: n02, an H100 node
    res = cycle(pools(), [pjob("train", gpus=1)], [half], queues=[DESKTOPS])
    assert start_of(res, "train")[0].node == "n02"  # type: ignore[index]
    res = cycle(pools(), [desk("d")], [half], queues=[DESKTOPS])
    assert start_of(res, "d")[0].node in ("n00", "n01")  # type: ignore[index]
    gang = desk("g", gpus=2, workers=2)  # a gang too: both workers inside the set
    res = cycle(pools(), [gang], [half], queues=[DESKTOPS])
    assert sorted(p.node for p in start_of(res, "g")) == ["n00", "n01"]  # type: ignore[union-attr]


def test_a_job_waiting_for_its_queues_nodes_is_told_the_set_and_what_was_not_counted() -> None:
    full = [running("a", ("n00", [0, 1])), running("b", ("n01", [0, 1]))]
    res = cycle(pools(), [desk("d")], full, queues=[DESKTOPS])
    assert start_of(res, "d") is None
    r = res.reasons["d"]
    assert r.code is not ReasonCode.NEVER, r
    assert r.message.endswith(f"; {SAID}, so 2 node(s) outside them are not counted"), r.message
    assert r.data["nodes"] == {"pool": "l40s"}
    res = cycle(pools(), [pjob("other", gpus=1)], full, queues=[DESKTOPS])
    assert start_of(res, "other") is not None  # another queue's job: every node


def test_with_its_nodes_drained_a_job_is_not_told_of_an_x_it_never_gave() -> None:
    nodes = [replace(n, schedulable=False) if n.name in ("n00", "n01") else n for n in pools()]
    res = cycle(nodes, [desk("d")], [], queues=[DESKTOPS])
    r = res.reasons["d"]
    assert r.message == (
        f"{SAID}, and no schedulable one is; 2 node(s) outside them are not counted"
    )


def test_a_queue_with_no_node_in_its_set_is_never_schedulable_and_says_why() -> None:
    q = QueueSpec("desktops", nodes=(("pool", "a10"),))
    res = cycle(pools(), [desk("d")], [], queues=[q])
    r = res.reasons["d"]
    assert r.code is ReasonCode.NEVER
    assert r.message == (
        "queue desktops runs its jobs only on nodes labelled pool=a10 (its nodes); none of the "
        "cluster's 4 node(s) is"
    )
    assert r.data == {"queue": "desktops", "nodes": {"pool": "a10"}}


def test_preemption_for_a_queues_job_stops_only_jobs_inside_its_nodes() -> None:
    """Every node is full of low-priority work; the H100 node's victim would lose less (it
    started last), but the desktops job may run only on the L40S pool."""
    busy = [
        running("l0", ("n00", [0, 1]), start=0.0),
        running("l1", ("n01", [0, 1]), start=10.0),
        running("h0", ("n02", [0, 1]), start=95.0),
        running("h1", ("n03", [0, 1]), start=90.0),
    ]
    hi = desk("hi", priority=5)
    res = cycle(pools(), [hi], busy, queues=[DESKTOPS], now=100.0, preempt=["priority"])
    assert [p.job_id for p in res.preemptions] == ["l1"]
    other = pjob("hi", {"priority": 5}, gpus=1)  # the same, of another queue
    res = cycle(pools(), [other], busy, queues=[DESKTOPS], now=100.0, preempt=["priority"])
    assert [p.job_id for p in res.preemptions] == ["h0"]  # without the set: least lost


def test_a_backfilled_job_of_the_queue_stays_inside_its_nodes() -> None:
    """The head (2 whole nodes) is blocked; a short job may start around it, a desktops one
    only on the L40S pool, which is full: it waits, while another queue's starts."""
    busy = [
        running("l0", ("n00", [0, 1]), limit=50.0),
        running("l1", ("n01", [0, 1]), limit=50.0),
        running("h0", ("n02", [0]), limit=500.0),
    ]
    head = pjob("head", gpus=2, workers=2, limit=100.0)  # needs n02 and n03 whole: blocked
    short = desk("d", time_limit_s=10.0)
    res = cycle(pools(), [head, short], busy, queues=[DESKTOPS])
    assert start_of(res, "head") is None and start_of(res, "d") is None
    other = pjob("o", gpus=1, limit=10.0)
    res = cycle(pools(), [head, other], busy, queues=[DESKTOPS])
    assert start_of(res, "o") is not None


def test_the_submit_judges_a_job_against_its_queues_nodes_only() -> None:
    nodes = pools()
    queues = {"desktops": DESKTOPS}
    assert node_set_problems(spec("d", gpus=2, queue="desktops"), queues, nodes, profile()) == []
    none = {"desktops": QueueSpec("desktops", nodes=(("pool", "a10"),))}
    ((at, msg),) = node_set_problems(spec("d", gpus=1, queue="desktops"), none, nodes, profile())
    assert msg == (
        "Requested node configuration is not available: queue desktops runs its jobs only on "
        "nodes labelled pool=a10 (its nodes); none of the cluster's 4 node(s) is"
    )
    h100 = [replace(n, gpu_free=(1000,) * 8) if n.name >= "n02" else n for n in nodes]
    big = spec("d", gpus=4, queue="desktops")
    ((at, msg),) = node_set_problems(big, queues, h100, profile())
    assert at == "body.spec"
    assert msg.startswith("Requested node configuration is not available: "), msg
    assert " on the 2 node(s) of queue desktops (pool=l40s); " in msg, msg
    assert node_set_problems(replace(big, queue="default"), queues, h100, profile()) == []


POOL = {"count": 1, "gpu_model": "L40S", "gpus": 1, "cpu_cores": 8, "memory_gib": 64}


def test_the_cluster_spec_and_the_store_carry_a_queues_nodes() -> None:
    queues = [{"name": "desktops", "nodes": {"pool": "l40s"}}, {"name": "lab"}]
    cs = ClusterSpec.from_dict({"pools": [{"name": "p", **POOL}], "queues": queues})
    assert [q.nodes for q in cs.queues] == [(("pool", "l40s"),), ()]
    two = QueueSpec("r", nodes=(("pool", "l40s"), ("zone", "a")))
    for q in (DESKTOPS, two, QueueSpec("lab")):
        assert queue_from_dict(queue_to_dict(q)) == q
    bad = {"pools": [{"name": "p", **POOL}], "queues": [{"name": "d", "nodes": ["l40s"]}]}
    with pytest.raises(SpecError, match=r"nodes"):
        ClusterSpec.from_dict(bad)


@pytest.mark.parametrize(("held", "expect"), [(False, 1.0), (True, 100.0)])
def test_the_simulator_replays_a_queues_nodes(held: bool, expect: float) -> None:
    """The L40S node is busy until 100 s, the H100 one free: a desktops job waits for the
    L40S node with the set, and starts at once without it."""
    from gpufleet.sim.engine import Simulation, TraceJob

    pools_ = [
        {"name": "h100", **POOL, "labels": {"pool": "h100"}},
        {"name": "l40s", **POOL, "labels": {"pool": "l40s"}},
    ]
    q = {"name": "desktops", **({"nodes": {"pool": "l40s"}} if held else {})}
    cs = ClusterSpec.from_dict({"pools": pools_, "queues": [q]})
    train = replace(spec("train", gpus=1), nodelist=("l40s-000",))
    jobs = [
        TraceJob("train", train, 0.0, 100.0),
        TraceJob("d", spec("d", gpus=1, queue="desktops"), 1.0, 10.0),
    ]
    sim = Simulation(cs, profile(backfill="none"), jobs)
    sim.run(until=1000.0)
    assert sim.outcomes["d"].first_start == expect


def test_a_feature_no_node_has_is_refused_as_slurms_invalid_feature() -> None:
    """sbatch -C a100 where no node has it: Slurm 22.05's "Batch job submission failed:
    Invalid feature specification" (the user-script corpus, 2026-12-07), not a node shape."""
    job = replace(spec("d"), constraint="a100")
    ((_, msg),) = node_set_problems(job, {}, pools(), profile())
    assert msg.startswith("Invalid feature specification: no node has feature a100"), msg
