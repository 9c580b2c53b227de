"""Make-before-break in the simulator (issue 25, ADR 0045): a service replica that a
defragmentation move takes serves on while its replacement starts off the leaf being freed; the
replacement is ready when its readiness probe would first pass (``SimConfig.replica_up_s``, the
agent's probe timing: ``Probe.ready_after``), and only then does the old replica stop and the
gang start. The same core as live (tests/unit/test_core_defrag_services.py), driven by the
simulator's clock and its replicas."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster_spec, profile, spec

from gpufleet.core.events import ServiceCreated
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.service import Backoff, Probe, Rollout, ServiceSpec
from gpufleet.sim.engine import SimConfig, Simulation, TraceJob

S = JobState
PROBE = Probe("http", "/ready", initial_delay_s=5.0, period_s=10.0, success_threshold=2)


def pinned(job_id: str, node: str, gpus: int, **kw: object) -> JobSpec:
    return replace(spec(job_id, gpus=gpus, **kw), nodelist=(node,))  # type: ignore[arg-type]


def web(readiness: Probe | None = PROBE) -> ServiceSpec:
    tmpl = JobSpec("web", "alice", gpus_per_worker=4, command=("serve",))
    return ServiceSpec("web", tmpl, 0, 1, None, readiness, None, Rollout(), Backoff())


def scattered(readiness: Probe | None = PROBE, up_s: float = 25.0) -> Simulation:
    """4 nodes x 8 GPUs in 2 leaves (n00, n01 | n02, n03). web.1 on n02 (leaf-1) beside b3
    on n03; leaf-0 holds b0, b1, which may not be moved: each node has 4 GPUs taken, 4 free.
    A gang of 2 x 8 GPUs under one leaf arrives at 100."""
    jobs = [TraceJob(j, pinned(j, n, 8), 0.0, 10.0) for j, n in (("h0", "n00"), ("h1", "n01"))]
    jobs.append(TraceJob("h3", pinned("h3", "n03", 8), 0.0, 10.0))
    jobs += [
        TraceJob("b0", pinned("b0", "n00", 4, preemptible=False), 50.0, 500.0),
        TraceJob("b1", pinned("b1", "n01", 4, preemptible=False), 50.0, 500.0),
        TraceJob("b3", pinned("b3", "n03", 4), 50.0, 500.0),
        TraceJob("g", spec("g", gpus=8, workers=2, topology="leaf", required=True), 100.0, 20.0),
    ]
    sim = Simulation(
        cluster_spec(4, 8, leaves=2),
        profile(place="bestfit", preempt=["defrag"]),
        jobs,
        SimConfig(replica_up_s=up_s),
    )
    sim.at(1.0, ServiceCreated(web(readiness)))
    return sim


def history(sim: Simulation, job_id: str) -> list[tuple[float, S]]:
    return [(t, st) for t, st, _ in sim.controller.jobs[job_id].job.history]


def test_a_probe_is_ready_at_its_first_pass_after_the_replica_answers() -> None:
    assert PROBE.ready_after(0.0) == 15.0  # the first probe at 5 s passes, the second at 15
    assert PROBE.ready_after(25.0) == 35.0  # the probes at 5, 15 fail; 25 and 35 pass
    assert PROBE.ready_after(26.0) == 45.0
    assert Probe("tcp").ready_after(0.0) == 0.0


def test_a_moved_replica_stops_only_once_its_replacement_is_ready_in_the_simulator() -> None:
    sim = scattered()
    sim.run(until=99.0)
    c = sim.controller
    assert c.jobs["web.1"].allocation[0].node == "n02"
    assert [b.job_id for b in sim.routes["web"]] == ["web.1"]  # ready at 1 + 35
    sim.run(until=300.0)
    assert (100.0, S.PREEMPTED) in history(sim, "b3")  # the batch job stops at once
    web2 = c.jobs["web.2"]
    assert web2.allocation[0].node in ("n00", "n01")  # off the leaf being freed
    assert history(sim, "web.2")[:2] == [(100.0, S.PENDING), (100.0, S.STARTING)]
    # the replacement is ready at 100 + 35; then, not before, the old replica stops
    assert history(sim, "web.1")[-1] == (135.0, S.CANCELLED)
    assert [b.job_id for b in sim.routes["web"]] == ["web.2"]
    g = history(sim, "g")
    assert (135.0, S.STARTING) in g
    assert sorted(p.node for p in c.jobs["g"].allocation) == ["n02", "n03"]
    assert c.services.services["web"].failures == 0  # a move is no failure
    assert sim.outcomes["g"].first_start == 135.0


def test_without_a_readiness_probe_a_running_replacement_is_ready_at_once() -> None:
    sim = scattered(readiness=None)
    sim.run(until=300.0)
    assert history(sim, "web.1")[-1] == (100.0, S.CANCELLED)
    assert sim.outcomes["g"].first_start == 100.0
