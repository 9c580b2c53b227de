"""Defragmentation (issue 25): a gang that no leaf can hold because smaller preemptible jobs
are spread over the leaves frees ONE leaf, the fewest-loss one, within the policy's bounds;
never victims scattered over leaves."""

from __future__ import annotations

import pytest
from builders import cluster, cycle, job, running, snapshot, start_of

from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.defrag import DefragPolicy, free_one_leaf
from gpufleet.scheduler.framework import ProfileError

NOW = 100.0
LEAF_OF = {f"n{i:02d}": f"leaf-{i // 4}" for i in range(8)}


def scattered(starts: dict[str, float] | None = None, **kw: object):
    """8 nodes × 8 GPUs in 2 leaves (n00-n03, n04-n07); a 4-GPU job on half of every node, so
    32 GPUs are free and no node has 8. By default the cheapest two jobs to stop (least work
    since their start) lie in different leaves (n03, n04): stopping them frees no node whole
    in either leaf. Leaf-1's cheapest pair (n04, n05) loses less than leaf-0's (n03 + one)."""
    starts = starts or dict(zip(LEAF_OF, (0.0, 0.0, 0.0, 95.0, 90.0, 80.0, 0.0, 0.0), strict=True))
    return [running(f"s{n[1:]}", (n, range(4)), start=t, **kw) for n, t in starts.items()]


def gang(**kw: object):
    return job("g", gpus=8, workers=2, topology="leaf", required=True, **kw)


def victims(res) -> list[str]:
    return sorted(p.job_id for p in res.preemptions)


def test_a_gang_that_fits_only_after_freeing_one_leaf_frees_the_cheapest_leaf() -> None:
    busy = scattered()
    res = cycle(
        cluster(8, 8, leaves=2), [gang()], busy, now=NOW, place="topology", preempt=["defrag"]
    )
    assert victims(res) == ["s04", "s05"]  # leaf-1: 40 + 80 GPU-s; leaf-0's best pair: 20 + 400
    r = res.reasons["g"]
    assert r.code is ReasonCode.DEFRAG
    assert r.message == "moving 2 jobs to free 2 nodes under leaf-1"
    assert r.data["leaf"] == "leaf-1" and r.data["nodes"] == ["n04", "n05"]
    assert all("moving 2 jobs" in p.reason and p.for_job == "g" for p in res.preemptions)
    assert start_of(res, "g") is None  # it starts once its victims have stopped


def test_the_plain_cheapest_first_choice_would_scatter_where_defrag_does_not() -> None:
    """The two cheapest jobs overall are s03 (leaf-0) and s04 (leaf-1): freeing them leaves no
    node whole. The choice takes victims in one leaf only, and they make the gang fit there."""
    busy = scattered()
    snap = snapshot(cluster(8, 8, leaves=2), [gang()], busy, now=NOW)
    cheapest = sorted(busy, key=lambda v: v.lost_work(NOW))[:2]
    assert {LEAF_OF[v.allocation[0].node] for v in cheapest} == {"leaf-0", "leaf-1"}
    plan = free_one_leaf(gang().spec, busy, snap.nodes, NOW, DefragPolicy())
    assert plan is not None
    assert {LEAF_OF[p.node] for v in plan.victims for p in v.allocation} == {plan.leaf}
    freed = {p.node for v in plan.victims for p in v.allocation}
    assert len(freed) == 2  # two nodes of the leaf whole again: the gang's 2 × 8 GPUs


def test_no_victims_at_all_when_no_single_leaf_can_be_freed() -> None:
    """Every leaf keeps one non-preemptible job on each node but one: no leaf can hold two
    whole nodes, so nothing is stopped (stopping one job per leaf would not help)."""
    busy = scattered()
    pinned = {"s00", "s01", "s02", "s05", "s06", "s07"}
    busy = [
        running(
            v.id,
            (v.allocation[0].node, range(4)),
            start=v.start_time,
            preemptible=v.id not in pinned,
        )
        for v in busy
    ]
    res = cycle(
        cluster(8, 8, leaves=2), [gang()], busy, now=NOW, place="topology", preempt=["defrag"]
    )
    assert res.preemptions == []


def test_the_bound_on_lost_work_is_respected() -> None:
    busy = scattered()
    snap = snapshot(cluster(8, 8, leaves=2), [gang()], busy, now=NOW)
    # the cheapest leaf loses (100-90)*4 + (100-80)*4 = 120 GPU-s
    tight = DefragPolicy(max_lost_gpu_s=119)
    assert free_one_leaf(gang().spec, busy, snap.nodes, NOW, tight) is None
    plan = free_one_leaf(gang().spec, busy, snap.nodes, NOW, DefragPolicy(max_lost_gpu_s=120))
    assert plan is not None and plan.lost_gpu_s == 120.0
    res = cycle(
        cluster(8, 8, leaves=2),
        [gang()],
        busy,
        now=NOW,
        place="topology",
        preempt=["defrag"],
        options={"preempt/defrag": {"max_lost_gpu_s": 100}},
    )
    assert res.preemptions == []


def test_the_score_threshold_is_respected() -> None:
    """score = savings / (savings + disruption): 16 GPUs for 60 s = 960 GPU-s saved against
    120 GPU-s lost + 8 GPUs × 300 s restart = 2,520: 0.276."""
    busy = scattered()
    snap = snapshot(cluster(8, 8, leaves=2), [gang()], busy, now=NOW)
    short = DefragPolicy(savings_horizon_s=60.0)
    assert free_one_leaf(gang().spec, busy, snap.nodes, NOW, short) is None
    plan = free_one_leaf(
        gang().spec, busy, snap.nodes, NOW, DefragPolicy(savings_horizon_s=60.0, min_score=0.27)
    )
    assert plan is not None and plan.score == pytest.approx(960 / (960 + 2520))


def test_nothing_moves_when_a_leaf_already_holds_the_gang_or_it_is_small() -> None:
    busy = scattered()[:4]  # leaf-1 empty: the gang fits there (it would have been placed)
    snap = snapshot(cluster(8, 8, leaves=2), [gang()], busy, now=NOW)
    assert free_one_leaf(gang().spec, busy, snap.nodes, NOW, DefragPolicy()) is None
    small = job("x", gpus=8)  # one 8-GPU worker: below min_gang_gpus=16 here
    res = cycle(
        cluster(8, 8, leaves=2),
        [small],
        scattered(),
        now=NOW,
        place="topology",
        preempt=["defrag"],
        options={"preempt/defrag": {"min_gang_gpus": 16}},
    )
    assert res.preemptions == []


def test_jobs_already_stopping_count_as_gone_and_are_not_taken_again() -> None:
    from dataclasses import replace

    busy = scattered()
    busy = [replace(v, stopping_since=99.0) if v.id in ("s06", "s07") else v for v in busy]
    res = cycle(
        cluster(8, 8, leaves=2), [gang()], busy, now=NOW, place="topology", preempt=["defrag"]
    )
    assert res.preemptions == []  # n06, n07 are on their way to whole: no one else moves


def test_higher_priority_and_larger_jobs_are_never_moved() -> None:
    busy = scattered(priority=5)
    res = cycle(
        cluster(8, 8, leaves=2),
        [gang(priority=1)],
        busy,
        now=NOW,
        place="topology",
        preempt=["defrag"],
    )
    assert res.preemptions == []


def test_bad_policy_options_are_refused_all_at_once() -> None:
    with pytest.raises(ProfileError) as e:
        cycle(
            cluster(2, 8),
            [],
            [],
            preempt=["defrag"],
            options={"preempt/defrag": {"min_score": 2, "max_lost_gpu_s": -1}},
        )
    assert "min_score" in str(e.value) and "max_lost_gpu_s" in str(e.value)


def test_with_room_elsewhere_only_jobs_that_fit_outside_the_leaf_are_moved() -> None:
    """Leaf-0's free halves taken by non-preemptible jobs: s04, s05 (4 GPUs each) could go
    nowhere but back to leaf-1, so the policy (which moves only jobs with room elsewhere) moves
    none, unless told to move them anyway; with room on n00, n01 again, it moves them."""
    fillers = [running(f"f{i}", (f"n{i:02d}", range(4, 8)), preemptible=False) for i in range(4)]
    cands = scattered()  # the preemptible ones: the plugin's candidates
    snap = snapshot(cluster(8, 8, leaves=2), [gang()], cands + fillers, now=NOW)
    moving = DefragPolicy()  # room_elsewhere by default
    anywhere = DefragPolicy(room_elsewhere=False)
    assert free_one_leaf(gang().spec, cands, snap.nodes, NOW, anywhere) is not None
    assert free_one_leaf(gang().spec, cands, snap.nodes, NOW, moving) is None
    snap = snapshot(cluster(8, 8, leaves=2), [gang()], cands + fillers[2:], now=NOW)
    plan = free_one_leaf(gang().spec, cands, snap.nodes, NOW, moving)
    assert plan is not None and plan.leaf == "leaf-1"
