"""Step 2, admission: per-queue quotas (GPUs, CPU, memory), borrowing inside a cohort."""

from __future__ import annotations

import pytest
from builders import (
    RESERVE,
    cluster,
    cycle,
    job,
    profile,
    queue,
    running,
    snapshot,
    start_of,
)

from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.framework import ProfileError, make
from gpufleet.scheduler.usage import QueueUsage


def eight_gpu_jobs(q: str, n: int, node0: int = 0) -> list:
    return [running(f"{q}{i}", (f"n{node0 + i:02d}", range(8)), queue=q) for i in range(n)]


def test_a_job_within_nominal_quota_starts_and_is_not_borrowing() -> None:
    res = cycle(cluster(4, 8), [job("j", gpus=8, workers=2, queue="a")], queues=[queue("a", 16)])
    (s,) = res.starts
    assert s.job_id == "j" and not s.borrowing


def test_quota_counts_running_jobs_and_jobs_admitted_earlier_in_the_cycle() -> None:
    pending = [job(f"j{i}", gpus=4, queue="a", submit=i) for i in range(5)]
    res = cycle(cluster(4, 8), pending, queues=[queue("a", 12)])
    assert res.started_ids == ["j0", "j1", "j2"]
    res = cycle(cluster(4, 8), pending, eight_gpu_jobs("a", 1, node0=3), queues=[queue("a", 12)])
    assert res.started_ids == ["j0"]


def test_refused_by_quota_with_a_reason_that_reads_like_the_issue() -> None:
    nodes = cluster(10, 8)
    res = cycle(
        nodes,
        [job("more", gpus=8, queue="vision")],
        eight_gpu_jobs("vision", 8),
        queues=[queue("vision", 64)],
    )
    assert start_of(res, "more") is None
    r = res.reasons["more"]
    assert r.code is ReasonCode.QUOTA
    assert r.message.startswith("queue vision uses 64 of 64 GPUs")
    assert "needs 8 more" in r.message and "cannot borrow" in r.message
    # the 16 GPUs no quota covers are lent in cohorts only: a lone queue's quota stays a cap
    assert "the 16 GPUs outside every quota are lent only in cohorts" in r.message
    assert r.data == {
        "queue": "vision",
        "used_gpus": 64,
        "quota_gpus": 64,
        "needed_gpus": 8,
        "borrowable_gpus": 0,
        "cohort_idle_gpus": 0,
        "cohort_lent_gpus": 0,
        "unassigned_gpus": 16,
        "unassigned_free_gpus": 0,
        "unassigned": "lend",
    }


def test_a_queue_without_quota_is_unlimited() -> None:
    nodes = cluster(8, 8)
    big = job("big", gpus=8, workers=8, queue="free")
    # no QueueSpec at all, or one without a quota
    for queues in ([], [queue("free")]):
        res = cycle(nodes, [big], queues=queues)
        assert start_of(res, "big") is not None
        assert not res.starts[0].borrowing
    assert not queue("free").limited and queue("free", 1).limited


def test_quota_on_cpu_and_memory_too() -> None:
    nodes = cluster(2, 8)
    cpu = cycle(nodes, [job("j", cpus=12, queue="a")], queues=[queue("a", cpus=10)])
    mem = cycle(nodes, [job("j", mem_gib=24, queue="a")], queues=[queue("a", mem_gib=16)])
    for res in (cpu, mem):
        assert start_of(res, "j") is None
        assert res.reasons["j"].code in (ReasonCode.QUOTA, ReasonCode.NEVER)
    ok = cycle(
        nodes, [job("j", cpus=8, mem_gib=8, queue="a")], queues=[queue("a", 1, cpus=8, mem_gib=8)]
    )
    assert start_of(ok, "j") is not None


def test_cpu_over_quota_is_named_in_the_reason() -> None:
    """The queue has GPUs to spare but not CPUs: the reason must say CPUs, not GPUs."""
    nodes = cluster(2, 8)
    held = [running("r", ("n00", [0]), cpus=8, queue="a")]
    res = cycle(nodes, [job("j", cpus=4, queue="a")], held, queues=[queue("a", 8, cpus=10)])
    r = res.reasons["j"]
    assert r.code is ReasonCode.QUOTA
    assert "CPUs (12 > 10)" in r.message


def test_borrowing_idle_quota_within_the_cohort() -> None:
    qs = [queue("a", 8, cohort="research"), queue("b", 16, cohort="research")]
    res = cycle(cluster(4, 8), [job("j", gpus=8, workers=2, queue="a")], queues=qs)
    (s,) = res.starts
    assert s.job_id == "j" and s.borrowing


def test_borrowing_is_limited_to_what_the_cohort_has_idle() -> None:
    qs = [queue("a", 8, cohort="research"), queue("b", 16, cohort="research")]
    b_busy = eight_gpu_jobs("b", 1, node0=3)  # b uses 8 of 16: 8 idle to lend
    res = cycle(
        cluster(6, 8), [job("j", gpus=8, workers=3, queue="a")], b_busy, queues=qs, options=RESERVE
    )
    r = res.reasons["j"]
    assert r.code is ReasonCode.QUOTA
    assert "its cohort research has 8 idle GPUs to lend" in r.message
    assert r.data["borrowable_gpus"] == 8
    res = cycle(
        cluster(6, 8), [job("j", gpus=8, workers=2, queue="a")], b_busy, queues=qs, options=RESERVE
    )
    assert res.starts[0].borrowing


def test_can_borrow_false_is_respected() -> None:
    qs = [queue("a", 8, cohort="c", can_borrow=False), queue("b", 16, cohort="c")]
    pending = [job("j1", gpus=8, queue="a"), job("j2", gpus=8, queue="a", submit=1)]
    res = cycle(cluster(4, 8), pending, queues=qs)
    assert res.started_ids == ["j1"]
    r = res.reasons["j2"]
    assert r.code is ReasonCode.QUOTA and "it may not borrow" in r.message


def test_can_lend_false_is_respected() -> None:
    qs = [queue("a", 8, cohort="c"), queue("b", 16, cohort="c", can_lend=False)]
    pending = [job("j1", gpus=8, queue="a"), job("j2", gpus=8, queue="a", submit=1)]
    res = cycle(cluster(4, 8), pending, queues=qs, options=RESERVE)
    assert res.started_ids == ["j1"]
    r = res.reasons["j2"]
    assert r.code is ReasonCode.QUOTA and "0 idle GPUs to lend" in r.message
    assert "the 8 GPUs outside every quota are kept for queues without a quota" in r.message


def test_queues_of_another_cohort_do_not_lend() -> None:
    qs = [queue("a", 8, cohort="c1"), queue("b", 64, cohort="c2")]
    res = cycle(cluster(4, 8), [job("j", gpus=8, workers=2, queue="a")], queues=qs)
    assert start_of(res, "j") is None


def test_a_job_larger_than_quota_plus_all_lendable_is_never_schedulable() -> None:
    qs = [queue("a", 8, cohort="c"), queue("b", 16, cohort="c")]
    res = cycle(cluster(8, 8), [job("j", gpus=8, workers=4, queue="a")], queues=qs, options=RESERVE)
    r = res.reasons["j"]
    assert r.code is ReasonCode.NEVER
    assert "can never hold more than 24" in r.message
    assert r.data["ceiling_gpus"] == 24 and r.data["needed_gpus"] == 32


def test_idle_quota_is_not_lent_twice() -> None:
    """Cohort of three 8-GPU queues (24 in all). Queue a already borrows c's 8 idle GPUs;
    b may not borrow them again: the cohort would hold 32 GPUs on a nominal 24."""
    qs = [queue(q, 8, cohort="c") for q in "abc"]
    a_busy = [
        running("a1", ("n00", range(8)), queue="a"),
        running("a2", ("n01", range(8)), queue="a", borrowing=True),
    ]
    res = cycle(
        cluster(6, 8),
        [job("b1", gpus=8, workers=2, queue="b")],
        a_busy,
        queues=qs,
        options=RESERVE,
    )
    assert start_of(res, "b1") is None
    assert res.reasons["b1"].code is ReasonCode.QUOTA
    # nor inside one cycle
    res = cycle(
        cluster(6, 8),
        [job("a1", gpus=8, workers=2, queue="a"), job("b1", gpus=8, workers=2, queue="b")],
        queues=qs,
        options=RESERVE,
    )
    assert res.started_ids == ["a1"]


def demo_cluster_full() -> tuple[list, list]:
    """The issue's demo: vision (16) and nlp (16) share cohort research on 4 × 8 GPUs; vision
    runs 24 GPUs (8 borrowed from nlp's idle quota), nlp runs 8: every GPU is allocated."""
    qs = [queue("vision", 16, cohort="research"), queue("nlp", 16, cohort="research")]
    busy = eight_gpu_jobs("vision", 3)
    busy[2] = running("v2", ("n02", range(8)), queue="vision", borrowing=True)
    busy.append(running("n0", ("n03", range(8)), queue="nlp"))
    return qs, busy


def test_idle_quota_already_lent_is_not_offered_again() -> None:
    qs, busy = demo_cluster_full()
    res = cycle(cluster(4, 8), [job("j", gpus=8, queue="vision")], busy, queues=qs)
    r = res.reasons["j"]
    assert r.code is ReasonCode.QUOTA
    assert r.message == (
        "queue vision uses 24 of 16 GPUs and the job needs 8 more; its cohort research has "
        "0 idle GPUs to lend (8 more are lent already)"
    )
    assert r.data["borrowable_gpus"] == 0 and r.data["cohort_lent_gpus"] == 8


def test_capacity_outside_every_quota_is_lent_to_cohort_members() -> None:
    """A fifth node no quota covers: the demo's pending job borrows it instead of waiting
    beside 8 idle GPUs."""
    qs, busy = demo_cluster_full()
    res = cycle(cluster(5, 8), [job("j", gpus=8, queue="vision")], busy, queues=qs)
    (s,) = res.starts
    assert s.job_id == "j" and s.borrowing and s.allocation[0].node == "n04"
    # nlp takes its own idle quota back: vision's 8 borrowed GPUs now count against the
    # unassigned capacity, so no loan is left for j (borrowers go after jobs within quota)
    res = cycle(
        cluster(5, 8),
        [job("j", gpus=8, queue="vision"), job("k", gpus=8, queue="nlp", submit=1)],
        busy,
        queues=qs,
    )
    assert res.started_ids == ["k"]
    r = res.reasons["j"]
    assert r.code is ReasonCode.QUOTA
    assert "0 of the 8 GPUs outside every quota are free to lend" in r.message
    assert r.data["unassigned_gpus"] == 8 and r.data["unassigned_free_gpus"] == 0


def test_unassigned_capacity_can_be_reserved_and_the_reason_says_so() -> None:
    qs, busy = demo_cluster_full()
    res = cycle(cluster(5, 8), [job("j", gpus=8, queue="vision")], busy, queues=qs, options=RESERVE)
    assert res.starts == []
    r = res.reasons["j"]
    assert "the 8 GPUs outside every quota are kept for queues without a quota" in r.message
    assert r.data["unassigned"] == "reserve" and r.data["borrowable_gpus"] == 0


def test_queues_without_quota_use_the_unassigned_capacity_first_come() -> None:
    """What a queue without a quota runs is taken from the unassigned capacity."""
    qs, busy = demo_cluster_full()
    busy.append(running("free0", ("n04", range(8)), queue="free"))
    res = cycle(cluster(5, 8), [job("j", gpus=8, queue="vision")], busy, queues=qs)
    assert res.starts == []
    assert res.reasons["j"].data["unassigned_free_gpus"] == 0


def test_unknown_unassigned_option_is_refused() -> None:
    with pytest.raises(ProfileError, match="unassigned must be"):
        profile(options={"admit/quota": {"unassigned": "share"}})


def test_quota_plugin_directly() -> None:
    plugin = make("admit", "quota")
    snap = snapshot(cluster(2, 8), queues=[queue("a", 4, cohort="c"), queue("b", 4, cohort="c")])
    usage = QueueUsage.of(snap)
    inside = plugin.admit(job("x", gpus=4, queue="a"), usage)
    assert inside.status.ok and inside.within_nominal and not inside.borrowing
    over = plugin.admit(job("x", gpus=6, queue="a"), usage)
    assert over.status.ok and over.borrowing and not over.within_nominal
    assert usage.lendable("a").gpu_milli == 4000


def test_admit_none_admits_everything() -> None:
    res = cycle(cluster(2, 8), [job("j", gpus=8, queue="a")], queues=[queue("a", 1)], admit="none")
    assert start_of(res, "j") is not None


def test_never_schedulable_by_cpu_quota_names_the_cpus() -> None:
    res = cycle(cluster(2, 8), [job("j", cpus=20, queue="a")], queues=[queue("a", 16, cpus=10)])
    r = res.reasons["j"]
    assert r.code is ReasonCode.NEVER
    assert "CPU" in r.message


def test_plugins_that_say_so_admit_every_job_of_a_queue_without_quota() -> None:
    """``admits_unlimited`` lets the cycle skip the call for such jobs: it must be true."""
    from gpufleet.model.resources import Resources
    from gpufleet.scheduler.framework import ADMITTED
    from gpufleet.scheduler.usage import QueueUsage

    qs = {
        q.name: q
        for q in (queue("free"), queue("capped", 1, cohort="c"), queue("c2", 1, cohort="c"))
    }
    for name in ("quota", "none"):
        plugin = make("admit", name)
        assert plugin.admits_unlimited
        usage = QueueUsage(qs, (), Resources(64_000, 10**6, 10**6))
        usage.add("free", Resources(60_000, 1000, 1000))  # far over anything: no quota to hold it
        usage.add("capped", Resources(1000, 0, 0))
        assert "free" not in usage.limited and "capped" in usage.limited
        for q in ("free", "elsewhere"):  # a queue the snapshot does not list has no quota either
            assert plugin.admit(job("j", gpus=8, workers=4, queue=q), usage) is ADMITTED
