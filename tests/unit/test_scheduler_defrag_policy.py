"""Defragmentation's policy bounds (issue 25, model/defrag.py): savings and disruption as
defined, the score a move must reach, how often a move may be made (per cluster, per leaf,
within one cycle too), and a queue's changes to the cluster's policy."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster, job, profile, running, snapshot

from gpufleet.model.defrag import DefragOverrides, DefragPolicy, parse_options
from gpufleet.model.errors import SpecError
from gpufleet.model.queue import QueueSpec
from gpufleet.model.reason import ReasonCode
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.defrag import disruption, free_one_leaf, savings, score
from gpufleet.scheduler.framework import ProfileError
from gpufleet.scheduler.snapshot import DefragMove

NOW = 100.0
# 8 nodes x 8 GPUs in 2 leaves (n00-n03, n04-n07), a 4-GPU job on half of every node; the
# cheapest leaf to free is leaf-1 (s04 started at 90, s05 at 80: 40 + 80 GPU-s lost)
STARTS = (0.0, 0.0, 0.0, 95.0, 90.0, 80.0, 0.0, 0.0)


def busy(limits: dict[str, float] | None = None) -> list:
    limits = limits or {}
    return [
        running(f"s{i:02d}", (f"n{i:02d}", range(4)), start=t, limit=limits.get(f"s{i:02d}"))
        for i, t in enumerate(STARTS)
    ]


def gang(**kw: object):
    return job("g", gpus=8, workers=2, topology="leaf", required=True, **kw)


def run(pending, jobs, *, moves=None, queues=(), options=None):
    snap = snapshot(cluster(8, 8, leaves=2), pending, jobs, queues=queues, now=NOW)
    if moves:
        made = {leaf: DefragMove(leaf, t, "earlier", (), "") for leaf, t in moves.items()}
        snap = replace(snap, defrag_moves=made)
    prof = profile(place="topology", preempt=["defrag"], options=options or {})
    return run_cycle(snap, prof)


def moved(res) -> list[str]:
    return sorted(p.job_id for p in res.preemptions)


# ----- savings, disruption, score ---------------------------------------------------------


def test_savings_is_the_gangs_gpus_for_its_expected_wait_capped_by_the_horizon() -> None:
    p = DefragPolicy(savings_horizon_s=3600.0)
    assert savings(16, 600.0, p) == 16 * 600.0
    assert savings(16, float("inf"), p) == 16 * 3600.0
    assert savings(16, -5.0, p) == 0.0


def test_disruption_is_the_work_since_each_checkpoint_plus_a_restart_per_gpu() -> None:
    jobs = busy()
    s04, s05 = jobs[4], jobs[5]
    p = DefragPolicy(restart_cost_s=300.0)
    # (100 - 90) x 4 + (100 - 80) x 4 lost; 300 s x 8 GPUs of restarts
    assert disruption([s04, s05], NOW, p) == 40 + 80 + 2400
    ckpt = replace(s05, checkpoint_time=95.0)  # saved at 95: only 5 s x 4 GPUs lost
    assert disruption([s04, ckpt], NOW, p) == 40 + 20 + 2400


def test_score_is_savings_over_savings_plus_disruption_and_zero_when_nothing_is_saved() -> None:
    assert score(2520.0, 2520.0) == 0.5
    assert score(0.0, 0.0) == 0.0
    assert score(100.0, 0.0) == 1.0


def test_a_gang_whose_leaf_frees_soon_by_time_limits_moves_no_one() -> None:
    """s00 and s01 (leaf-0) end in 10 s by their time limits: the gang's expected wait is
    10 s, 160 GPU-s saved against 2,520 of disruption (score 0.06): nobody moves. With the
    limits an hour away the wait is the horizon and leaf-1 is freed."""
    soon = busy({"s00": NOW + 10, "s01": NOW + 10})
    assert run([gang()], soon).preemptions == []
    later = busy({"s00": NOW + 7200, "s01": NOW + 7200})
    assert moved(run([gang()], later)) == ["s04", "s05"]
    snap = snapshot(cluster(8, 8, leaves=2), [gang()], soon, now=NOW)
    # not told of the running jobs (their limits), the wait is the horizon: 16 x 3,600 saved
    plan = free_one_leaf(gang().spec, soon, snap.nodes, NOW, DefragPolicy(min_score=0.05))
    assert plan is not None and plan.score == pytest.approx(57600 / (57600 + 2520))
    plan = free_one_leaf(
        gang().spec, soon, snap.nodes, NOW, DefragPolicy(min_score=0.05), running=soon
    )
    assert plan is not None and plan.score == pytest.approx(160 / (160 + 2520))


# ----- how often ---------------------------------------------------------------------------


def test_no_move_within_the_clusters_interval_of_the_last_one() -> None:
    assert run([gang()], busy(), moves={"leaf-0": NOW - 30}).preemptions == []
    assert moved(run([gang()], busy(), moves={"leaf-0": NOW - 61})) == ["s04", "s05"]
    opts = {"preempt/defrag": {"interval_s": 10}}
    assert moved(run([gang()], busy(), moves={"leaf-0": NOW - 30}, options=opts)) == [
        "s04",
        "s05",
    ]


def test_a_leaf_moved_lately_is_left_alone_and_the_next_cheapest_leaf_is_freed() -> None:
    """leaf-1 was freed 5 minutes ago (under its 10-minute interval): leaf-0 is freed instead
    (s03 and one of the others), never leaf-1 again."""
    res = run([gang()], busy(), moves={"leaf-1": NOW - 300})
    assert res.preemptions and all(p.domain == "leaf-0" for p in res.preemptions), res.preemptions
    assert "s03" in moved(res)
    both = {"leaf-0": NOW - 300, "leaf-1": NOW - 300}
    assert run([gang()], busy(), moves=both, options={}).preemptions == []


def test_one_move_per_cycle_under_the_clusters_interval() -> None:
    """Two gangs: the first frees leaf-1; the second finds the cluster's interval running
    (the move made in this very cycle) and moves no one."""
    second = job("h", gpus=8, workers=2, topology="leaf", required=True, submit=1.0)
    res = run([gang(), second], busy())
    assert {p.for_job for p in res.preemptions} == {"g"}
    assert all(p.domain == "leaf-1" for p in res.preemptions)


def test_the_move_is_recorded_by_the_core_and_bounds_the_next_cycle() -> None:
    """Through the Controller: 4 nodes x 8 GPUs in 2 leaves, a 4-GPU job left on each node;
    a 2 x 8 gang under one leaf frees one leaf, the core remembers when, and the next
    snapshot carries it (so that the next cycle's bounds see it)."""
    from builders import cluster_spec, spec

    from gpufleet.core.commands import Launch
    from gpufleet.core.controller import Controller
    from gpufleet.core.events import JobSubmitted, TaskExited, TaskStarted

    ctrl = Controller(profile(place="bestfit", preempt=["defrag"]), cluster_spec(4, 8, leaves=2))
    log: list = []
    for i in range(8):
        log += ctrl.handle(float(i), JobSubmitted(f"j{i}", spec(f"j{i}", gpus=4), float(i)))
    starts = {c.job_id: c for c in log if isinstance(c, Launch)}
    assert len(starts) == 8
    for jid in starts:
        ctrl.handle(10.0, TaskStarted(jid, 1, 0))
    on = {jid: c.allocation[0].node for jid, c in starts.items()}
    gone = [next(j for j in sorted(on) if on[j] == n) for n in sorted(set(on.values()))]
    for jid in gone:  # one job leaves each node: 4 GPUs free on every node
        ctrl.handle(20.0, TaskExited(jid, 1, 0, 0))
    g = gang().spec
    ctrl.handle(NOW, JobSubmitted("g", g, NOW))
    ((leaf, move),) = ctrl.state.defrag_moves.items()
    assert leaf in ("leaf-0", "leaf-1") and move.time == NOW and move.for_job == "g"
    assert len(move.victims) == 2 and move.message == f"moving 2 jobs to free 2 nodes under {leaf}"
    assert ctrl.snapshot(NOW + 1).defrag_moves == ctrl.state.defrag_moves
    # the next cycle: the victims are stopping, the gang's Reason still says the move
    ctrl.handle(NOW + 1, JobSubmitted("h", spec("h", gpus=1), NOW + 1))
    r = ctrl.last.reasons["g"]
    assert r.code is ReasonCode.DEFRAG, r
    assert r.message == f"moving 2 jobs to free 2 nodes under {leaf}: 0 of 2 stopped"
    # one victim ends: 1 of 2; both: the gang starts on the leaf freed for it
    first, second = move.victims
    ctrl.handle(NOW + 2, TaskExited(first, 1, 0, 137))
    assert ctrl.last.reasons["g"].message.endswith(": 1 of 2 stopped")
    out = ctrl.handle(NOW + 3, TaskExited(second, 1, 0, 137))
    (launch,) = [c for c in out if isinstance(c, Launch) and c.job_id == "g"]
    assert sorted(p.node for p in launch.allocation) == list(move.data["nodes"])


# ----- a queue's changes -----------------------------------------------------------------


def test_a_queues_changes_apply_to_its_gangs_only() -> None:
    off = QueueSpec("frozen", defrag=DefragOverrides((("enabled", False),)))
    picky = QueueSpec("picky", defrag=DefragOverrides((("min_score", 0.99),)))
    assert run([gang(queue="frozen")], busy(), queues=[off]).preemptions == []
    assert run([gang(queue="picky")], busy(), queues=[picky]).preemptions == []
    assert moved(run([gang(queue="default")], busy(), queues=[off, picky])) == ["s04", "s05"]
    eager = QueueSpec("eager", defrag=DefragOverrides((("interval_s", 0.0),)))
    res = run([gang(queue="eager")], busy(), queues=[eager], moves={"leaf-0": NOW - 1})
    assert moved(res) == ["s04", "s05"]


def test_a_queues_defrag_is_read_checked_and_kept_by_the_store() -> None:
    from gpufleet.server.store.codec import queue_from_dict, queue_to_dict

    q = QueueSpec.from_dict(
        {"name": "train", "defrag": {"min_score": 0.7, "leaf_interval_s": 120, "enabled": True}},
        source="q.yaml",
        path="queues[0]",
    )
    assert q.defrag is not None
    assert q.defrag.to_dict() == {"enabled": True, "leaf_interval_s": 120.0, "min_score": 0.7}
    assert queue_from_dict(queue_to_dict(q)) == q
    with pytest.raises(SpecError) as e:
        QueueSpec.from_dict(
            {"name": "x", "defrag": {"min_score": 1.5}}, source="q.yaml", path="queues[0]"
        )
    assert "min_score" in str(e.value)
    with pytest.raises(SpecError) as e:
        QueueSpec.from_dict(
            {"name": "x", "defrag": {"how_often": 3}}, source="q.yaml", path="queues[0]"
        )
    assert "how_often" in str(e.value)


def test_the_clusters_policy_from_text_options() -> None:
    opts = parse_options("interval_s=30, min_score=0.6,room_elsewhere=false")
    p = DefragPolicy.of(opts)
    assert (p.interval_s, p.min_score, p.room_elsewhere) == (30.0, 0.6, False)
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_options("interval_s")
    with pytest.raises(ProfileError, match="unknown defrag option"):
        profile(preempt=["defrag"], options={"preempt/defrag": {"often": "1"}})
    with pytest.raises(ProfileError, match="leaf_interval_s"):
        profile(preempt=["defrag"], options={"preempt/defrag": {"leaf_interval_s": "-1"}})


def test_a_service_replica_loses_no_work_when_moved_so_the_lost_work_bound_spares_it() -> None:
    """leaf-1's move loses 40 + 80 GPU-s; under a 100 GPU-s bound nothing moves, unless s05 is
    a service replica (moved make-before-break: it keeps no work to lose): then 40."""
    tight = {"preempt/defrag": {"max_lost_gpu_s": 100}}
    assert run([gang()], busy(), options=tight).preemptions == []
    jobs = [replace(v, replica=True) if v.id == "s05" else v for v in busy()]
    res = run([gang()], jobs, options=tight)
    assert moved(res) == ["s04", "s05"]
    assert res.reasons["g"].data["lost_gpu_s"] == 40.0
    p = DefragPolicy(restart_cost_s=300.0)
    assert disruption([jobs[5]], NOW, p) == 300.0 * 4  # its restart is still paid
