"""A job of several queues whose queues have node sets (Slurm's ``sbatch -p first,second`` with
partitions of disjoint ``Nodes=``; ADRs 0064, 0066 and 0073): it may run on the nodes of any of its
queues, is started as the job of the first that admits it and has room on its own nodes
(placed there only, charged there), and while none has room it waits, told Slurm's
Resources, for a node of any of them."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, cycle, job, queue, running, start_of

from gpufleet.model.queue import QueueSpec
from gpufleet.model.reason import ReasonCode
from gpufleet.model.replicas import SHARING_LABEL
from gpufleet.scheduler.snapshot import PendingJob

FIRST = QueueSpec("first", nodes=(("pool", "a"),))
SECOND = QueueSpec("second", nodes=(("pool", "b"),))


def pools() -> list:
    """n00 and n01 are pool a's (queue first's nodes), n02 and n03 pool b's (2 GPUs each)."""
    return [
        replace(n, labels=(("pool", "a" if i < 2 else "b"),)) for i, n in enumerate(cluster(4, 2))
    ]


def multi(id: str, queues: tuple[str, ...] = ("first", "second"), **kw: object) -> PendingJob:
    p = job(id, queue=queues[0], **kw)  # type: ignore[arg-type]
    return replace(p, spec=replace(p.spec, queues=queues))


def busy(*nodes: str) -> list:
    return [running(f"on-{n}", (n, [0, 1]), queue="other") for n in nodes]


def test_with_its_first_queues_nodes_busy_it_starts_on_the_seconds_in_the_second() -> None:
    res = cycle(pools(), [multi("j", gpus=2)], busy("n00", "n01"), queues=[FIRST, SECOND])
    (s,) = res.starts
    assert s.queue == "second"
    assert [p.node for p in s.allocation] in (["n02"], ["n03"])
    # the same job of the first queue alone waits: the second's nodes are not its
    alone = multi("k", ("first",), gpus=2)
    assert (
        start_of(cycle(pools(), [alone], busy("n00", "n01"), queues=[FIRST, SECOND]), "k") is None
    )


def test_with_room_in_both_it_starts_in_the_first_on_the_firsts_nodes_only() -> None:
    # bestfit prefers the half-used n02 (the second's); the first has room, so its node
    half = [running("half", ("n02", [0]), queue="other")]
    res = cycle(pools(), [multi("j", gpus=1)], half, queues=[FIRST, SECOND])
    (s,) = res.starts
    assert s.queue == "first" and s.allocation[0].node in ("n00", "n01")
    # listed the other way round: the second, on its nodes
    res = cycle(pools(), [multi("j", ("second", "first"), gpus=1)], half, queues=[FIRST, SECOND])
    (s,) = res.starts
    assert s.queue == "second" and s.allocation[0].node in ("n02", "n03")


def test_a_gang_never_spans_two_queues_node_sets() -> None:
    # one node free in each set: a 2-node gang fits in neither queue, so it waits
    res = cycle(
        pools(), [multi("g", gpus=2, workers=2)], busy("n00", "n02"), queues=[FIRST, SECOND]
    )
    assert res.starts == []
    assert res.reasons["g"].code is ReasonCode.RESOURCES


def test_it_is_charged_to_the_queue_it_starts_in_for_the_rest_of_the_cycle() -> None:
    # second's quota is 2 GPUs: j (first's nodes full) takes them, so k, of second alone, is
    # held by second's quota
    qs = [
        replace(queue("first", 8), nodes=FIRST.nodes),
        replace(queue("second", 2), nodes=SECOND.nodes),
    ]
    pending = [multi("j", gpus=2, submit=0), job("k", gpus=2, queue="second", submit=1)]
    res = cycle(pools(), pending, busy("n00", "n01"), queues=qs)
    assert [(s.job_id, s.queue) for s in res.starts] == [("j", "second")]
    assert res.reasons["k"].code is ReasonCode.QUOTA


def test_waiting_for_any_of_its_queues_nodes_it_is_told_resources_and_both_sets() -> None:
    # a third pool's nodes, n04 and n05, are free but neither queue's
    c = [replace(n, labels=(("pool", "c"),)) for n in cluster(6, 2)[4:]]
    full = busy("n00", "n01", "n02", "n03")
    res = cycle([*pools(), *c], [multi("j", gpus=2)], full, queues=[FIRST, SECOND])
    assert res.starts == []
    r = res.reasons["j"]
    assert r.code is ReasonCode.RESOURCES, r
    assert r.message.endswith(
        "; its queues run it only on their nodes (queue first: nodes labelled pool=a; queue "
        "second: nodes labelled pool=b), so 2 node(s) outside them all are not counted"
    ), r.message
    # with the sets covering every node, nothing is left out to be told of
    res = cycle(pools(), [multi("j", gpus=2)], full, queues=[FIRST, SECOND])
    assert res.reasons["j"].message == "needs 2 GPUs (2 GPUs); 0 free now"


def test_one_that_fits_only_the_second_queues_nodes_waits_for_them_not_never() -> None:
    # the first's nodes have 2 GPUs, the second's 4: a 4-GPU job fits only the second's
    nodes = [replace(n, gpu_free=(1000,) * 4) if n.name >= "n02" else n for n in pools()]
    full = [running(f"on-{n}", (n, range(4)), queue="other") for n in ("n02", "n03")]
    res = cycle(nodes, [multi("j", gpus=4)], full, queues=[FIRST, SECOND])
    assert res.starts == []
    assert res.reasons["j"].code is ReasonCode.RESOURCES, res.reasons["j"]
    res = cycle(nodes, [multi("j", gpus=4)], full[:1], queues=[FIRST, SECOND])
    (s,) = res.starts
    assert (s.queue, s.allocation[0].node) == ("second", "n03")


def test_a_queue_with_no_node_is_passed_over_and_never_only_when_none_has_one() -> None:
    empty = QueueSpec("first", nodes=(("pool", "z"),))
    res = cycle(pools(), [multi("j", gpus=1)], busy("n00", "n01"), queues=[empty, SECOND])
    (s,) = res.starts
    assert s.queue == "second"
    res = cycle(pools(), [multi("j", gpus=1)], busy("n02", "n03"), queues=[empty, SECOND])
    assert res.reasons["j"].code is ReasonCode.RESOURCES
    none = QueueSpec("second", nodes=(("pool", "y"),))
    res = cycle(pools(), [multi("j", gpus=1)], [], queues=[empty, none])
    r = res.reasons["j"]
    assert r.code is ReasonCode.NEVER
    assert r.message.startswith("none of its queues (first, second) admits it: first: queue first")


def test_it_borrows_in_the_second_when_the_first_admits_it_but_has_no_room() -> None:
    # first admits it within its quota, but its nodes are full; second is at its own quota and
    # may borrow its cohort's idle quota: it starts there, borrowing, on the second's nodes
    qs = [
        replace(queue("first", 8), nodes=FIRST.nodes),
        replace(queue("second", 2, cohort="k"), nodes=SECOND.nodes),
        queue("lender", 8, cohort="k"),
    ]
    run = [*busy("n00", "n01"), running("s0", ("n02", [0, 1]), queue="second")]
    res = cycle(pools(), [multi("j", gpus=2)], run, queues=qs)
    (s,) = res.starts
    assert (s.queue, s.borrowing, s.allocation[0].node) == ("second", True, "n03")


def test_a_share_held_by_its_first_queues_sharing_policy_starts_in_the_second() -> None:
    """ADR 0064 per queue: the first queue's shares run only on MPS GPUs (n01, full), the
    second has no policy: a share of both starts on the time-sliced n00, in the second."""
    ts, mps = cluster(2, 2, model="L40S")
    nodes = [ts, replace(mps, labels=((SHARING_LABEL, "mps"),))]
    qs = [QueueSpec("first", gpu_sharing=("mps",)), QueueSpec("second")]
    full = [running("full", ("n01", [0, 1]), queue="other")]
    res = cycle(nodes, [multi("j", gpus=1, milli=250)], full, queues=qs)
    (s,) = res.starts
    assert (s.queue, s.allocation[0].node, s.allocation[0].gpu_milli) == ("second", "n00", 250)
    alone = multi("k", ("first",), gpus=1, milli=250)
    assert start_of(cycle(nodes, [alone], full, queues=qs), "k") is None


def test_the_simulator_starts_it_in_the_queue_with_room() -> None:
    """The first queue's node is busy until 100 s: the job of both starts at once on the
    second's node, and is charged to the second."""
    from builders import profile, spec

    from gpufleet.model.cluster import ClusterSpec
    from gpufleet.sim.engine import Simulation, TraceJob

    pool = {"count": 1, "gpu_model": "L40S", "gpus": 1, "cpu_cores": 8, "memory_gib": 64}
    cs = ClusterSpec.from_dict(
        {
            "pools": [
                {"name": "a", **pool, "labels": {"pool": "a"}},
                {"name": "b", **pool, "labels": {"pool": "b"}},
            ],
            "queues": [
                {"name": "first", "nodes": {"pool": "a"}},
                {"name": "second", "nodes": {"pool": "b"}},
            ],
        }
    )
    both = replace(spec("j", gpus=1, queue="first"), queues=("first", "second"))
    jobs = [
        TraceJob("busy", spec("busy", gpus=1, queue="first"), 0.0, 100.0),
        TraceJob("j", both, 1.0, 10.0),
    ]
    sim = Simulation(cs, profile(backfill="none"), jobs)
    sim.run(until=1000.0)
    assert sim.outcomes["j"].first_start == 1.0
    rec = sim.controller.jobmaster.jobs["j"]
    assert (rec.job.spec.queue, rec.ran_on[1]) == ("second", ("b-000",))


def test_it_preempts_in_its_second_queue_when_the_firsts_nodes_hold_no_victim() -> None:
    # first's nodes: jobs it may not preempt (of its own priority); second's: lower ones it may
    high = [running(f"hi-{n}", (n, [0, 1]), queue="other", priority=5) for n in ("n00", "n01")]
    low = [running(f"lo-{n}", (n, [0, 1]), queue="other", priority=0) for n in ("n02", "n03")]
    pending = [multi("j", gpus=2, priority=5)]
    res = cycle(pools(), pending, [*high, *low], queues=[FIRST, SECOND], preempt=["priority"])
    assert [p.job_id for p in res.preemptions] in (["lo-n02"], ["lo-n03"])
    # of the first queue alone, it has no victim: it waits
    alone = [multi("k", ("first",), gpus=2, priority=5)]
    res = cycle(pools(), alone, [*high, *low], queues=[FIRST, SECOND], preempt=["priority"])
    assert res.preemptions == []
