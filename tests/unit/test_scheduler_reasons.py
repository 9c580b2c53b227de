"""Step 6, explain: one test per ReasonCode the cycle emits, checking the code and the key
numbers of the message and data; every pending job gets a Reason."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster, cycle, job, node, queue, running

from gpufleet.model.reason import Reason, ReasonCode


def reason_of(res, job_id: str, code: ReasonCode) -> Reason:
    r = res.reasons[job_id]
    assert r.code is code, r
    return r


def test_quota() -> None:
    busy = [running(f"v{i}", (f"n{i:02d}", range(8)), queue="vision") for i in range(8)]
    qs = [queue("vision", 64, cohort="research"), queue("nlp", 16, cohort="research")]
    busy.append(running("nlp0", ("n08", range(8)), queue="nlp"))
    busy.append(running("nlp1", ("n09", range(8)), queue="nlp"))
    res = cycle(cluster(10, 8), [job("j", gpus=8, queue="vision")], busy, queues=qs)
    r = reason_of(res, "j", ReasonCode.QUOTA)
    assert r.message == (
        "queue vision uses 64 of 64 GPUs and the job needs 8 more; "
        "its cohort research has 0 idle GPUs to lend"
    )
    assert r.data["used_gpus"] == 64 and r.data["quota_gpus"] == 64
    assert r.data["borrowable_gpus"] == 0


def test_resources_not_enough_free() -> None:
    res = cycle(cluster(1, 8), [job("j", gpus=2)], [running("r", ("n00", range(7)))])
    r = reason_of(res, "j", ReasonCode.RESOURCES)
    assert r.message == "needs 2 GPUs (2 GPUs); 1 free now"
    assert r.data == {"needed_gpus": 2, "free_gpus": 1}


def test_resources_enough_free_but_not_on_one_node() -> None:
    busy = [running("r", ("n00", range(4))), running("s", ("n01", range(4)))]
    res = cycle(cluster(2, 8), [job("j", gpus=6)], busy)
    r = reason_of(res, "j", ReasonCode.RESOURCES)
    assert r.message == "needs 6 GPUs on one node; 8 GPUs are free but the freest node has 4"
    assert r.data["largest_free_block"] == 4


def test_resources_fractional() -> None:
    res = cycle(cluster(1, 2), [job("j", milli=600)], [running("r", ("n00", [0, 1]), milli=500)])
    r = reason_of(res, "j", ReasonCode.RESOURCES)
    assert "needs 0.6 GPU" in r.message and "no node has that free now" in r.message
    assert r.data["fractional"] is True


def test_topology() -> None:
    """The issue's own example: a 2 × 8 gang under one leaf, and each leaf has one free node."""
    busy = [running("r1", ("n01", range(8))), running("r3", ("n03", range(8)))]
    g = job("g", gpus=8, workers=2, topology="leaf", required=True)
    res = cycle(cluster(4, 8, leaves=2), [g], busy, place="topology")
    r = reason_of(res, "g", ReasonCode.TOPOLOGY)
    assert r.message == (
        "needs 2 × 8 GPUs under one leaf; the best leaf has 1 node with 8 GPUs free"
    )
    assert r.data["needed_gpus"] == 16 and r.data["free_gpus"] == 16
    assert r.data["best_domain_workers"] == 1


def test_topology_pod() -> None:
    nodes = cluster(8, 8, leaves=4, pods=2)
    busy = [running(f"r{i}", (f"n{i:02d}", range(8))) for i in (1, 3, 5, 7)]
    g = job("g", gpus=8, workers=3, topology="pod", required=True)
    res = cycle(nodes, [g], busy, place="topology")
    r = reason_of(res, "g", ReasonCode.TOPOLOGY)
    assert r.message == (
        "needs 3 × 8 GPUs under one pod; no pod has that free now (32 GPUs free in all)"
    )


def test_topology_pod_best_domain_counts_the_pod() -> None:
    nodes = cluster(8, 8, leaves=4, pods=2)
    busy = [running(f"r{i}", (f"n{i:02d}", range(8))) for i in (1, 3, 5, 7)]
    g = job("g", gpus=8, workers=3, topology="pod", required=True)
    res = cycle(nodes, [g], busy, place="topology")
    assert res.reasons["g"].data["best_domain_workers"] == 2


def test_gpu_model() -> None:
    nodes = [node("n00", model="A100-80GB"), node("n01", model="H100-SXM")]
    res = cycle(nodes, [job("j", gpus=4, models=["A100-80GB"])], [running("r", ("n00", range(6)))])
    r = reason_of(res, "j", ReasonCode.GPU_MODEL)
    assert r.message == "needs 4 GPUs of A100-80GB; 2 of the 10 free GPUs are A100-80GB"
    assert r.data == {"needed_gpus": 4, "free_gpus": 2}


def test_priority() -> None:
    """The cluster is full and the head waits: jobs behind it are not even examined."""
    pending = [job("a", gpus=8), job("b", gpus=8, submit=1), job("c", gpus=1, submit=2)]
    res = cycle(cluster(1, 8), pending, backfill="greedy")
    assert res.started_ids == ["a"]
    r = reason_of(res, "c", ReasonCode.PRIORITY)
    assert r.message.startswith("2 jobs ahead in fifo order were considered first")
    assert r.data == {"ahead": 2}


def test_priority_with_a_scheduling_depth() -> None:
    pending = [job(x, gpus=1, submit=i) for i, x in enumerate("abc")]
    res = cycle(cluster(1, 8), pending, max_depth=1)
    assert res.started_ids == ["a"] and res.examined == 1
    for jid in ("b", "c"):
        assert reason_of(res, jid, ReasonCode.PRIORITY).data == {"ahead": 1}


def test_reserved_and_the_reserved_job_carries_its_estimated_start() -> None:
    busy = [running("r", ("n00", range(6)), limit=100.0)]
    pending = [job("head", gpus=8), job("long", gpus=1, submit=1, limit=500.0)]
    res = cycle(cluster(1, 8), pending, busy, now=10.0, backfill="easy")
    r = reason_of(res, "long", ReasonCode.RESERVED)
    assert r.message == (
        "fits only on devices reserved for job head (it starts in 1m 30s) and would still be "
        "running then"
    )
    assert r.data == {"reserved_for": "head"}
    head = res.reasons["head"]
    assert head.estimated_start == 100.0
    assert head.message == "needs 8 GPUs (8 GPUs); 2 free now; reserved to start in 1m 30s"
    assert head.start_bound == "reserved"


def test_preempting() -> None:
    busy = [running("low1", ("n00", range(4)), start=0.0), running("low2", ("n00", range(4, 8)))]
    res = cycle(cluster(1, 8), [job("hi", gpus=8, priority=1)], busy, now=5.0, preempt=["priority"])
    r = reason_of(res, "hi", ReasonCode.PREEMPTING)
    assert r.message == "stopping 2 jobs (low1, low2) to make room"
    assert r.data == {"victims": ["low1", "low2"]}


def test_defragmenting() -> None:
    """A 2 x 8 gang under one leaf, each node of 2 leaves half taken by a 4-GPU job: defrag
    moves the later-started leaf's two jobs, and says so; in the next cycle, its victims still
    stopping, the gang (nominated) keeps saying it, with how many have stopped."""
    from dataclasses import replace

    from builders import profile, snapshot

    from gpufleet.scheduler.cycle import run_cycle
    from gpufleet.scheduler.snapshot import DefragMove

    busy = [
        running(f"s{i}", (f"n{i:02d}", range(4)), start=50.0 if i >= 2 else 0.0) for i in range(4)
    ]
    g = job("g", gpus=8, workers=2, topology="leaf", required=True)
    res = cycle(cluster(4, 8, leaves=2), [g], busy, now=60.0, place="topology", preempt=["defrag"])
    r = reason_of(res, "g", ReasonCode.DEFRAG)
    assert r.message == "moving 2 jobs to free 2 nodes under leaf-1"
    assert r.data["victims"] == ["s2", "s3"] and r.data["nodes"] == ["n02", "n03"]
    assert r.data["lost_gpu_s"] == 80.0
    move = DefragMove("leaf-1", 60.0, "g", ("s2", "s3"), r.message, r.data)
    # s2 has stopped (its GPUs are free); s3 is stopping
    stopping = [*busy[:2], replace(busy[3], stopping_since=60.0)]
    snap = replace(
        snapshot(cluster(4, 8, leaves=2), [replace(g, nominated=True)], stopping, now=61.0),
        defrag_moves={"leaf-1": move},
    )
    again = run_cycle(snap, profile(place="topology", preempt=["defrag"]))
    r = reason_of(again, "g", ReasonCode.DEFRAG)
    assert r.message == "moving 2 jobs to free 2 nodes under leaf-1: 1 of 2 stopped"
    assert r.data["stopping"] == ["s3"] and again.preemptions == []


def test_never_schedulable_too_many_gpus() -> None:
    res = cycle(cluster(2, 8), [job("j", gpus=8, workers=4)])
    r = reason_of(res, "j", ReasonCode.NEVER)
    assert r.message == "needs 32 GPUs (4 × 8 GPUs) of any model; the cluster has 16"
    assert r.data == {"needed_gpus": 32, "cluster_gpus": 16}


def test_never_schedulable_no_node_holds_one_worker() -> None:
    res = cycle(cluster(2, 8), [job("cpu", cpus=500), job("wide", gpus=9, submit=1)])
    assert reason_of(res, "cpu", ReasonCode.NEVER).message == (
        "no node can hold one worker (1 GPU, 500 CPUs, 4 GiB)"
    )
    assert "no node can hold one worker (9 GPUs" in reason_of(res, "wide", ReasonCode.NEVER).message


def test_never_schedulable_no_leaf_that_large() -> None:
    g = job("g", gpus=8, workers=3, topology="leaf", required=True)
    res = cycle(cluster(4, 8, leaves=2), [g])
    r = reason_of(res, "g", ReasonCode.NEVER)
    assert r.message == ("needs 3 × 8 GPUs under one leaf; no leaf of the cluster is that large")


def test_never_schedulable_beyond_the_queue_ceiling() -> None:
    qs = [queue("a", 8, cohort="c"), queue("b", 16, cohort="c")]
    res = cycle(cluster(3, 8), [job("j", gpus=8, workers=4, queue="a")], queues=qs)
    r = reason_of(res, "j", ReasonCode.NEVER)
    assert r.message == (
        "needs 32 GPUs but queue a can never hold more than 24 GPUs "
        "(its quota 8 plus all its cohort c could lend)"
    )
    # with capacity outside every quota, the ceiling counts it
    res = cycle(cluster(5, 8), [job("j", gpus=8, workers=6, queue="a")], queues=qs)
    r = reason_of(res, "j", ReasonCode.NEVER)
    assert r.message == (
        "needs 48 GPUs but queue a can never hold more than 40 GPUs "
        "(its quota 8 plus all its cohort c could lend plus the 16 GPUs outside every quota)"
    )


def test_a_job_in_back_off_that_its_queue_can_never_admit_says_so() -> None:
    """Its back-off ends, its queue's ceiling does not: NeverSchedulable, not BackOff (found
    by the property test: a BackOff job with no estimated start)."""
    qs = [queue("a", 8)]
    res = cycle(cluster(5, 8), [job("j", gpus=8, workers=2, queue="a", eligible=50.0)], queues=qs)
    r = reason_of(res, "j", ReasonCode.NEVER)
    assert r.message.startswith("needs 16 GPUs but queue a can never hold more than 8 GPUs")
    res = cycle(cluster(5, 8), [job("j", gpus=8, queue="a", eligible=50.0)], queues=qs)
    assert reason_of(res, "j", ReasonCode.BACKOFF).estimated_start == 50.0  # 8 GPUs: it can


def test_never_schedulable_even_when_quota_also_blocks() -> None:
    """A job the cluster can never hold says so, not merely that its queue is full."""
    busy = [running("a0", ("n00", range(8)), queue="a")]
    res = cycle(
        cluster(2, 8), [job("j", gpus=8, workers=3, queue="a")], busy, queues=[queue("a", 64)]
    )
    reason_of(res, "j", ReasonCode.NEVER)


def test_backoff() -> None:
    res = cycle(cluster(1, 8), [job("j", eligible=50.0)], now=10.0)
    r = reason_of(res, "j", ReasonCode.BACKOFF)
    assert r.message == "retry back-off for 40s more"
    assert r.data == {"until": 50.0}
    assert r.estimated_start == 50.0 and r.start_bound == "planned"  # free from then on
    assert res.started_ids == []
    assert cycle(cluster(1, 8), [job("j", eligible=50.0)], now=50.0).started_ids == ["j"]


def test_begin_time() -> None:
    """sbatch --begin=now+40: pending with Slurm's BeginTime until then, then started."""
    j = replace(job("j", eligible=50.0), spec=replace(job("j").spec, begin_time=50.0))
    res = cycle(cluster(1, 8), [j], now=10.0)
    r = reason_of(res, "j", ReasonCode.BEGIN_TIME)
    assert r.message == "not before its begin time (--begin), 40s from now"
    assert r.data == {"until": 50.0} and r.estimated_start == 50.0
    assert res.started_ids == []
    assert cycle(cluster(1, 8), [j], now=50.0).started_ids == ["j"]


def test_dependency() -> None:
    res = cycle(cluster(1, 8), [job("j", waiting_for="waiting for afterok:build")])
    r = reason_of(res, "j", ReasonCode.DEPENDENCY)
    assert r.message == "waiting for afterok:build"
    assert res.started_ids == []


def test_dependency_never_satisfied() -> None:
    """An afterok dependency that ended otherwise: the job waits until its user cancels it
    (Slurm's default), with Slurm's DependencyNeverSatisfied and no estimated start."""
    why = "dependency afterok:build ended FAILED: it can never be met"
    j = replace(job("j", waiting_for=why), never_met=True)
    res = cycle(cluster(1, 8), [j])
    r = reason_of(res, "j", ReasonCode.DEP_NEVER)
    assert r.message == why and str(r) == f"DependencyNeverSatisfied: {why}"
    assert r.estimated_start is None and r.start_bound == ""
    assert res.started_ids == []


@pytest.mark.parametrize(
    ("held", "code"), [("user", ReasonCode.HELD_USER), ("admin", ReasonCode.HELD_ADMIN)]
)
def test_job_held(held: str, code: ReasonCode) -> None:
    """A held job (sbatch -H, scontrol hold) on an idle cluster: never started, Slurm's
    JobHeldUser or JobHeldAdmin, no estimated start; a job behind it starts (ADR 0074)."""
    why = "held by its user: it starts once released (scontrol release)"
    j = replace(job("j", gpus=8, waiting_for=why), held=held)
    res = cycle(cluster(1, 8), [j, job("k", gpus=8, submit=1)])
    r = reason_of(res, "j", code)
    assert r.message == why and r.estimated_start is None and r.start_bound == ""
    assert res.started_ids == ["k"]


def test_array_limit() -> None:
    why = "array 7 runs at most 2 of its tasks at once (%2); this one starts when one ends"
    res = cycle(cluster(1, 8), [job("7_2", waiting_for=why, throttled=True)])
    r = reason_of(res, "7_2", ReasonCode.ARRAY_LIMIT)
    assert r.message == why
    assert res.started_ids == []


def test_held() -> None:
    busy = [running("r", ("n00", range(6)))]
    res = cycle(cluster(1, 8), [job("head", gpus=8), job("small", submit=1)], busy, backfill="none")
    r = reason_of(res, "small", ReasonCode.HELD)
    assert r.message == (
        "job head is first in order and cannot start; this profile does not backfill"
    )
    assert r.data == {"blocked_by": "head"}


def test_every_pending_job_gets_a_reason() -> None:
    busy = [running("r", ("n00", range(8)), limit=100.0)]
    pending = [job(f"j{i}", gpus=1 + i % 8, submit=i) for i in range(30)]
    res = cycle(cluster(2, 8), pending, busy, now=1.0)
    started = set(res.started_ids)
    for p in pending:
        assert (p.id in started) != (p.id in res.reasons), p.id
        if p.id in res.reasons:
            assert str(res.reasons[p.id]).startswith(res.reasons[p.id].code.value + ": ")


TEST_OF = {
    ReasonCode.QUOTA: "test_quota",
    ReasonCode.RESOURCES: "test_resources_not_enough_free",
    ReasonCode.TOPOLOGY: "test_topology",
    ReasonCode.GPU_MODEL: "test_gpu_model",
    ReasonCode.PRIORITY: "test_priority",
    ReasonCode.RESERVED: "test_reserved_and_the_reserved_job_carries_its_estimated_start",
    ReasonCode.PREEMPTING: "test_preempting",
    ReasonCode.DEFRAG: "test_defragmenting",
    ReasonCode.NEVER: "test_never_schedulable_too_many_gpus",
    ReasonCode.BACKOFF: "test_backoff",
    ReasonCode.BEGIN_TIME: "test_begin_time",
    ReasonCode.DEPENDENCY: "test_dependency",
    ReasonCode.DEP_NEVER: "test_dependency_never_satisfied",
    ReasonCode.ARRAY_LIMIT: "test_array_limit",
    ReasonCode.HELD_USER: "test_job_held",
    ReasonCode.HELD_ADMIN: "test_job_held",
    ReasonCode.HELD: "test_held",
}
# the advance reservations' codes, tested in test_scheduler_reservations.py
TEST_ELSEWHERE = {
    ReasonCode.RESV_MAINT: "test_a_job_whose_limit_crosses_the_window_keeps_off_its_nodes",
    ReasonCode.RESV_NODES: "test_a_reservation_that_is_not_maintenance_names_itself",
    ReasonCode.RESV_WAIT: "test_a_reservations_user_runs_inside_it_and_only_on_its_nodes",
}

# the elastic pools' code, given by the core after the cycle: tested in test_core_elastic.py
TEST_IN_CORE = {
    ReasonCode.GROWING: "test_a_job_only_new_nodes_hold_is_grown_for_in_the_same_cycle_and_starts_"
    "when_they_register",
}
# a running job's idle-GPU warning, given by the core's idle governor: in test_core_idle.py
TEST_OF_IDLE = {
    ReasonCode.IDLE: "test_a_warned_running_job_has_a_reason_that_says_the_warning_until_it_"
    "is_busy",
}


# the nodes' account answers' codes (ADR 0037), tested in test_scheduler_identity.py
TEST_OF_IDENTITY = {
    ReasonCode.NO_ACCOUNT: "test_a_job_whose_user_is_nowhere_is_held_with_a_reason_naming_user_"
    "and_nodes",
    ReasonCode.ACCOUNT_LOOKUP: "test_nodes_not_yet_answered_hold_the_job_with_the_lookup_reason",
}


def test_every_reason_code_has_a_test() -> None:
    import test_core_elastic as in_core
    import test_core_idle as idle
    import test_scheduler_identity as identity
    import test_scheduler_reservations as elsewhere

    tested = (set(TEST_OF) | set(TEST_ELSEWHERE) | set(TEST_IN_CORE) | set(TEST_OF_IDENTITY)) | set(
        TEST_OF_IDLE
    )
    assert tested == set(ReasonCode)
    assert all(callable(getattr(idle, name, None)) for name in TEST_OF_IDLE.values())
    assert all(callable(globals().get(name)) for name in TEST_OF.values())
    assert all(callable(getattr(elsewhere, name, None)) for name in TEST_ELSEWHERE.values())
    assert all(callable(getattr(in_core, name, None)) for name in TEST_IN_CORE.values())
    assert all(callable(getattr(identity, name, None)) for name in TEST_OF_IDENTITY.values())


def test_the_reasons_of_jobs_never_reached_are_the_same_whatever_order_they_are_read_in() -> None:
    """They are worked out when asked for (``Reasons.defer``): reading them forwards, backwards
    or all at once gives the same Reasons, the NeverSchedulable ones included."""
    busy = [running("r", ("n00", range(8)))]
    pending = [
        job(f"j{i}", gpus=(1, 2, 8, 4)[i % 4], workers=1 + 2 * (i % 4 == 2), submit=i)
        for i in range(40)
    ]
    ids = [p.id for p in pending]
    runs = [cycle(cluster(2, 8), pending, busy, place="random") for _ in range(3)]
    forward = {k: runs[0].reasons[k] for k in ids if k in runs[0].reasons}
    backward = {k: runs[1].reasons[k] for k in reversed(ids) if k in runs[1].reasons}
    assert forward == backward == dict(runs[2].reasons)
    assert len(runs[2].reasons) == len(ids) - len(runs[2].starts)
    codes = {r.code for r in forward.values()}
    assert ReasonCode.NEVER in codes and ReasonCode.PRIORITY in codes
    with pytest.raises(KeyError):
        runs[0].reasons[runs[0].started_ids[0]]  # a started job has no Reason
