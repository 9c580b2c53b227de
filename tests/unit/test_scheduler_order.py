"""Step 1, order plugins: fifo, priority, fairshare (weighted DRF with decayed usage), las, sjf."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from builders import cluster, cycle, job, queue, running, snapshot, spec

from gpufleet.model.limits import SIGNALS
from gpufleet.model.notice import CheckpointNotice
from gpufleet.scheduler.framework import make
from gpufleet.scheduler.snapshot import ServiceMark
from gpufleet.scheduler.usage import DecayedUsage, QueueUsage

DAY = 86400.0


def ordered(name: str, pending, nodes=None, *, options=None, **snap_kw) -> list[str]:
    """The ids in the order the plugin yields them, over a snapshot of ``pending``."""
    snap = snapshot(nodes or cluster(1, 8), pending, **snap_kw)
    plugin = make("order", name, options)
    return [p.id for p in plugin.order(snap.pending, snap, QueueUsage.of(snap))]


# ----- fifo, priority ------------------------------------------------------------------------


def test_fifo_orders_by_submit_time_then_arrival_sequence() -> None:
    pending = [job("late", submit=5), job("b", submit=1, seq=2), job("a", submit=1, seq=1)]
    assert ordered("fifo", pending) == ["a", "b", "late"]


def test_fifo_starts_the_earliest_job_when_only_one_fits() -> None:
    res = cycle(cluster(1, 8), [job("second", gpus=8, submit=2), job("first", gpus=8, submit=1)])
    assert res.started_ids == ["first"]


def test_priority_goes_highest_first_and_fifo_among_equals() -> None:
    pending = [
        job("low", priority=-1, submit=0),
        job("mid-late", priority=5, submit=3),
        job("mid-early", priority=5, submit=1),
        job("high", priority=10, submit=9),
    ]
    assert ordered("priority", pending) == ["high", "mid-early", "mid-late", "low"]


def test_priority_outranks_only_strictly_lower_priorities() -> None:
    plugin = make("order", "priority")
    snap = snapshot(cluster(1, 8))
    low, same = running("low", ("n00", [0]), priority=1), running("same", ("n00", [1]), priority=5)
    assert plugin.outranks(job("j", priority=5), low, snap)
    assert not plugin.outranks(job("j", priority=5), same, snap)


# ----- fairshare -----------------------------------------------------------------------------


def two_queues(n: int = 6) -> list:
    return [job(f"a{i}", queue="a", submit=i) for i in range(n)] + [
        job(f"b{i}", queue="b", submit=100 + i) for i in range(n)
    ]


def test_fairshare_interleaves_queues_within_one_cycle() -> None:
    """Shares are re-read after each admitted job: the cycle alternates, it does not drain
    queue a first although all of a's jobs were submitted earlier."""
    res = cycle(cluster(1, 8), two_queues(), queues=[queue("a"), queue("b")], order="fairshare")
    assert res.started_ids == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3"]


def test_fairshare_weights_split_the_cluster_in_proportion() -> None:
    res = cycle(
        cluster(1, 8),
        two_queues(),
        queues=[queue("a", weight=3), queue("b", weight=1)],
        order="fairshare",
    )
    started = res.started_ids
    assert sum(s.startswith("a") for s in started) == 6
    assert sum(s.startswith("b") for s in started) == 2


def test_fairshare_a_queue_with_higher_past_usage_goes_later() -> None:
    half_life = 7 * DAY
    tau = half_life / math.log(2)
    # queue a's decayed usage is worth half the cluster: b catches up to it first
    res = cycle(
        cluster(1, 8),
        two_queues(),
        queues=[queue("a"), queue("b")],
        usage={"a": 0.5 * tau},
        order="fairshare",
    )
    assert res.started_ids[:4] == ["b0", "b1", "b2", "b3"]
    # then they alternate at equal shares: b ends with 6 of the 8 GPUs, a with 2
    assert sorted(res.started_ids) == ["a0", "a1", "b0", "b1", "b2", "b3", "b4", "b5"]


def test_fairshare_counts_running_jobs_as_current_share() -> None:
    """Queue a holds 4 of 8 GPUs now (DRF share 0.5): queue b goes first."""
    nodes = cluster(2, 8)
    hogs = [running("a-run", ("n01", range(8)), queue="a")]
    assert ordered(
        "fairshare",
        [job("a0", queue="a", submit=0), job("b0", queue="b", submit=5)],
        nodes,
        running=hogs,
        queues=[queue("a"), queue("b")],
    ) == ["b0", "a0"]


def test_fairshare_share_is_dominant_resource_over_weight() -> None:
    """DRF: a queue holding little GPU but most of the CPU has a large share."""
    nodes = cluster(1, 8, cpus=100)
    plugin = make("order", "fairshare")
    r = running("cpu-heavy", ("n00", [0]), cpus=80, queue="a")
    snap = snapshot(nodes, running=[r], queues=[queue("a", weight=2)])
    usage = QueueUsage.of(snap)
    assert usage.dominant_share("a") == pytest.approx(0.8)
    assert plugin.share("a", snap, usage) == pytest.approx(0.4)


def test_fairshare_within_a_queue_priority_then_fifo() -> None:
    pending = [job("a-old", queue="a", submit=0), job("a-urgent", queue="a", submit=9, priority=3)]
    assert ordered("fairshare", pending, queues=[queue("a")]) == ["a-urgent", "a-old"]


def test_fairshare_half_life_option_is_used() -> None:
    short = make("order", "fairshare", {"half_life_s": 3600.0})
    assert short.tau == pytest.approx(3600.0 / math.log(2))
    with pytest.raises(ValueError):
        make("order", "fairshare", {"half_life_s": 0})


def test_decayed_usage_halves_after_one_half_life() -> None:
    d = DecayedUsage(half_life_s=100.0)
    d.advance(0.0, {"a": 0.0})
    d.values["a"] = 80.0
    d.advance(100.0, {})
    assert d.values["a"] == pytest.approx(40.0)
    d.advance(300.0, {})
    assert d.values["a"] == pytest.approx(10.0)


def test_decayed_usage_of_a_constant_share_settles_at_share_times_tau() -> None:
    d = DecayedUsage(half_life_s=100.0)
    d.advance(0.0, {"a": 0.5})
    for t in range(100, 5001, 100):
        d.advance(float(t), {"a": 0.5})
    assert d.values["a"] == pytest.approx(0.5 * d.tau, rel=1e-6)
    # and integrates correctly over one short step: ~ share × dt
    e = DecayedUsage(half_life_s=1e9)
    e.advance(0.0, {"a": 0.25})
    e.advance(10.0, {"a": 0.25})
    assert e.values["a"] == pytest.approx(2.5, rel=1e-6)


def test_decayed_usage_ignores_time_running_backwards() -> None:
    d = DecayedUsage(half_life_s=100.0)
    d.advance(50.0, {"a": 1.0})
    d.advance(150.0, {"a": 1.0})
    before = dict(d.values)
    d.advance(10.0, {"a": 1.0})
    assert d.values == before and d.last == 150.0
    with pytest.raises(ValueError):
        DecayedUsage(half_life_s=0)


# ----- las (Tiresias 2D-LAS) ----------------------------------------------------------------


def test_las_less_attained_service_goes_first_regardless_of_submit_time() -> None:
    pending = [
        job("old-heavy", submit=0, attained=5000.0),  # level 1 (≥ 3,250 GPU-s)
        job("new-light", submit=50, attained=100.0),  # level 0
    ]
    assert ordered("las", pending, now=100.0) == ["new-light", "old-heavy"]


def test_las_is_fifo_within_a_level() -> None:
    """Levels are discrete: 3000 and 10 GPU-s are both level 0, so submit time decides."""
    pending = [job("second", submit=2, attained=10.0), job("first", submit=1, attained=3000.0)]
    assert ordered("las", pending, now=100.0) == ["first", "second"]


def test_las_has_tiresias_three_queues_by_default() -> None:
    """Tiresias' simulator's limits: 3,250 and 7,200 GPU-s (three queues)."""
    plugin = make("order", "las")
    assert [plugin.level_of(x) for x in (0, 3249, 3250, 7199, 7200, 10**7)] == [0, 0, 1, 1, 2, 2]


def test_las_levels_follow_the_thresholds() -> None:
    plugin = make("order", "las", {"thresholds_gpu_s": [100.0, 1000.0]})
    assert [plugin.level_of(x) for x in (0, 99.9, 100, 999, 1000, 10**6)] == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        make("order", "las", {"thresholds_gpu_s": [1000.0, 100.0]})
    with pytest.raises(ValueError):
        make("order", "las", {"starvation_factor": -1})


def test_las_promotes_a_job_that_waited_starvation_factor_times_its_run() -> None:
    """Tiresias' STARVELIMIT with PROMOTEKNOB 2: a 2-GPU job that ran 2,000 s (4,000 GPU-s,
    level 1) and stopped at 10,000 is promoted once it has waited 2 × 2,000 s since: at
    14,000, not at 13,999. Its wait before it first ran does not count."""
    opts = {"starvation_factor": 2.0}
    heavy = job("heavy", submit=0, attained=4000.0, gpus=2, mark=ServiceMark(stopped_at=10_000.0))
    light = job("light", submit=10, attained=0.0)
    assert ordered("las", [heavy, light], now=13_999.0, options=opts) == ["light", "heavy"]
    assert ordered("las", [heavy, light], now=14_000.0, options=opts) == ["heavy", "light"]
    # without the guard it never is; a job that never ran is never promoted (it is level 0)
    assert ordered("las", [heavy, light], now=10**7) == ["light", "heavy"]
    never_ran = job("never-ran", submit=0, attained=4000.0)
    assert make("order", "las", opts).pending_level(never_ran, 10**7) == 1


def test_las_walks_the_levels_its_pending_level_gives() -> None:
    """The cycle's split by level (written out for speed) agrees with ``pending_level`` for
    jobs that never ran, ran, were promoted and wait on either side of their promotion."""
    las = make("order", "las", {"starvation_factor": 2.0, "within": "history"})
    jobs = [
        job(f"j{i}", submit=float(i), attained=a, gpus=g, mark=ServiceMark(b, w, st))
        for i, (a, g, b, w, st) in enumerate(
            [
                (0.0, 1, 0.0, 0.0, None),
                (4000.0, 2, 0.0, 0.0, 10_000.0),  # starved from 14,000
                (4000.0, 2, 0.0, 3000.0, 12_000.0),  # from 13,000
                (9000.0, 1, 4000.0, 0.0, 5_000.0),  # 5,000 since its promotion: level 1
                (20_000.0, 4, 0.0, 0.0, None),  # ran, never stopped (restored): level 2
                (3000.0, 1, 0.0, 0.0, 13_000.0),
            ]
        )
    ]
    for now in (12_999.0, 13_000.0, 13_999.0, 14_000.0, 10**6):
        want = sorted(jobs, key=lambda p: (las.pending_level(p, now), p.submit_time))
        snap = snapshot(cluster(1, 8), jobs, now=now)
        assert [p.id for p in las.order(snap.pending, snap, QueueUsage.of(snap))] == [
            p.id for p in want
        ]


def test_las_promotion_counts_service_and_waits_from_the_promotion_on() -> None:
    """Promoted as it starts, the job's mark moves its base to its attained service: it runs
    in the first queue until it gets another 3,250 GPU-s, and its next promotion needs a wait
    of twice what it ran since. Not promoted, the wait since its stop is carried over."""
    # (its jobs save at a stop, Tiresias' premise: unsaved_once off)
    plugin = make("order", "las", {"starvation_factor": 2.0, "unsaved_once": False})
    heavy = job("heavy", attained=4000.0, gpus=2, mark=ServiceMark(stopped_at=10_000.0))
    early = plugin.started(heavy, 12_000.0)
    assert early == ServiceMark(0.0, 2000.0)  # not promoted: waited 2,000 s so far
    mark = plugin.started(heavy, 14_500.0)
    assert mark == ServiceMark(4000.0)
    snap = snapshot(cluster(1, 8), now=15_000.0)
    ran = running("heavy", ("n00", [0, 1]), start=14_500.0, attained=4000.0)
    newcomer = job("new")
    assert not plugin.outranks(newcomer, replace(ran, mark=mark), snap)  # 1,000 GPU-s since
    assert plugin.outranks(newcomer, ran, snap)  # without the promotion: 5,000, level 1
    # stopped at 16,000 after 3,000 GPU-s since the promotion: level 0 however long it waits
    again = replace(heavy, attained_gpu_s=7000.0, mark=replace(mark, stopped_at=16_000.0))
    assert plugin.pending_level(again, 10**7) == 0
    # stopped after 6,000 GPU-s since (3,000 s on 2 GPUs): level 1, promoted after 6,000 s
    later = replace(heavy, attained_gpu_s=10_000.0, mark=replace(mark, stopped_at=17_500.0))
    assert plugin.pending_level(later, 23_499.0) == 1
    assert plugin.pending_level(later, 23_500.0) == 0


def test_las_starvation_cap_promotes_after_the_cap_whatever_it_ran() -> None:
    """PROMOTEKNOB 16 alone would make a job that ran 40,000 s wait 640,000 s; the cap
    promotes it once it has waited 1,000 s since it stopped."""
    opts = {"starvation_factor": 16.0, "starvation_cap_s": 1000.0}
    heavy = job("heavy", submit=0, attained=40_000.0, mark=ServiceMark(stopped_at=10_000.0))
    plugin = make("order", "las", opts)
    assert plugin.pending_level(heavy, 10_999.0) == 2
    assert plugin.pending_level(heavy, 11_000.0) == 0
    light = job("light", submit=10, attained=0.0)
    assert ordered("las", [heavy, light], now=10_999.0, options=opts) == ["light", "heavy"]
    assert ordered("las", [heavy, light], now=11_000.0, options=opts) == ["heavy", "light"]


def test_las_age_limit_puts_old_jobs_first_and_keeps_them_running() -> None:
    opts = {"age_limit_s": 1000.0, "within": "history", "unsaved_once": False}
    old = job("old", submit=0, attained=20_000.0, gpus=2, mark=ServiceMark(stopped_at=500.0))
    new = job("new", submit=900, attained=0.0)
    assert ordered("las", [old, new], now=999.0, options=opts) == ["new", "old"]
    assert ordered("las", [old, new], now=1000.0, options=opts) == ["old", "new"]
    plugin = make("order", "las", opts)
    assert plugin.pending_level(old, 1000.0) == 0
    mark = plugin.started(old, 1000.0)
    assert mark.aged
    snap = snapshot(cluster(1, 8), now=10_000.0)
    ran = running("old", ("n00", [0, 1]), start=1000.0, attained=20_000.0)
    assert plugin.outranks(job("newer"), ran, snap)  # without the mark: level 2
    kept = replace(ran, mark=mark)
    assert plugin.running_level(kept, 10_000.0) == 0
    assert not plugin.outranks(job("newer"), kept, snap)


def test_las_aged_share_lets_the_oldest_aged_jobs_ahead_while_the_share_lasts() -> None:
    """On 8 GPUs with ``aged_share`` 0.5, the aged jobs go ahead, oldest first, while they
    fit in 4 GPUs with the aged ones already running; the others keep their level. Any aged
    job is kept running once started (and counts in the share)."""
    opts = {"age_limit_s": 1000.0, "aged_share": 0.5}
    a = job("a", submit=0, attained=20_000.0, gpus=2, mark=ServiceMark(stopped_at=500.0))
    b = job("b", submit=1, attained=20_000.0, gpus=2, mark=ServiceMark(stopped_at=500.0))
    c = job("c", submit=2, attained=20_000.0, gpus=2, mark=ServiceMark(stopped_at=500.0))
    new = job("new", submit=900, attained=0.0)
    assert ordered("las", [a, b, c, new], now=1500.0, options=opts) == ["a", "b", "new", "c"]
    plugin = make("order", "las", opts)
    snap = snapshot(cluster(1, 8), [a, b, c, new], now=1500.0)
    assert plugin.admitted(snap) == {"a", "b"}
    assert plugin.started(a, 1500.0).aged and plugin.started(c, 1500.0).aged
    # one aged job already runs on 2 GPUs: 2 left, for the oldest pending one
    held = replace(running("old", ("n00", [6, 7]), start=1000.0), mark=ServiceMark(aged=True))
    snap = snapshot(cluster(1, 8), [a, b, c, new], running=[held], now=1500.0)
    assert plugin.admitted(snap) == {"a"}
    assert plugin.pending_level(b, 1500.0, snap) == 2  # its level, not ahead
    with pytest.raises(ValueError):
        make("order", "las", {"aged_share": 0.0})


def test_las_min_run_keeps_a_job_running_until_it_has_run_that_long() -> None:
    """``min_run_s`` (Slurm's PreemptExemptTime): a job in a higher level is not preempted
    before its current attempt has run this long."""
    plugin = make("order", "las", {"min_run_s": 600.0, "unsaved_once": False})
    # 4,000 GPU-s from earlier attempts: level 1 from its start at 1,000
    hog = running("hog", ("n00", range(4)), start=1000.0, attained=4000.0)
    early = snapshot(cluster(1, 8), running=[hog], now=1599.0)
    late = snapshot(cluster(1, 8), running=[hog], now=1600.0)
    assert not plugin.outranks(job("new"), hog, early) and not list(
        plugin.outranked(job("new"), early)
    )
    assert plugin.outranks(job("new"), hog, late)
    assert [r.id for r in plugin.outranked(job("new"), late)] == ["hog"]
    assert make("order", "las", {"unsaved_once": False}).outranks(job("new"), hog, early)
    with pytest.raises(ValueError):
        make("order", "las", {"min_run_s": -1.0})


def test_las_outranks_running_jobs_that_crossed_into_a_higher_level() -> None:
    plugin = make("order", "las")
    snap = snapshot(cluster(1, 8), now=1000.0)
    hog = running("hog", ("n00", range(4)), start=0.0)  # 4 GPUs × 1000 s = 4000 GPU-s
    young = running("young", ("n00", [4]), start=900.0)  # 100 GPU-s
    assert plugin.outranks(job("new"), hog, snap)
    assert not plugin.outranks(job("new"), young, snap)


# ----- sjf (oracle) --------------------------------------------------------------------------


def test_sjf_orders_by_oracle_duration_then_time_limit_then_none_last() -> None:
    pending = [
        job("unknown", submit=0),
        job("long", submit=1, oracle=500.0),
        job("limit", submit=2, limit=100.0),
        job("short", submit=3, oracle=10.0, limit=10_000.0),  # the oracle wins over the limit
    ]
    assert ordered("sjf", pending) == ["short", "limit", "long", "unknown"]


def test_sjf_by_gpu_time_weighs_by_gang_size() -> None:
    pending = [job("wide", gpus=8, oracle=100.0), job("narrow", gpus=1, oracle=500.0, submit=1)]
    assert ordered("sjf", pending) == ["wide", "narrow"]
    assert ordered("sjf", pending, options={"by": "gpu_time"}) == ["narrow", "wide"]
    with pytest.raises(ValueError):
        make("order", "sjf", {"by": "size"})


def test_a_restored_ledger_is_decayed_over_the_downtime_and_gains_nothing_in_it() -> None:
    d = DecayedUsage(half_life_s=100.0)
    d.restore({"a": 80.0, "b": 0.0}, as_of=1000.0, now=1200.0)  # two half-lives down
    assert d.values == {"a": pytest.approx(20.0), "b": 0.0} and d.last == 1200.0
    d.advance(1300.0, {"a": 0.0})
    assert d.values["a"] == pytest.approx(10.0)
    e = DecayedUsage(half_life_s=100.0)
    e.restore({"a": 8.0}, as_of=1000.0, now=900.0)  # a clock behind the save: no decay
    assert e.values == {"a": 8.0} and e.last == 1000.0


def test_las_preempts_a_job_that_cannot_save_its_state_once_its_retry_has_grown() -> None:
    """``unsaved_once`` (the default): a job with service from an earlier attempt and no
    checkpoint notice lost that attempt to a stop; once its new attempt holds more than the
    first queue's service (3,250 GPU-s), LAS does not throw that away too. A young retry, its
    first attempt, or any attempt of a job that saves at the signal is preempted as before."""
    plugin = make("order", "las")
    snap = snapshot(cluster(1, 8), now=10_000.0)
    first = running("first", ("n00", [0, 1]), start=1000.0)  # 18,000 GPU-s, its first attempt
    again = running("again", ("n00", [2, 3]), start=5000.0, attained=18_000.0)  # 10,000 in it
    young = running("young", ("n00", [4, 5]), start=9000.0, attained=18_000.0)  # 2,000 in it
    notice = replace(again.spec, checkpoint=CheckpointNotice(SIGNALS["USR1"], 0))
    saves = replace(running("saves", ("n00", [6, 7]), start=5000.0, attained=18_000.0), spec=notice)
    new = job("new")
    assert plugin.outranks(new, first, snap) and plugin.outranks(new, saves, snap)
    assert plugin.outranks(new, young, snap) and not plugin.outranks(new, again, snap)
    snap = snapshot(cluster(1, 8), running=[first, again, young, saves], now=10_000.0)
    assert [r.id for r in plugin.outranked(new, snap)] == ["first", "young", "saves"]
    off = make("order", "las", {"unsaved_once": False})
    assert [r.id for r in off.outranked(new, snap)] == ["first", "again", "young", "saves"]


def test_las_history_preempts_a_job_that_cannot_save_only_where_the_exchange_gains() -> None:
    """``exchange`` (las-history's default 3): a running job without a checkpoint notice is
    preempted only when its expected remaining service over ``exchange`` exceeds the
    preemptor's expected need plus the work the stop throws away on as many GPUs as the
    preemptor's. Of two 2-GPU jobs 3,000 GPU-s into their first attempt (1,500 s each GPU),
    the one whose queue's jobs end at 4,000 (1,000 to go) is left to finish; the one whose
    queue's run to 400,000 is preempted; one that saves at the signal is preempted whatever its
    queue's history says."""
    plugin = make("order", "las-history", {"thresholds_gpu_s": [300.0]})
    for i in range(10):
        plugin.finished(spec(f"s{i}", gpus=2, queue="short"), 4000.0)
        plugin.finished(spec(f"l{i}", gpus=2, queue="long"), 400_000.0)
        plugin.finished(spec(f"n{i}", gpus=1, queue="short"), 100.0)
    nearly = running("nearly", ("n00", [0, 1]), start=8500.0, queue="short")
    far = running("far", ("n00", [2, 3]), start=8500.0, queue="long")
    notice = replace(nearly.spec, checkpoint=CheckpointNotice(SIGNALS["USR1"], 0))
    saves = replace(running("saves", ("n00", [4, 5]), start=8500.0), spec=notice)
    snap = snapshot(cluster(1, 8), running=[nearly, far, saves], now=10_000.0)
    new = job("new", queue="short")  # expected to need 100 GPU-s
    assert not plugin.outranks(new, nearly, snap)  # 1,000 / 3 < 100 + 1,500
    assert plugin.outranks(new, far, snap) and plugin.outranks(new, saves, snap)
    assert [r.id for r in plugin.outranked(new, snap)] == ["far", "saves"]
    off = make("order", "las-history", {"thresholds_gpu_s": [300.0], "exchange": 0.0})
    assert [r.id for r in off.outranked(new, snap)] == ["nearly", "far", "saves"]
    # a preemptor of 8 GPUs would free the GPUs of four such stops: 1,000 / 3 < 0 + 8 x 1,500
    assert plugin.outrank_key(new, snap) != plugin.outrank_key(job("big", gpus=8), snap)
