"""Slurm's word for a waiting job (squeue's reason) from the cycle's walk
(scheduler/slurm_words.py): Resources for the first job of a queue that waits for capacity,
Priority for those behind it, Slurm's words of a partition whose nodes another's waiting jobs
hold for the first of another queue over the same nodes; gpufleet's own code and message kept.
What real Slurm printed in the same situations: tests/e2e/test_reasons_vs_slurm.py."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, cycle, job, node, queue, running

from gpufleet.io.slurm_style import pending_reason
from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.decisions import CycleResult
from gpufleet.scheduler.slurm_words import HIGHER_PARTITIONS

QUEUES = [queue("default"), queue("debug")]


def said(res: CycleResult, *ids: str) -> list[str]:
    return [pending_reason(res.reasons[i]) for i in ids]


def test_one_queue_full_the_first_waits_for_resources_and_the_rest_for_priority() -> None:
    busy = [running("r", ("n00", range(8)))]
    pending = [job("a", gpus=2), job("b", gpus=1, submit=1), job("c", gpus=8, submit=2)]
    res = cycle(cluster(1, 8), [*pending, job("cpu", gpus=0, submit=3)], busy, now=5.0)
    assert said(res, "a", "b", "c") == ["Resources", "Priority", "Priority"]
    # gpufleet's own reason is kept: the code, and the message that says what it needs
    b = res.reasons["b"]
    assert b.code is ReasonCode.RESOURCES and b.message == "needs 1 GPU (1 GPU); 0 free now"
    assert b.slurm == "Priority" and res.reasons["a"].slurm == ""


def test_a_job_behind_the_reservation_is_told_priority_and_one_that_fits_starts() -> None:
    busy = [running("r", ("n00", range(6)), limit=100.0)]
    pending = [
        job("head", gpus=8),
        job("short", gpus=1, submit=1, limit=50.0),
        job("long", gpus=1, submit=2, limit=500.0),
    ]
    res = cycle(cluster(1, 8), pending, busy, now=10.0, backfill="easy")
    assert res.started_ids == ["short"]
    assert res.reasons["long"].code is ReasonCode.RESERVED
    assert said(res, "head", "long") == ["Resources", "Priority"]


def test_the_first_of_another_queue_over_the_same_nodes_is_told_they_are_held() -> None:
    busy = [running("r", ("n00", range(8)), queue="default")]
    pending = [
        job("a", gpus=2),
        job("d1", gpus=1, submit=1, queue="debug"),
        job("a2", gpus=1, submit=2),
        job("d2", gpus=1, submit=3, queue="debug"),
    ]
    res = cycle(cluster(1, 8), pending, busy, queues=QUEUES)
    assert said(res, "a", "d1", "a2", "d2") == [
        "Resources",
        HIGHER_PARTITIONS,
        "Priority",
        "Priority",
    ]


def test_queues_over_nodes_of_their_own_wait_each_for_its_own_resources() -> None:
    nodes = [node("n00", labels={"pool": "a"}), node("n01", labels={"pool": "b"})]
    qa = replace(queue("qa"), nodes=(("pool", "a"),))
    qb = replace(queue("qb"), nodes=(("pool", "b"),))
    busy = [
        running("ra", ("n00", range(8)), queue="qa"),
        running("rb", ("n01", range(8)), queue="qb"),
    ]
    pending = [
        job("a1", gpus=1, queue="qa"),
        job("b1", gpus=1, submit=1, queue="qb"),
        job("a2", gpus=1, submit=2, queue="qa"),
    ]
    res = cycle(nodes, pending, busy, queues=[qa, qb])
    assert said(res, "a1", "b1", "a2") == ["Resources", "Resources", "Priority"]


def test_the_pending_tasks_of_an_array_share_its_word() -> None:
    busy = [running("r", ("n00", range(8)))]
    tasks = [replace(job(f"7_{i}", gpus=2, submit=i), array="7") for i in range(1, 4)]
    res = cycle(cluster(1, 8), [*tasks, job("p", gpus=1, submit=9)], busy)
    assert said(res, "7_1", "7_2", "7_3", "p") == ["Resources"] * 3 + ["Priority"]


def test_the_jobs_never_reached_are_told_so_whatever_order_they_are_read_in() -> None:
    """A full cluster of whole-GPU jobs ends the walk at its first waiting job: the others'
    words are worked out when asked for, the same in any order."""
    busy = [running("r", ("n00", range(8)))]
    pending = [
        job("a", gpus=8),
        job("b", gpus=1, submit=1),
        job("d1", gpus=1, submit=2, queue="debug"),
        job("d2", gpus=2, submit=3, queue="debug"),
    ]
    want = ["Resources", "Priority", HIGHER_PARTITIONS, "Priority"]
    for order in (["a", "b", "d1", "d2"], ["d2", "d1", "b", "a"]):
        res = cycle(cluster(1, 8), pending, busy, queues=QUEUES)
        assert res.examined == 1
        got = dict(zip(order, said(res, *order), strict=True))
        assert [got[i] for i in ("a", "b", "d1", "d2")] == want
    assert res.reasons["b"].code is ReasonCode.PRIORITY


def test_behind_the_head_of_a_profile_without_backfill_is_priority() -> None:
    pending = [job("big", gpus=8), job("small", gpus=1, submit=1)]
    res = cycle(cluster(1, 8), pending, [running("r", ("n00", [0]))], backfill="none")
    assert res.reasons["small"].code is ReasonCode.HELD
    assert said(res, "big", "small") == ["Resources", "Priority"]


def test_a_topology_or_model_wait_at_the_head_is_slurms_resources() -> None:
    nodes = [node("n00", model="A100-80GB"), node("n01", model="H100-SXM")]
    busy = [running("r", ("n00", range(6)))]
    res = cycle(nodes, [job("j", gpus=4, models=["A100-80GB"])], busy)
    assert res.reasons["j"].code is ReasonCode.GPU_MODEL
    assert said(res, "j") == ["Resources"]


def test_reasons_that_are_no_wait_for_capacity_keep_their_word() -> None:
    busy = [running("r", ("n00", range(8)))]
    pending = [job("dep", gpus=1, waiting_for="afterok:r"), job("a", gpus=1, submit=1)]
    res = cycle(cluster(1, 8), pending, busy)
    assert said(res, "dep", "a") == ["Dependency", "Resources"]
