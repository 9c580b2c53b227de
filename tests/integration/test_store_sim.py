"""The store behind the real controller: a simulated run whose driver has the live server's
journal (``StoreJournal``) commits every step's transitions before its commands are carried
out, as live, and the store then agrees with the controller's memory, mid-run (what a restart
would load) and at the end."""

from __future__ import annotations

import pytest

from gpufleet.core.controller import Controller
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.job import JobSpec
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI, Resources
from gpufleet.scheduler.framework import Profile
from gpufleet.server.journal import StoreJournal
from gpufleet.server.store import NewJob, Store
from gpufleet.sim.engine import NodeFailure, SimConfig, Simulation, TraceJob

pytestmark = pytest.mark.both_stores  # the store's contract: SQLite and PostgreSQL


def _cluster() -> ClusterSpec:
    nodes = [NodeSpec(f"n{i}", "H100-SXM", 8, 64_000, 512_000, "leaf-0", "pod-0") for i in (0, 1)]
    return ClusterSpec.build("sim", nodes)


def _run(store: Store, until: float | None) -> Simulation:
    specs = [
        (JobSpec("gang", "alice", "vision", workers=2, gpus_per_worker=8), 0.0, 500.0),
        (JobSpec("small", "bob", "nlp", gpus_per_worker=2), 10.0, 300.0),
        (JobSpec("share", "bob", "nlp", gpu_milli=500), 20.0, 200.0),
        (JobSpec("four", "carol", "vision", gpus_per_worker=4, max_retries=1), 30.0, 900.0),
        (JobSpec("one", "alice", "vision"), 40.0, 100.0),
    ] + [
        (JobSpec(f"w{i}", "dave", "nlp", gpus_per_worker=1 + i % 3), 50.0 + i, 250.0)
        for i in range(8)
    ]
    ids = store.add_jobs([NewJob(s, t) for s, t, _ in specs])
    trace = [TraceJob(i, s, t, d) for i, (s, t, d) in zip(ids, specs, strict=True)]
    failure = SimConfig(failures=[NodeFailure(700.0, "n1", 400.0)])
    sim = Simulation(_cluster(), Profile.build(), trace, failure)
    sim.driver.journal = StoreJournal(store, sim.controller)  # the live server's journal
    sim.run(until=until)
    return sim


def _agree(store: Store, ctrl: Controller, job_id: str) -> None:
    rec = ctrl.jobs[job_id]
    row = store.job(job_id)
    assert row is not None
    j = rec.job
    got = (row.state, row.attempt, row.retries_used, row.start_time, row.end_time)
    assert got == (j.state, j.attempt, j.retries_used, j.start_time, j.end_time)
    assert (row.eligible_time, row.allocation) == (j.eligible_time, rec.allocation)
    assert row.attained_gpu_s == pytest.approx(j.attained_gpu_s)
    events = [(e.time, e.new, e.why) for e in store.job_events(job_id)]
    assert events == [(t, s, why) for t, s, why in j.history]


def test_store_mirrors_a_simulated_run_to_the_end(store: Store) -> None:
    sim = _run(store, until=None)
    ctrl = sim.controller
    assert all(r.job.finished for r in ctrl.jobs.values())
    for job_id in ctrl.jobs:
        _agree(store, ctrl, job_id)
    assert store.load_jobs_for_restart().jobs == ()
    used: dict[str, float] = {}
    for r in ctrl.jobs.values():
        used[r.job.spec.user] = used.get(r.job.spec.user, 0.0) + r.job.attained_gpu_s / 3600
    got = {u.key: u.gpu_hours for u in store.accounting(0.0, 1e9)}
    assert got == pytest.approx(used)
    assert [e.what for e in store.node_events("n1")] == ["lost", "resumed"]


def test_a_restart_mid_run_loads_what_the_controller_holds(store: Store) -> None:
    sim = _run(store, until=750.0)  # after n1 was lost, while jobs run and wait
    ctrl = sim.controller
    live = {i for i, r in ctrl.jobs.items() if not r.job.finished}
    st = store.load_jobs_for_restart()
    assert {j.id for j in st.jobs} == live and live
    for job_id in live:
        _agree(store, ctrl, job_id)
    fresh = Controller(Profile.build())
    fresh.restore(_cluster().nodes, st.restored_jobs())
    assert set(fresh.running) == set(ctrl.running)
    assert fresh.pending_count == ctrl.pending_count
    gpus = {i: r.job.spec.total_gpu_milli // MILLI for i, r in fresh.jobs.items()}
    assert gpus == {i: ctrl.jobs[i].job.spec.total_gpu_milli // MILLI for i in live}


def test_a_job_of_several_queues_restarts_in_the_queue_it_runs_in(store: Store) -> None:
    # Slurm's -p a,b: a is full, so j runs in b; the store and a restarted controller agree
    quota = {"a": 8, "b": 8}
    queues = [QueueSpec(n, Resources(g * MILLI, 10**9, 10**9)) for n, g in quota.items()]
    cluster = ClusterSpec.build("sim", _cluster().nodes, queues)
    specs = [
        (JobSpec("x", "alice", "a", gpus_per_worker=8), 0.0, 500.0),
        (JobSpec("j", "bob", "a", gpus_per_worker=8, queues=("a", "b")), 1.0, 500.0),
    ]
    ids = store.add_jobs([NewJob(s, t) for s, t, _ in specs])
    trace = [TraceJob(i, s, t, d) for i, (s, t, d) in zip(ids, specs, strict=True)]
    sim = Simulation(cluster, Profile.build(), trace, SimConfig())
    sim.driver.journal = StoreJournal(store, sim.controller)
    sim.run(until=100.0)
    ctrl = sim.controller
    j = ids[1]
    assert ctrl.jobs[j].job.spec.queue == "b"
    row = store.job(j)
    assert row is not None and row.spec.queue == "b" and row.spec.partitions == ("b", "a")
    fresh = Controller(Profile.build())
    fresh.queues = {q.name: q for q in queues}
    fresh.restore(cluster.nodes, store.load_jobs_for_restart().restored_jobs())
    assert fresh.jobs[j].job.spec.queue == "b"
    for q in quota:
        assert fresh.queue_used(q) == ctrl.queue_used(q) == Resources(8 * MILLI, 1000, 4096)
