"""What the core keeps for the cycle incrementally equals what the cycle would work out from
the snapshot alone: the pending index (``PendingBook``), the queues' usage, the capacity, the
base workspace. Checked op by op against a plain model, and cycle by cycle over simulated runs
with failures, retries, preemption and dependencies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from builders import job, profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_scheduler_workspace_refresh import state as ws_state

import gpufleet.core.controller as controller_mod
from gpufleet.core.pending import PendingBook
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI, Resources
from gpufleet.scheduler.snapshot import PendingIndex, PendingJob, Snapshot
from gpufleet.scheduler.usage import capacity_of
from gpufleet.scheduler.workspace import Workspace
from gpufleet.sim.engine import SimConfig, Simulation, TraceJob
from gpufleet.sim.replay import uniform_cluster, with_queues


def expected_index(pending: Sequence[PendingJob]) -> PendingIndex:
    by_queue: dict[str, list[PendingJob]] = {}
    for p in pending:
        by_queue.setdefault(p.spec.queue, []).append(p)
    return PendingIndex(
        {q: tuple(v) for q, v in by_queue.items()},
        not any(p.waiting_for or p.eligible_time > 0 for p in pending),
        all(p.spec.gpus_per_worker > 0 and p.spec.gpu_milli >= MILLI for p in pending),
        sum(p.nominated for p in pending),
        len({p.spec.priority for p in pending}) <= 1,
    )


def check_book(book: PendingBook, model: dict[str, PendingJob]) -> None:
    want = tuple(sorted(model.values(), key=lambda p: (p.submit_time, p.seq)))
    assert book.jobs() == want
    got = book.index()
    exp = expected_index(want)
    assert {q: tuple(v) for q, v in got.by_queue.items()} == exp.by_queue
    assert (got.ready, got.whole_only, got.nominated, got.one_priority) == (
        exp.ready,
        exp.whole_only,
        exp.nominated,
        exp.one_priority,
    )
    assert len(book) == len(model) and set(book) == set(model)


OPS = st.lists(
    st.tuples(
        st.sampled_from(("add", "add", "add", "view", "remove")),
        st.integers(0, 15),  # job number
        st.sampled_from(("a", "b", "c")),
        st.integers(0, 6),  # submit time
        st.booleans(),  # waiting / nominated / fractional flags, drawn per op
        st.booleans(),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.integers(1, 5))
def test_the_pending_book_agrees_with_the_jobs_it_holds(ops, check_every) -> None:
    book = PendingBook()
    model: dict[str, PendingJob] = {}
    for n, (op, k, q, submit, f1, f2, f3) in enumerate(ops):
        jid = f"j{k}"
        if op == "add" and jid not in model:
            p = job(
                jid,
                submit=float(submit),
                seq=k,
                queue=q,
                milli=500 if f3 else MILLI,
                priority=1 if f1 and f3 else 0,
            )
            p = replace(p, eligible_time=5.0 if f1 and f2 else 0.0)
            model[jid] = p
            book.put(p)
        elif op == "view" and jid in model:
            # the controller's new view of a pending job: same job, other flags
            p = replace(model[jid], nominated=f1, waiting_for="waiting for afterok:x" if f2 else "")
            model[jid] = p
            book.put(p)
        elif op == "remove":
            assert book.remove(jid) == (model.pop(jid, None) is not None)
        if n % check_every == 0:
            check_book(book, model)
    check_book(book, model)


def test_a_job_requeued_before_later_arrivals_goes_back_to_its_place() -> None:
    book = PendingBook()
    first, second = job("1", submit=1.0, seq=1), job("2", submit=2.0, seq=2)
    book.put(first)
    book.put(second)
    assert book.jobs() == (first, second)
    book.remove("1")
    assert book.jobs() == (second,)
    book.put(first)  # requeued after a preemption: its arrival is still the earliest
    assert book.jobs() == (first, second)
    assert book.index().by_queue["default"] == (first, second)


# ----- the controller, cycle by cycle ------------------------------------------------------


def check_snapshot(snap: Snapshot) -> None:
    assert snap.capacity == capacity_of(snap.nodes)
    used: dict[str, Resources] = {}
    for r in snap.running:
        used[r.spec.queue] = used.get(r.spec.queue, Resources()) + r.spec.total_resources
    assert snap.queue_used == {q: r for q, r in used.items() if r != Resources()}
    assert snap.workspace is not None
    assert ws_state(snap.workspace) == ws_state(Workspace(snap.nodes))
    assert list(snap.pending) == sorted(snap.pending, key=lambda p: (p.submit_time, p.seq))
    ends = [(r.expected_end, r.allocation) for r in snap.running if r.expected_end is not None]
    assert snap.ends == tuple(sorted(ends, key=lambda e: e[0]))  # stable: ties in running order
    idx = snap.pending_index
    assert idx is not None
    exp = expected_index(snap.pending)
    assert {q: tuple(v) for q, v in idx.by_queue.items()} == exp.by_queue
    assert (idx.ready, idx.whole_only, idx.nominated, idx.one_priority) == (
        exp.ready,
        exp.whole_only,
        exp.nominated,
        exp.one_priority,
    )


@st.composite
def workloads(draw):
    jobs = []
    t = 0.0
    for i in range(draw(st.integers(5, 40))):
        t += draw(st.sampled_from((0.0, 0.0, 5.0, 30.0)))
        gpus = draw(st.sampled_from((1, 2, 4, 8, 16)))
        frac = draw(st.integers(0, 5)) == 0
        base = job(
            str(i),
            gpus=1 if frac else min(gpus, 8),
            workers=1 if frac else max(1, gpus // 8),
            milli=500 if frac else MILLI,
            cpus=0,
            mem_gib=0,
            queue=draw(st.sampled_from(("a", "b"))),
            limit=draw(st.sampled_from((None, 50.0, 500.0))),
            retries=draw(st.integers(0, 2)),
            priority=draw(st.sampled_from((0, 0, 0, 1))),
        )
        deps = ()
        if i and draw(st.integers(0, 4)) == 0:
            deps = (("afterok", str(draw(st.integers(0, i - 1)))),)
        jobs.append(
            TraceJob(str(i), base.spec, t, draw(st.sampled_from((10.0, 60.0, 400.0))), deps)
        )
    return jobs


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    workloads(),
    st.sampled_from((("fairshare", "easy", ()), ("fifo", "easy", ()), ("las", "easy", ("order",)))),
    st.booleans(),
)
def test_every_snapshot_agrees_with_what_the_cycle_would_work_out(jobs, choice, failures) -> None:
    order, backfill, preempt = choice
    cluster = with_queues(uniform_cluster(4, 8, 2), (QueueSpec("a"), QueueSpec("b")))
    prof = profile(order=order, place="topology", backfill=backfill, preempt=preempt)
    cfg = SimConfig(mtbf_s=300.0, repair_s=40.0, horizon_s=600.0) if failures else SimConfig()
    seen = []
    real = controller_mod.run_cycle
    sim = Simulation(cluster, prof, jobs, cfg)

    def checked(snap, p):
        check_snapshot(snap)
        # the views, kept node by node, are what every node's state says now
        fresh = tuple(replace(n, _view=None).view() for n in sim.controller.nodes.values())
        assert snap.nodes == fresh
        seen.append(snap.cycle)
        return real(snap, p)

    controller_mod.run_cycle = checked
    try:
        sim.run()
    finally:
        controller_mod.run_cycle = real
    assert seen


def test_a_retry_in_back_off_makes_the_index_not_ready() -> None:
    from builders import cluster_spec, spec

    from gpufleet.core.controller import Controller
    from gpufleet.core.events import JobSubmitted, TaskExited, TaskStarted

    c = Controller(profile(), cluster_spec(1, 8))
    c.handle(0.0, JobSubmitted("x", spec("x", gpus=8, retries=1), 0.0))
    c.handle(1.0, TaskStarted("x", 1, 0))
    c.handle(2.0, TaskExited("x", 1, 0, 1))  # failed: back to pending until t=12
    snap = c.snapshot(3.0)
    check_snapshot(snap)
    assert [p.id for p in snap.pending] == ["x"]
    assert snap.pending_index is not None and not snap.pending_index.ready


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(("a", "b", "c")), st.integers(0, 5), st.sampled_from((0, 0, 0, 1, 2))
        ),
        max_size=30,
    ),
    st.sampled_from(("fairshare", "fifo")),
    st.integers(0, 30),
)
def test_orders_through_the_index_equal_orders_without_it(jobs, order, admitted) -> None:
    """Fair share reads usage as it goes: admit the first ``admitted`` jobs on the way."""
    from gpufleet.scheduler.usage import QueueUsage

    book = PendingBook()
    for n, (q, submit, prio) in enumerate(jobs):
        book.put(job(f"j{n}", submit=float(submit), seq=n, queue=q, priority=prio))
    pending = book.jobs()
    plugin = profile(order=order).order
    got = []
    for index in (book.index(), None):
        snap = Snapshot(10.0, (), (), pending, usage={"a": 3000.0}, pending_index=index)
        usage = QueueUsage({}, (), Resources(16_000, 10**6, 10**6))
        seq = []
        for p in plugin.order(snap.pending, snap, usage):
            seq.append(p.id)
            if len(seq) <= admitted:
                usage.add(p.spec.queue, p.spec.total_resources)
        got.append(seq)
    assert got[0] == got[1]
    assert sorted(got[0]) == sorted(p.id for p in pending)
    if order == "fairshare":  # and as the plain heap of queues gives it
        snap = Snapshot(10.0, (), (), pending, usage={"a": 3000.0})
        usage = QueueUsage({}, (), Resources(16_000, 10**6, 10**6))
        seq = []
        for p in reference_fairshare(plugin, snap, usage):
            seq.append(p.id)
            if len(seq) <= admitted:
                usage.add(p.spec.queue, p.spec.total_resources)
        assert seq == got[0]


def reference_fairshare(plugin, snap, usage):
    """order/fairshare as first written: pop the least-share queue, push it back each time."""
    import heapq

    by_queue = {}
    for p in snap.pending:
        by_queue.setdefault(p.spec.queue, []).append(p)
    for jobs in by_queue.values():
        jobs.sort(key=lambda p: (-p.spec.priority, p.submit_time, p.seq), reverse=True)
    heap = [(plugin.share(q, snap, usage), q) for q in by_queue]
    heapq.heapify(heap)
    while heap:
        _, q = heapq.heappop(heap)
        jobs = by_queue[q]
        yield jobs.pop()
        if jobs:
            heapq.heappush(heap, (plugin.share(q, snap, usage), q))
