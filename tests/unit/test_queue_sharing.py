"""A queue's ways of sharing a GPU (ADR 0064): its jobs' GPU shares run only on nodes that
share GPUs its way (the label ``gpufleet.io/gpu-sharing``; none: time-slicing), whatever
placement would have preferred; whole-GPU jobs are untouched; a share with no such node in the
cluster is told so, and one that waits for such a node is told which nodes were not counted.
The cluster spec, the store, the simulator and the agent's modes agree."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster, cycle, profile, running, spec, start_of
from test_scheduler_alloc import pjob

from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reason import ReasonCode
from gpufleet.model.replicas import SHARING_LABEL, SHARING_MODES
from gpufleet.server.store.codec import queue_from_dict, queue_to_dict

DESKTOPS = QueueSpec("desktops", gpu_sharing=("mps",))


def ts_and_mps() -> list:
    """n00 time-slices (no label, as CUDA does), n01 shares by MPS."""
    ts, mps = cluster(2, 2, model="L40S")
    return [ts, replace(mps, labels=((SHARING_LABEL, "mps"),))]


def share(name: str, queue: str, milli: int = 250) -> object:
    return pjob(name, {"queue": queue}, gpus=1, milli=milli)


def test_a_queues_shares_go_only_where_gpus_are_shared_its_way() -> None:
    half = running("half", ("n00", [0]), milli=500)  # bestfit's tightest: n00's GPU 0
    nodes = ts_and_mps()
    res = cycle(nodes, [share("any", "default")], [half], queues=[DESKTOPS])
    assert start_of(res, "any")[0].node == "n00"  # type: ignore[index]
    res = cycle(nodes, [share("d", "desktops")], [half], queues=[DESKTOPS])
    ((p,),) = [start_of(res, "d")]
    assert p.node == "n01" and p.gpu_milli == 250
    whole = pjob("w", {"queue": "desktops"}, gpus=2)  # whole GPUs: the policy is of shares
    res = cycle(nodes[:1], [whole], [], queues=[DESKTOPS])
    assert start_of(res, "w") is not None


def test_a_share_waiting_for_its_way_is_told_which_nodes_were_not_counted() -> None:
    full = running("full", ("n01", [0, 1]))
    res = cycle(ts_and_mps(), [share("d", "desktops")], [full], queues=[DESKTOPS])
    assert start_of(res, "d") is None
    r = res.reasons["d"]
    assert r.code is not ReasonCode.NEVER, r
    assert r.message.endswith(
        "; queue policy: its shares run only where GPUs are shared by mps (the queue's "
        "gpu_sharing), so 1 node(s) that share another way are not counted"
    ), r.message


def test_a_share_with_no_node_of_its_way_is_never_schedulable_and_says_why() -> None:
    res = cycle(cluster(2, 2, model="L40S"), [share("d", "desktops")], [], queues=[DESKTOPS])
    assert start_of(res, "d") is None
    r = res.reasons["d"]
    assert r.code is ReasonCode.NEVER
    assert r.message == (
        "holds a share of a GPU, and the policy of queue desktops lets its shares run only where "
        "GPUs are shared by mps (its gpu_sharing); none of the cluster's 2 GPU node(s) is "
        "(they share by timeslice)"
    )
    assert r.data["gpu_sharing"] == ["mps"]


def test_with_the_nodes_of_its_way_drained_a_share_is_not_told_of_an_x_it_never_gave() -> None:
    nodes = ts_and_mps()
    nodes[1] = replace(nodes[1], schedulable=False)
    res = cycle(nodes, [share("d", "desktops")], [], queues=[DESKTOPS])
    msg = res.reasons["d"].message
    assert msg == (
        "the policy of queue desktops lets its shares run only where GPUs are shared by mps "
        "(its gpu_sharing), and no schedulable node is; 1 node(s) that share another way are "
        "not counted"
    ), msg


POOL = {"count": 1, "gpu_model": "L40S", "gpus": 1, "cpu_cores": 8, "memory_gib": 64}


def test_the_cluster_spec_and_the_store_carry_a_queues_ways() -> None:
    queues = [{"name": "desktops", "gpu_sharing": ["mps"]}, {"name": "lab"}]
    cs = ClusterSpec.from_dict({"pools": [{"name": "p", **POOL}], "queues": queues})
    assert [q.gpu_sharing for q in cs.queues] == [("mps",), ()]
    for q in (DESKTOPS, QueueSpec("r", gpu_sharing=("timeslice", "mps")), QueueSpec("lab")):
        assert queue_from_dict(queue_to_dict(q)) == q
    bad = {"pools": [{"name": "p", **POOL}], "queues": [{"name": "d", "gpu_sharing": ["mig"]}]}
    with pytest.raises(SpecError, match=r"gpu_sharing: must be some of timeslice, mps, got 'mig'"):
        ClusterSpec.from_dict(bad)


def test_the_agents_modes_are_the_ones_a_queue_may_name() -> None:
    from gpufleet.agent.sharing import MODES

    assert MODES == SHARING_MODES


@pytest.mark.parametrize(("policy", "expect"), [((), 1.0), (("mps",), 100.0)])
def test_the_simulator_replays_a_queues_ways(policy: tuple[str, ...], expect: float) -> None:
    """The MPS node is busy until 100 s; the time-sliced one is free: a desktops share waits
    for the MPS node under the policy, and starts at once without it."""
    from gpufleet.sim.engine import Simulation, TraceJob

    pools = [
        {"name": "ts", **POOL},
        {"name": "mps", **POOL, "labels": {SHARING_LABEL: "mps"}},
    ]
    q = {"name": "desktops", **({"gpu_sharing": list(policy)} if policy else {})}
    cs = ClusterSpec.from_dict({"pools": pools, "queues": [q]})
    train = replace(spec("train", gpus=1), nodelist=("mps-000",))
    jobs = [
        TraceJob("train", train, 0.0, 100.0),
        TraceJob("d", spec("d", gpus=1, milli=250, queue="desktops"), 1.0, 10.0),
    ]
    sim = Simulation(cs, profile(backfill="none"), jobs)
    sim.run(until=1000.0)
    assert sim.outcomes["d"].first_start == expect


def test_preemption_for_a_share_stops_only_jobs_on_nodes_of_its_way() -> None:
    """Both nodes are full of low-priority work; the ts node's victim would lose less (it
    started later), but the desktops share may only run on the MPS node."""
    busy = [
        running("on_ts", ("n00", [0, 1]), start=90.0),
        running("on_mps", ("n01", [0, 1]), start=0.0),
    ]
    hi = pjob("hi", {"queue": "desktops", "priority": 5}, gpus=1, milli=250)
    res = cycle(ts_and_mps(), [hi], busy, queues=[DESKTOPS], now=100.0, preempt=["priority"])
    assert [p.job_id for p in res.preemptions] == ["on_mps"]
    other = pjob("hi", {"priority": 5}, gpus=1, milli=250)  # the same, of another queue
    res = cycle(ts_and_mps(), [other], busy, queues=[DESKTOPS], now=100.0, preempt=["priority"])
    assert [p.job_id for p in res.preemptions] == ["on_ts"]  # without the policy: least lost
