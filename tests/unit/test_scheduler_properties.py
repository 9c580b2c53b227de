"""Properties of one cycle over random clusters, running jobs and pending jobs (hypothesis):

* no GPU device is given more than 1000 milli, no node more CPU or memory than it has free;
* a gang starts with exactly ``workers`` placements, or not at all;
* a required topology is honoured, GPU models and unschedulable nodes respected;
* quotas hold, except for starts marked borrowing, and those stay within the queue's quota plus
  what its cohort has idle to lend (idle quota lent once);
* the same snapshot and profile give the same decisions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from builders import job, node, queue, running, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.model.job import TopologyLevel
from gpufleet.model.reason import ReasonCode
from gpufleet.model.resources import MILLI, Resources
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.framework import Profile

MODELS = ("H100-SXM", "A100-80GB")
QUEUES = ("a", "b", "c", "d")
NOW = 100.0

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def clusters(draw):
    pods = draw(st.integers(1, 2))
    leaves = draw(st.integers(pods, 4))
    n = draw(st.integers(1, 8))
    nodes = []
    for i in range(n):
        leaf = draw(st.integers(0, leaves - 1))
        nodes.append(
            node(
                f"n{i:02d}",
                draw(st.sampled_from((0, 1, 2, 4, 8, 8))),
                model=draw(st.sampled_from(MODELS)),
                leaf=f"leaf-{leaf}",
                pod=f"pod-{leaf * pods // leaves}",
                cpus=draw(st.sampled_from((4, 16, 64))),
                mem_gib=draw(st.sampled_from((16, 64, 512))),
                schedulable=draw(st.booleans()) or draw(st.booleans()),
                datasets=draw(st.sets(st.sampled_from(("imagenet", "c4")), max_size=1)),
            )
        )
    return nodes


@st.composite
def busy(draw, nodes):
    """Running jobs that leave some devices whole, some partly used, some full."""
    out = []
    for v in nodes:
        for d in range(v.gpus):
            used = draw(st.sampled_from((0, 0, 0, 250, 500, 700, 1000)))
            if used:
                out.append(
                    running(
                        f"r-{v.name}-{d}",
                        (v.name, [d]),
                        milli=used,
                        cpus=0.25,
                        mem_gib=0.5,
                        queue=draw(st.sampled_from(QUEUES)),
                        priority=draw(st.integers(-1, 1)),
                        start=draw(st.floats(0, NOW)),
                        limit=draw(st.sampled_from((None, 50.0, 200.0))),
                        borrowing=draw(st.booleans()),
                        preemptible=draw(st.booleans()) or draw(st.booleans()),
                    )
                )
    return out


@st.composite
def pendings(draw):
    out = []
    for i in range(draw(st.integers(0, 12))):
        frac = draw(st.integers(0, 3)) == 0
        gpus = 1 if frac else draw(st.sampled_from((0, 1, 1, 2, 4, 8)))
        out.append(
            job(
                f"p{i}",
                submit=draw(st.floats(0, NOW)),
                seq=i,
                attained=draw(st.sampled_from((0.0, 5000.0))),
                eligible=draw(st.sampled_from((0.0, 0.0, 0.0, 2 * NOW))),
                gpus=gpus,
                milli=draw(st.sampled_from((100, 300, 500, 600))) if frac else MILLI,
                workers=draw(st.sampled_from((1, 1, 2, 3, 4))),
                cpus=draw(st.sampled_from((0.5, 1, 4, 16))),
                mem_gib=draw(st.sampled_from((1, 4, 32))),
                queue=draw(st.sampled_from(QUEUES)),
                priority=draw(st.integers(-1, 2)),
                limit=draw(st.sampled_from((None, 30.0, 300.0))),
                topology=draw(st.sampled_from(list(TopologyLevel))).value,
                required=draw(st.booleans()),
                models=draw(st.sampled_from(((), (), ("H100-SXM",), ("A100-80GB",)))),
                dataset=draw(st.sampled_from(("", "", "imagenet"))),
                preemptible=draw(st.booleans()),
            )
        )
    return out


@st.composite
def queue_sets(draw):
    flag = st.booleans()
    small = st.sampled_from((1, 2, 4, 8))
    return [
        queue("a", draw(small), cohort="c", can_borrow=draw(flag), can_lend=draw(flag)),
        queue(
            "b",
            draw(small),
            cohort="c",
            can_borrow=draw(flag),
            can_lend=draw(flag),
            cpus=draw(st.sampled_from((None, 8))),
        ),
        queue("c", draw(small), cohort="c", mem_gib=draw(st.sampled_from((None, 64)))),
        queue("d"),  # no quota at all
    ]


@st.composite
def profiles(draw):
    admit = draw(st.sampled_from(("quota", "quota", "none")))
    unassigned = draw(st.sampled_from(("lend", "reserve")))
    return Profile.build(
        order=draw(st.sampled_from(("fifo", "priority", "fairshare", "las", "sjf"))),
        admit=admit,
        options={"admit/quota": {"unassigned": unassigned}} if admit == "quota" else None,
        place=draw(st.sampled_from(("bestfit", "topology", "packing", "dotprod", "random", "fgd"))),
        backfill=draw(st.sampled_from(("easy", "greedy", "none"))),
        preempt=draw(st.sampled_from(((), ("priority",), ("reclaim", "priority"), ("order",)))),
        seed=draw(st.integers(0, 3)),
    )


@st.composite
def scenes(draw):
    nodes = draw(clusters())
    run = draw(busy(nodes))
    qs = draw(queue_sets())
    snap = snapshot(nodes, draw(pendings()), run, queues=qs, now=NOW)
    return snap, draw(profiles())


# ----- checks --------------------------------------------------------------------------------


def check_capacity(snap, res) -> None:
    views = {v.name: v for v in snap.nodes}
    gfree = {v.name: list(v.gpu_free) for v in snap.nodes}
    cpu = {v.name: v.cpu_free for v in snap.nodes}
    mem = {v.name: v.mem_free for v in snap.nodes}
    specs = {p.id: p.spec for p in snap.pending}
    for s in res.starts:
        spec = specs[s.job_id]
        for p in s.allocation:
            v = views[p.node]
            assert v.schedulable, f"{s.job_id} placed on unschedulable {p.node}"
            assert len(set(p.gpus)) == len(p.gpus) == spec.gpus_per_worker
            if spec.gpus_per_worker:
                assert p.gpu_milli == spec.gpu_milli
                assert not spec.gpu_models or v.gpu_model in spec.gpu_models
            for d in p.gpus:
                if p.gpu_milli >= MILLI:
                    assert gfree[p.node][d] == MILLI, "a whole GPU on a shared device"
                gfree[p.node][d] -= p.gpu_milli
            cpu[p.node] -= p.cpu_milli
            mem[p.node] -= p.memory_mib
            assert p.cpu_milli == spec.cpu_milli and p.memory_mib == spec.memory_mib
    for name in views:
        assert all(g >= 0 for g in gfree[name]), f"GPU over-committed on {name}: {gfree[name]}"
        assert cpu[name] >= 0, f"CPU over-committed on {name}"
        assert mem[name] >= 0, f"memory over-committed on {name}"


def check_gangs_and_topology(snap, res) -> None:
    views = {v.name: v for v in snap.nodes}
    specs = {p.id: p.spec for p in snap.pending}
    assert len(res.started_ids) == len(set(res.started_ids))
    for s in res.starts:
        spec = specs[s.job_id]
        assert len(s.allocation) == spec.workers
        t = spec.topology
        if t.required and t.level is not TopologyLevel.ANY:
            key = {
                TopologyLevel.NODE: lambda n: n,
                TopologyLevel.LEAF: lambda n: views[n].leaf,
                TopologyLevel.POD: lambda n: views[n].pod,
            }[t.level]
            assert len({key(p.node) for p in s.allocation}) == 1, (s.job_id, t)


def room(queue_name, used, queues, capacity, lend) -> dict[str, Resources]:
    """An independent reading of a limited queue's room: the rest of its quota; the idle
    quota of the other lending members of its cohort less what all members borrow (lent
    once, not to every borrower); the capacity outside every quota less what queues without
    a quota hold and what cohorts borrow beyond their idle quota (lent to cohort members)."""
    q = queues[queue_name]
    u = used[queue_name]
    parts = {"own": (q.quota - u).clamp0(), "free": Resources(), "lent": Resources()}
    limited = [o for o in queues.values() if o.limited]
    assigned = Resources()
    for o in limited:
        assigned = assigned + o.quota
    unassigned = (capacity - assigned).clamp0()
    taken = Resources()
    for name, held in used.items():
        if name not in queues or not queues[name].limited:
            taken = taken + held
    for cohort in {o.cohort for o in limited}:
        idle_all, over_all = Resources(), Resources()
        for o in limited:
            if o.cohort == cohort:
                over = (used[o.name] - o.quota).clamp0()
                over_all = over_all + over
                if o.can_lend and cohort:
                    idle_all = idle_all + (o.quota - used[o.name]).clamp0()
        taken = taken + (over_all - idle_all).clamp0()
    parts["unassigned"] = unassigned
    parts["pool"] = Resources()
    if not q.cohort or not q.can_borrow:
        return parts
    idle, over = Resources(), Resources()
    for o in limited:
        if o.cohort != q.cohort:
            continue
        over = over + (used[o.name] - o.quota).clamp0()
        if o.name != queue_name and o.can_lend:
            idle = idle + (o.quota - used[o.name]).clamp0()
    parts["free"] = (idle - over).clamp0()
    parts["lent"] = idle - parts["free"]
    parts["pool"] = (unassigned - taken).clamp0() if lend else Resources()
    return parts


def total_room(parts) -> Resources:
    return parts["own"] + parts["free"] + parts["pool"]


def capacity(snap) -> Resources:
    cap = Resources()
    for v in snap.nodes:
        if v.schedulable:
            cap = cap + Resources(v.gpus * MILLI, v.cpu_total, v.mem_total)
    return cap


def check_quotas(snap, res, profile) -> None:
    if profile.names["admit"] != "quota":
        return
    queues = dict(snap.queues)
    used: dict[str, Resources] = defaultdict(Resources)
    for r in snap.running:
        used[r.spec.queue] = used[r.spec.queue] + r.spec.total_resources
    specs = {p.id: p.spec for p in snap.pending}
    cap = capacity(snap)
    for s in res.starts:  # in admission order
        spec = specs[s.job_id]
        q = queues.get(spec.queue)
        after = used[spec.queue] + spec.total_resources
        if q is not None and q.limited:
            if s.borrowing:
                assert q.cohort and q.can_borrow, f"{s.job_id} borrows outside a cohort"
                parts = room(q.name, used, queues, cap, profile.admit.lend_unassigned)
                assert spec.total_resources.fits_in(total_room(parts)), s.job_id
            else:
                assert after.fits_in(q.quota), f"{s.job_id} over the quota of {q.name}"
        used[spec.queue] = after


def check_quota_reasons(snap, res, profile) -> None:
    """Every number of a Quota Reason is recomputed from the snapshot and the cycle's starts
    (the usage the cycle leaves), and the Reason is true: the job does not fit that room."""
    if profile.names["admit"] != "quota" or not profile.explain:
        return
    queues = dict(snap.queues)
    used: dict[str, Resources] = defaultdict(Resources)
    specs = {p.id: p.spec for p in snap.pending}
    for r in snap.running:
        used[r.spec.queue] = used[r.spec.queue] + r.spec.total_resources
    for s in res.starts:
        spec = specs[s.job_id]
        used[spec.queue] = used[spec.queue] + spec.total_resources
    cap = capacity(snap)
    for job_id, why in res.reasons.items():
        if why.code is not ReasonCode.QUOTA:
            continue
        spec = specs[job_id]
        q = queues[spec.queue]
        parts = room(q.name, used, queues, cap, profile.admit.lend_unassigned)
        d = why.data
        assert d["used_gpus"] == used[q.name].gpus, (job_id, d)
        assert d["quota_gpus"] == q.quota.gpus
        assert d["needed_gpus"] == spec.total_resources.gpus
        assert d["borrowable_gpus"] == (parts["free"] + parts["pool"]).gpus, (job_id, d, parts)
        assert d["cohort_lent_gpus"] == parts["lent"].gpus, (job_id, d, parts)
        assert d["unassigned_gpus"] == parts["unassigned"].gpus
        assert d["unassigned_free_gpus"] == parts["pool"].gpus, (job_id, d, parts)
        need = spec.total_resources
        assert not (used[q.name] + need).fits_in(q.quota), (job_id, d)
        may_borrow = q.cohort and q.can_borrow
        assert not (may_borrow and need.fits_in(total_room(parts))), (job_id, d, parts)


def check_estimates(snap, res, profile) -> None:
    """An estimated start is never before now nor before the job may run; the reserved head's
    is its reservation; and when every job has a time limit, every job that can start at all
    (not NeverSchedulable, not waiting on another job) has one."""
    if not profile.explain:
        return
    limits = all(r.spec.time_limit_s is not None for r in snap.running) and all(
        p.spec.time_limit_s is not None for p in snap.pending
    )
    by_id = {p.id: p for p in snap.pending}
    for job_id, why in res.reasons.items():
        at = why.estimated_start
        if at is None:
            assert why.start_bound == ""
            unstartable = {
                ReasonCode.NEVER,
                ReasonCode.DEPENDENCY,
                ReasonCode.DEP_NEVER,
                ReasonCode.ARRAY_LIMIT,
            }
            assert not limits or why.code in unstartable, (job_id, why)
            continue
        assert at >= snap.now and at >= by_id[job_id].eligible_time, (job_id, why)
        if res.reservation is not None and job_id == res.reservation.job_id:
            assert (at, why.start_bound) == (res.reservation.start_time, "reserved")
        else:
            assert why.start_bound == "planned", (job_id, why)


def check_reasons(snap, res, profile) -> None:
    started = set(res.started_ids)
    for p in snap.pending:
        assert (p.id in started) != (p.id in res.reasons), p.id
        if p.eligible_time > snap.now:
            assert p.id not in started


@SETTINGS
@given(scenes())
def test_a_cycle_never_over_commits_and_keeps_every_rule(scene) -> None:
    snap, profile = scene
    res = run_cycle(snap, profile)
    check_capacity(snap, res)
    check_gangs_and_topology(snap, res)
    check_quotas(snap, res, profile)
    check_quota_reasons(snap, res, profile)
    check_estimates(snap, res, profile)
    check_reasons(snap, res, profile)
    running = {r.id: r for r in snap.running}
    for p in res.preemptions:
        assert running[p.job_id].spec.preemptible, f"{p.job_id} is not preemptible"


def decisions(res):
    return (
        [(s.job_id, s.allocation, s.borrowing) for s in res.starts],
        [(p.job_id, p.for_job, p.reason) for p in res.preemptions],
        res.reservation,
        {k: (r.code, r.message, r.estimated_start) for k, r in res.reasons.items()},
    )


@st.composite
def cohort_scenes(draw):
    """Capacity to spare and small quotas: admission, not placement, decides."""
    nodes = [node(f"n{i:02d}", 8, cpus=256, mem_gib=4096) for i in range(8)]
    qs = draw(queue_sets())
    run, free = [], [(v.name, d) for v in nodes for d in range(8)]
    for i in range(draw(st.integers(0, 16))):
        n, d = free.pop(draw(st.integers(0, len(free) - 1)))
        run.append(running(f"r{i}", (n, [d]), queue=draw(st.sampled_from(QUEUES))))
    pending = [
        job(
            f"p{i}",
            seq=i,
            gpus=draw(st.sampled_from((1, 2, 4))),
            workers=draw(st.sampled_from((1, 2))),
            queue=draw(st.sampled_from(QUEUES)),
            priority=draw(st.integers(0, 2)),
        )
        for i in range(draw(st.integers(1, 16)))
    ]
    order = draw(st.sampled_from(("fifo", "priority", "fairshare")))
    return snapshot(nodes, pending, run, queues=qs, now=NOW), Profile.build(order=order)


@SETTINGS
@given(cohort_scenes())
def test_quotas_hold_and_borrowing_stays_within_what_the_cohort_lends(scene) -> None:
    snap, profile = scene
    res = run_cycle(snap, profile)
    check_capacity(snap, res)
    check_quotas(snap, res, profile)
    check_quota_reasons(snap, res, profile)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes())
def test_decisions_are_deterministic(scene) -> None:
    snap, profile = scene
    assert decisions(run_cycle(snap, profile)) == decisions(run_cycle(snap, profile))


@SETTINGS
@given(scenes())
def test_estimates_planned_per_node_keep_the_same_rules(scene) -> None:
    """``Profile.plan_per_node`` (estimate_nodes): the same estimates' rules hold, and the
    cycle's decisions are the plan's to read, never moved by it."""
    snap, profile = scene
    per_node = replace(profile, plan_per_node=True)
    res = run_cycle(snap, per_node)
    check_estimates(snap, res, per_node)
    plain = run_cycle(snap, profile)
    assert decisions(res)[:3] == decisions(plain)[:3]


@SETTINGS
@given(scenes())
def test_estimates_with_only_the_big_jobs_per_node_keep_the_same_rules(scene) -> None:
    """``Profile.plan_big_per_node``: only jobs of several whole GPUs a worker planned per node,
    the rest counted over the cluster; the same rules, the same decisions."""
    snap, profile = scene
    big = replace(profile, plan_big_per_node=True)
    res = run_cycle(snap, big)
    check_estimates(snap, res, big)
    assert decisions(res)[:3] == decisions(run_cycle(snap, profile))[:3]


@SETTINGS
@given(scenes())
def test_estimates_of_the_later_of_two_plans_are_each_jobs_later_plan(scene) -> None:
    """``Profile.plan_later_of_two``: every planned start is the later of the plan over the
    cluster's and the plan with the big jobs per node's; the same rules, the same decisions."""
    snap, profile = scene
    both = replace(profile, plan_later_of_two=True)
    res = run_cycle(snap, both)
    check_estimates(snap, res, both)
    plain = run_cycle(snap, replace(profile, plan_later_of_two=False))
    assert decisions(res)[:3] == decisions(plain)[:3]
    big = run_cycle(snap, replace(profile, plan_big_per_node=True))
    for job_id, why in res.reasons.items():
        one, two = plain.reasons[job_id].estimated_start, big.reasons[job_id].estimated_start
        if why.start_bound != "planned" or one is None or two is None:
            continue
        assert why.estimated_start == max(one, two), (job_id, one, two, why)
